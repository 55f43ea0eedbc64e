"""A run's samples file read as the runner wrote it, for tests that watch a run in progress."""

from __future__ import annotations

import json
from pathlib import Path

from evalsuite.core.rundir import RunDir


def rows(run: Path, variant: str, task: str = "mmlu") -> list[dict]:
    """Every whole line, duplicates kept (RunDir.load_samples drops them, and these tests count them);
    the run appends while this reads, so a line without its newline is not yet written."""
    path = RunDir(run).samples_file(variant, task)
    return [json.loads(x) for x in path.read_text().split("\n")[:-1] if x.strip()] if path.exists() else []
