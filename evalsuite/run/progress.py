"""Progress display: rich bars on a terminal, quiet lines elsewhere (CI logs, pipes)."""

from __future__ import annotations

import contextlib
import sys

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn
from rich.progress import Progress as RichProgress
from rich.progress import TextColumn, TimeElapsedColumn, TimeRemainingColumn

console = Console(stderr=True)


class Progress:
    def __init__(self, enabled: bool | None = None):
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._rich = RichProgress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TimeRemainingColumn(), console=console, disable=not self.enabled,
        )

    def __enter__(self):
        self._rich.__enter__()
        return self

    def __exit__(self, *exc):
        return self._rich.__exit__(*exc)

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
