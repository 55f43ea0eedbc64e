"""The only module that talks to NVIDIA devices (through NVML, which needs no CUDA context).

NVML 'used' is constant across variants (vLLM reserves gpu_memory_utilization up front), so
it is recorded only as a cross-check: the peak of the engine's processes and of the device.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

from evalsuite.core.units import GIB


def _nvml():
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # no driver, no GPU, or nvidia-ml-py missing: nothing to sample
        return None


def nvml_missing() -> str | None:
    """Why NVML cannot be read here ("nvidia-ml-py not installed", "no GPU"); None where it can."""
    try:
        import pynvml  # noqa: F401
    except ImportError:
        return "nvidia-ml-py not installed"
    nv = _nvml()
    try:
        return None if nv is not None and nv.nvmlDeviceGetCount() > 0 else "no GPU"
    except Exception:  # noqa: BLE001 - a driver that lists no device
        return "no GPU"


def device_total_gib(index: int = 0) -> float | None:
    nv = _nvml()
    if nv is None:
        return None
    return nv.nvmlDeviceGetMemoryInfo(nv.nvmlDeviceGetHandleByIndex(index)).total / GIB


def device_memory_gib(index: int = 0) -> tuple[float, float]:
    """(total, free) memory of a GPU; (0, 0) where there is none to read."""
    nv = _nvml()
    if nv is None:
        return 0.0, 0.0
    info = nv.nvmlDeviceGetMemoryInfo(nv.nvmlDeviceGetHandleByIndex(index))
    return info.total / GIB, info.free / GIB


def visible_gpus() -> list[tuple[str, float, float]]:
    """(index, total GiB, free GiB) of each GPU this process may use, by NVML index (PCI bus order):
    every GPU, or those a CUDA_VISIBLE_DEVICES list of indices names; [] without NVML, or where that
    list names UUIDs or MIG instances, which the caller treats as the one device vLLM will take."""
    nv = _nvml()
    if nv is None:
        return []
    indices = list(range(nv.nvmlDeviceGetCount()))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        if not all(i.isdigit() for i in ids):
            return []
        indices = [int(i) for i in ids if int(i) in indices]
    out = []
    for i in indices:
        info = nv.nvmlDeviceGetMemoryInfo(nv.nvmlDeviceGetHandleByIndex(i))
        out.append((str(i), info.total / GIB, info.free / GIB))
    return out


def nvml_device(engine_env: dict[str, str], gpu: str | None = None) -> str | None:
    """The card an engine runs on, as NVML names it (an index in PCI bus order, or a UUID): the packed
    slot's `gpu`, else the first card the engine's CUDA_VISIBLE_DEVICES names, else this process's,
    else card 0; None for a MIG instance, whose utilization NVML does not report."""
    if gpu is not None:
        return str(gpu)
    for visible in (engine_env.get("CUDA_VISIBLE_DEVICES"), os.environ.get("CUDA_VISIBLE_DEVICES")):
        if visible is not None and visible.strip():
            first = visible.split(",")[0].strip()
            return None if first.startswith("MIG") else first
    return "0"


def utilization_reader(device: str | None) -> Callable[[], float | None] | None:
    """A reader of the card's utilization: the share (%) of NVML's last sample period (1/6 s to 1 s by
    product) in which any kernel ran, on any process; None without NVML or the card."""
    nv = _nvml()
    if nv is None or device is None:
        return None
    try:
        h = nv.nvmlDeviceGetHandleByIndex(int(device)) if device.isdigit() else nv.nvmlDeviceGetHandleByUUID(device)
        nv.nvmlDeviceGetUtilizationRates(h)
    except Exception:  # no such card, or one that does not report utilization
        return None

    def read() -> float | None:
        try:
            return float(nv.nvmlDeviceGetUtilizationRates(h).gpu)
        except Exception:
            return None
    return read


@dataclass
class IdleWait:
    """What waiting for an idle device found: idle (None: nothing could be read), after how long, and
    the readings of its last `quiet_s`."""

    ok: bool | None
    waited_s: float
    readings: list[float] = field(default_factory=list)


def wait_idle(read: Callable[[], float | None], quiet_s: float = 1.0, timeout_s: float = 30.0, poll_s: float = 0.1,
              clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> IdleWait:
    """Poll `read` until it reads 0 (no kernel ran) throughout `quiet_s`, at most `timeout_s`. A paused
    engine's process is stopped, but the kernels it queued before run to their end: a 32K prefill's
    chunks keep the card busy for a while after SIGSTOP."""
    t0 = clock()
    since: float | None = None
    window: list[float] = []
    while True:
        value, now = read(), clock()
        if value is None:
            return IdleWait(None, now - t0, window)
        if value > 0:
            since, window = None, [value]
        elif since is None:
            since, window = now, [value]
        else:
            window.append(value)
        if since is not None and now - since >= quiet_s:
            return IdleWait(True, since - t0, window)
        if now - t0 >= timeout_s:
            return IdleWait(False, now - t0, window[-int(quiet_s / poll_s) - 1:])
        sleep(poll_s)


class NvmlPeak:
    """Samples device memory used and the bytes held by our process tree (the engine's, given
    `root`), keeping peaks, and how many other processes shared a device with that tree."""

    def __init__(self, interval_s: float = 0.1, root: Callable[[], int | None] | None = None):
        self.nv = _nvml()
        # whose process tree is "ours": the engine's own process where it has one, so that engines
        # this process runs side by side (run --parallel) count as each other's other processes
        self.root = root
        self.interval_s = interval_s
        self.device_peak = 0
        self.tree_peak = 0
        self.others_max = 0
        self.seen_ours = False  # NVML listed a process of our tree: its PIDs are ours to compare
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _tree_pids(self) -> set[int]:
        pid = self.root() if self.root else os.getpid()
        if pid is None:  # the engine's process is not started yet
            return set()
        try:
            root = psutil.Process(pid)
            return {pid, *(p.pid for p in root.children(recursive=True))}
        except psutil.NoSuchProcess:
            return set()

    def _sample(self) -> None:
        pids = self._tree_pids()
        for i in range(self.nv.nvmlDeviceGetCount()):
            h = self.nv.nvmlDeviceGetHandleByIndex(i)
            self.device_peak = max(self.device_peak, self.nv.nvmlDeviceGetMemoryInfo(h).used)
            procs = self.nv.nvmlDeviceGetComputeRunningProcesses(h)
            ours = [p for p in procs if p.pid in pids]
            self.tree_peak = max(self.tree_peak, sum(p.usedGpuMemory or 0 for p in ours))
            if ours:  # only the devices our engine uses: other GPUs' tenants share nothing with it
                self.seen_ours = True
                self.others_max = max(self.others_max, len(procs) - len(ours))

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._sample()
            except Exception:  # a process that exits between listing and reading is skipped
                continue

    def __enter__(self):
        if self.nv is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def other_processes(self) -> int | None:
        """The most processes outside our tree seen at once on a device our tree used; None where
        NVML cannot tell (no driver, or a PID namespace in which our own PIDs never appear)."""
        return self.others_max if self.nv is not None and self.seen_ours else None

    def peak_gib(self) -> float | None:
        """The engine tree's peak; the device's when per-process accounting is unavailable (containers)."""
        if self.nv is None:
            return None
        return (self.tree_peak or self.device_peak) / GIB

    def peak_is_own(self) -> bool:
        """Whether peak_gib() is the tree's own bytes rather than the whole device's (which, with
        engines side by side, counts the others' too)."""
        return self.tree_peak > 0
