"""How much of a run's wall the GPU sat idle: NVML's utilization, read through the run.

NVML's utilization is the share of its last sample period (1/6 s to 1 s by product) in which any
kernel ran. Read every `interval_s`, each reading stands for the time since the reading before it;
the idle share of a card is the time-weighted mean of (1 - utilization) over the wall, and of
several cards their mean (the share of card-seconds with no kernel running). Without NVML nothing
is made up: the share is None and `sampled` says why ("no GPU", "nvidia-ml-py not installed").
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from evalsuite.core.types import RunWall

Reading = tuple[float, float]  # (clock seconds, utilization %)


def idle_share(readings: Sequence[Reading], start: float, end: float) -> float | None:
    """The time-weighted share of [start, end] in which no kernel ran, from one card's readings, each
    covering the time since the previous one (the first, since `start`); None with no reading inside.
    Time after the last reading is left out, not guessed."""
    covered = idle = 0.0
    prev = start
    for t, util in sorted(readings):
        a, b = max(prev, start), min(t, end)
        if b > a:
            covered += b - a
            idle += (b - a) * (1.0 - min(max(util, 0.0), 100.0) / 100.0)
        prev = max(prev, t)
    return idle / covered if covered > 0 else None


def mean_share(shares: Sequence[float | None]) -> float | None:
    """The mean over cards of their idle shares; None where no card had one."""
    found = [s for s in shares if s is not None and not math.isnan(s)]
    return sum(found) / len(found) if found else None


@dataclass
class Busy:
    """What a sampler found: the wall it watched, the idle share (None: not sampled) and how."""

    wall_s: float
    gpu_idle_frac: float | None
    sampled: str  # "nvml", or why not
    devices: list[str] = field(default_factory=list)
    readings: int = 0


class BusySampler:
    """Reads each card's utilization every `interval_s` on a thread, from enter to exit.

    `readers`: card name -> a reader returning utilization % (None: unreadable this time);
    an empty mapping samples nothing and reports `why`."""

    def __init__(self, readers: dict[str, Callable[[], float | None]], why: str = "nvml",
                 interval_s: float = 0.25, clock: Callable[[], float] = time.monotonic):
        self.readers, self.why, self.interval_s, self.clock = readers, why, interval_s, clock
        self.readings: dict[str, list[Reading]] = {name: [] for name in readers}
        self.start = self.end = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="evalsuite-gpu-busy")

    def sample(self) -> None:
        """One reading of every card (the thread calls it; tests call it with a fake clock)."""
        for name, read in self.readers.items():
            try:
                value = read()
            except Exception:  # noqa: BLE001 - a card that stops answering is left out of this look
                value = None
            if value is not None:
                self.readings[name].append((self.clock(), value))

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def __enter__(self) -> BusySampler:
        self.start = self.clock()
        if self.readers:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
            self.sample()  # the stretch since the last look
        self.end = self.clock()

    def result(self) -> Busy:
        end = self.end or self.clock()
        if not self.readers:
            return Busy(end - self.start, None, self.why)
        share = mean_share([idle_share(r, self.start, end) for r in self.readings.values()])
        n = sum(len(r) for r in self.readings.values())
        return Busy(end - self.start, share, "nvml" if share is not None else "nvml: no reading",
                    sorted(self.readers), n)


def gpu_sampler(interval_s: float = 0.25) -> BusySampler:
    """A sampler of every card this process may use (CUDA_VISIBLE_DEVICES), or one that says why none."""
    from evalsuite.memory.cuda import nvml_device, nvml_missing, utilization_reader, visible_gpus

    missing = nvml_missing()
    if missing:
        return BusySampler({}, missing, interval_s)
    # visible_gpus() lists none where CUDA_VISIBLE_DEVICES names UUIDs: its first card, as vLLM takes it
    names = [name for name, *_ in visible_gpus()] or [d for d in [nvml_device({})] if d is not None]
    readers = {name: r for name in names if (r := utilization_reader(name)) is not None}
    return BusySampler(readers, "nvml" if readers else "no utilization from NVML (a MIG instance)", interval_s)


def recorded(found: Busy, before: RunWall | None = None) -> RunWall:
    """The run record's figure: `found`, added to an earlier invocation's of the same run (--resume),
    the idle shares weighted by wall; an invocation not sampled leaves the sum unsampled."""
    here = RunWall(wall_s=round(found.wall_s, 3), sampled=found.sampled, devices=found.devices,
                   readings=found.readings,
                   gpu_idle_frac=None if found.gpu_idle_frac is None else round(found.gpu_idle_frac, 4))
    if before is None:
        return here
    wall = before.wall_s + here.wall_s
    both = before.gpu_idle_frac is not None and here.gpu_idle_frac is not None and wall > 0
    idle = round((before.gpu_idle_frac * before.wall_s + here.gpu_idle_frac * here.wall_s) / wall, 4) if both else None
    return RunWall(wall_s=round(wall, 3), gpu_idle_frac=idle,
                   sampled="nvml" if idle is not None else next(w.sampled for w in (here, before) if w.gpu_idle_frac is None),
                   devices=sorted(set(before.devices) | set(here.devices)), readings=before.readings + here.readings)
