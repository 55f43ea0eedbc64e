"""Progress display: rich bars on a terminal, quiet lines elsewhere (CI logs, pipes).

An engine's start is a step of its own, with an estimate from this machine's past starts of the same
model (StartTimes, in the cache): on a CPU it is often most of a short run, and a bare spinner reads
as a hang. Where the starts took most of the run, the display says so as it closes.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import sys
import threading
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, ProgressColumn
from rich.progress import Progress as RichProgress
from rich.progress import TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.text import Text

from evalsuite.core.env import default_cache_dir
from evalsuite.engine.registry import engine_kind

console = Console(stderr=True)
DOMINATES = 0.5  # share of a run's time in engine starts from which the run says so
KEPT = 10  # starts kept per model: the estimate follows the machine as it changes


class StartTimes:
    """This machine's past engine starts (seconds), per model folder and engine mode, in the cache.
    Unreadable or missing: no estimate, never an error; a start is worth no failed run."""

    def __init__(self, cache_dir: Path | None = None):
        self.path = (cache_dir or default_cache_dir()) / "engine-starts.json"

    def _read(self) -> dict[str, list[float]]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return {k: [float(x) for x in v if isinstance(x, (int, float))] for k, v in data.items() if isinstance(v, list)} \
            if isinstance(data, dict) else {}

    def estimate(self, key: str) -> tuple[float, str] | None:
        """(median seconds, what it rests on): this model's starts, else other models' on this machine."""
        data = self._read()
        own = data.get(key)
        past = own or [s for v in data.values() for s in v]
        if not past:
            return None
        which = "past start" if own else "past start of other models"
        return statistics.median(past), f"{len(past)} {which}".replace("start", "starts", len(past) > 1)

    def add(self, key: str, seconds: float) -> None:
        from filelock import FileLock

        with contextlib.suppress(OSError):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with FileLock(str(self.path) + ".lock", timeout=10):
                data = self._read()
                data[key] = [*data.get(key, []), round(seconds, 1)][-KEPT:]
                tmp = self.path.with_suffix(".tmp")
                tmp.write_text(json.dumps(data, indent=1))
                tmp.replace(self.path)


def start_key(mode: str, model_dir: str) -> str | None:
    """What an engine's start time depends on most: the engine mode and the model folder it loads
    (None for a stand-in without vLLM, whose starts say nothing of this machine's)."""
    return f"{mode} {Path(model_dir).name}" if engine_kind(mode).vllm else None


class _Count(ProgressColumn):
    """N/M for items; elapsed/estimate seconds for an engine's start."""

    def __init__(self):
        super().__init__()
        self._items = MofNCompleteColumn()

    def render(self, task) -> Text:
        if task.fields.get("seconds"):
            return Text(f"{task.completed:.0f}/{task.total:.0f} s" if task.total else "", style="progress.download")
        return self._items.render(task)


class Progress:
    def __init__(self, enabled: bool | None = None, cache_dir: Path | None = None):
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._rich = RichProgress(
            TextColumn("[bold]{task.description}"), BarColumn(), _Count(),
            TimeElapsedColumn(), TimeRemainingColumn(), console=console, disable=not self.enabled,
        )
        self.starts = StartTimes(cache_dir)
        self._t0, self._starting = 0.0, 0.0  # run start; seconds in which some engine was starting
        self._lock, self._active, self._since = threading.Lock(), 0, 0.0

    def __enter__(self):
        self._t0 = time.monotonic()
        self._rich.__enter__()
        return self

    def __exit__(self, *exc):
        out = self._rich.__exit__(*exc)
        note = self.startup_note(time.monotonic() - self._t0)
        if note and exc[0] is None:
            console.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
        return out

    def startup_note(self, wall_s: float) -> str | None:
        """Where engine starts took most of the run: what its time went to."""
        if wall_s <= 0 or self._starting < DOMINATES * wall_s:
            return None
        return (f"engine start-up took {self._starting:.0f} s of this run's {wall_s:.0f} s "
                f"({self._starting / wall_s:.0%}): each variant starts its own engine (model load, memory "
                "profiling, compilation), which --limit and --tasks do not shorten; more items cost little more")

    def expect(self, starts: int, key: str | None) -> None:
        """Say up front what the run's engine starts will take, where this machine has started one before."""
        found = self.starts.estimate(key) if starts and key else None
        if found:
            console.print(f"engine starts: {starts} x about {found[0]:.0f} s (from {found[1]} on this machine; "
                          "the tasks come on top)", markup=False, highlight=False)

    def _starting_now(self, delta: int) -> None:
        """Engines starting at once (a packed run) count once: the time in which any was starting."""
        with self._lock:
            now = time.monotonic()
            if self._active:
                self._starting += now - self._since
            self._active, self._since = self._active + delta, now

    def add(self, description: str, total: int, completed: int = 0) -> int:
        if not self.enabled:
            console.print(f"{description}: {completed}/{total} done before, running {total - completed}")
        return self._rich.add_task(description, total=total, completed=completed)

    def advance(self, task_id: int, n: int) -> None:
        self._rich.advance(task_id, n)

    @contextlib.contextmanager
    def status(self, text: str):
        task_id = self._rich.add_task(text, total=None)
        if not self.enabled:
            console.print(text)
        try:
            yield
        finally:
            self._rich.remove_task(task_id)

    @contextlib.contextmanager
    def engine_start(self, variant: str, key: str | None):
        """The start as a step: elapsed against this machine's estimate; the time kept for the next one."""
        found = self.starts.estimate(key) if key else None
        about = f" (about {found[0]:.0f} s, from {found[1]} here)" if found else \
            " (the first here: no estimate yet)" if key else ""
        total = found[0] if found else None
        task_id = self._rich.add_task(f"{variant}: starting engine" + (about if not found else ""), total=total,
                                      seconds=True)
        if not self.enabled:
            console.print(f"{variant}: starting engine{about}", markup=False, highlight=False)
        t0, done = time.monotonic(), threading.Event()

        def tick() -> None:  # the bar moves with the clock; past the estimate it stays just short of full
            while not done.wait(0.5):
                elapsed = time.monotonic() - t0
                self._rich.update(task_id, total=max(total, elapsed + 1), completed=elapsed)

        ticker = threading.Thread(target=tick, daemon=True)
        if total:
            ticker.start()
        self._starting_now(+1)
        try:
            yield
        finally:
            self._starting_now(-1)
            done.set()
            if total:
                ticker.join()
            self._rich.remove_task(task_id)
        seconds = time.monotonic() - t0
        if key:
            self.starts.add(key, seconds)
        if not self.enabled:
            console.print(f"{variant}: engine started in {seconds:.0f} s", markup=False, highlight=False)
