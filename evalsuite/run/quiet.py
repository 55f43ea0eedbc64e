"""A packed run's engines kept in hand: Ctrl-C ends them all (Interrupt), what each has in flight
(Flight), and the device to one engine while it times its latency pass (Quiet).

The latency pass has the device to itself (`timing.quiet`, latency_pass): its own engine with
the neighbours paused and the device then found idle (their queued GPU work runs on), or a second
engine alone afterwards (evalsuite.run.packed), whose failure leaves the variant `partial`, not
`failed`. docs/config.md ("Several engines on one card") has the settings.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psutil

from evalsuite.core.rundir import RunDir
from evalsuite.core.types import Completion, InFlight, Request
from evalsuite.engine import Engine
from evalsuite.engine.offline import hold, release
from evalsuite.engine.registry import EngineKind
from evalsuite.run.config import RunConfig
from evalsuite.run.items import prompt_tokens


class Interrupt:
    """A packed run's Ctrl-C, which only the main thread receives: it ends every engine its
    runners started, at once, and refuses any engine started afterwards, so that each variant's
    thread stops within seconds instead of finishing its tasks."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._lock = threading.Lock()
        self._engines: list[Engine] = []

    def register(self, engine: Engine) -> None:
        with self._lock:
            if self.event.is_set():
                raise KeyboardInterrupt
            self._engines.append(engine)

    def now(self) -> None:
        with self._lock:
            self.event.set()
            engines = list(self._engines)
        for engine in engines:
            engine.close(wait=False)


class Flight:
    """What one packed engine has been sent and not yet answered, batch by batch: the record of a
    pause says what each paused neighbour was in the middle of."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sent: deque[list[int]] = deque()
        self.task: str | None = None

    def sent(self, requests: list[Request]) -> None:
        with self._lock:
            self._sent.append([prompt_tokens(r) for r in requests])

    def answered(self) -> None:
        with self._lock:
            if self._sent:
                self._sent.popleft()

    def clear(self) -> None:
        with self._lock:
            self._sent.clear()

    def now(self) -> InFlight:
        with self._lock:
            lengths = [n for batch in self._sent for n in batch]
        return InFlight(task=self.task if lengths else None, requests=len(lengths), longest_prompt=max(lengths, default=0))


class _Tracked:
    """An engine whose batches in flight its Flight keeps (the rest of it as the engine is)."""

    def __init__(self, engine: Engine, flight: Flight):
        self._engine, self._flight = engine, flight

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def generate(self, requests: list[Request], on_done: Any = None) -> list[Completion]:
        self._flight.sent(requests)
        try:
            return self._engine.generate(requests, on_done)
        finally:
            self._flight.answered()

    def pipelined(self, batches: Iterable[list[Request]]) -> Iterator[list[Completion]]:
        def sending() -> Iterator[list[Request]]:
            for batch in batches:  # taken from here as the engine is sent it
                self._flight.sent(batch)
                yield batch
        try:
            for completions in self._engine.pipelined(sending()):
                self._flight.answered()
                yield completions
        finally:
            self._flight.clear()


@dataclass
class Held:
    """The neighbours a timed pass stopped: their names, their processes, and what each had in flight."""

    names: list[str] = field(default_factory=list)
    procs: list[psutil.Process] = field(default_factory=list)
    in_flight: dict[str, InFlight] = field(default_factory=dict)
    running: list[str] = field(default_factory=list)  # engines left running beside it (`pause` false)


class Quiet:
    """A device to one engine while that engine times its latency pass (`timing: {quiet: pause}`): the
    pass waits until no other engine on the device is starting or closing, then stops every other one
    (its process tree, evalsuite.engine.offline.hold), noting what each had in flight, and lets
    them go on when it ends. Starts wait while a pass runs. One pass at a time; each wait and each
    pause is a span in phases.jsonl. With `pause` false (timing.alone false) it only says which
    engines work beside the pass. `kind`: what the run's engine mode can do (an engine that `pauses`
    takes the time it was held off its own timeouts)."""

    def __init__(self, run_dir: RunDir, kind: EngineKind, pause: bool = True) -> None:
        self.run_dir, self.kind, self.pause = run_dir, kind, pause
        self._cond = threading.Condition()
        self._starting: dict[str, str | None] = {}  # variant -> its device (None: the one device)
        self._working: dict[str, tuple[Engine, str | None, Flight | None]] = {}
        self._closing: dict[str, str | None] = {}  # variant -> its device, while its engine ends
        self._timing: str | None = None  # the variant whose pass has the device now

    @contextlib.contextmanager
    def starting(self, name: str, engine: Engine, gpu: str | None, flight: Flight | None = None) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: self._timing is None)
            self._starting[name] = gpu
        started = False
        try:
            yield
            started = True
        finally:
            with self._cond:
                self._starting.pop(name, None)
                if started:
                    self._working[name] = (engine, gpu, flight)
                self._cond.notify_all()

    def closing(self, name: str, gpu: str | None) -> None:
        """`name`'s engine is ending: no neighbour to pause, but its teardown still works the device."""
        with self._cond:
            self._working.pop(name, None)
            self._closing[name] = gpu
            self._cond.notify_all()

    def gone(self, name: str) -> None:
        with self._cond:
            self._working.pop(name, None)
            self._closing.pop(name, None)
            self._cond.notify_all()

    @contextlib.contextmanager
    def alone(self, name: str, gpu: str | None) -> Iterator[Held]:
        """The device to `name`'s engine for the block; yields whom it stopped meanwhile."""
        if not self.pause:
            with self._cond:
                running = sorted(n for n, (_, g, _) in self._working.items() if n != name and g == gpu)
            yield Held(running=running)
            return
        with self.run_dir.phase("quiet_wait", name), self._cond:
            self._cond.wait_for(lambda: self._timing is None and all(
                g != gpu for n, g in [*self._starting.items(), *self._closing.items()] if n != name))
            self._timing = name
            others = {n: (e, f) for n, (e, g, f) in self._working.items() if n != name and g == gpu}
        held = Held(names=sorted(others))
        with contextlib.ExitStack() as stack:
            try:
                for other, (engine, flight) in sorted(others.items()):
                    held.procs += stack.enter_context(self._paused(other, engine, name))
                    held.in_flight[other] = flight.now() if flight is not None else InFlight()
                yield held
            finally:
                stack.close()
                with self._cond:
                    self._timing = None
                    self._cond.notify_all()

    @contextlib.contextmanager
    def _paused(self, name: str, engine: Engine, by: str) -> Iterator[list[psutil.Process]]:
        with self.run_dir.phase("paused", name, by=by) as span:
            procs = hold(engine.pid)
            t0 = time.monotonic()
            try:
                yield procs
            finally:
                release(procs)
                span["held_s"] = round(time.monotonic() - t0, 3)
                if self.kind.pauses:
                    engine.held_s += time.monotonic() - t0


def latency_pass(cfg: RunConfig, cpu: bool) -> str:
    """How a packed run times its latency pass: `beside` the neighbours (timing.alone false), with
    them stopped (`pause`), or on a `restart`ed engine alone (timing.quiet; auto: paused on a GPU
    where the engine mode `pauses` (offline), whose figures alone are the same engine's; restarted on a
    CPU, where a packed engine computes on a share of the cores, and for other modes (`vllm serve`, whose
    clients would time out))."""
    timing = cfg.timing
    if not timing.alone:
        return "beside"
    if timing.quiet != "auto":
        return timing.quiet
    return "restart" if cpu or not cfg.engine.kind.pauses else "pause"
