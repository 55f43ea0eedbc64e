"""How `--baseline` of compare and report names a variant among the runs given."""

from __future__ import annotations

from pathlib import Path

from evalsuite.core.rundir import RunDir

BASELINE_HELP = ("Baseline variant: NAME, or RUN:NAME where runs share names (RUN: a run given, by its path "
                 "or by its folder's name as labels show it)")


def baseline_ref(wanted: str, run_dirs: list[RunDir]) -> tuple[RunDir | None, str]:
    """`NAME` -> (None, NAME); `RUN:NAME` -> (that run, NAME), RUN being one of the runs given by its
    folder's name (what a run:variant label shows) or by a path to it (what DIR:VARIANT gives)."""
    head, sep, name = wanted.rpartition(":")
    if sep and name:
        given = Path(head)
        for rd in run_dirs:
            if head == rd.run_id or (given.is_dir() and given.resolve() == rd.root.resolve()):
                return rd, name
    return None, wanted
