"""The gate's sides: which variant is the baseline, which are candidates, which are controls.

A side is a run folder and, optionally, one of its variants. What cannot be picked is a SideError
that says which side and the facts (the run, the names it holds); the command line words it with
its flags (cli/track.py), since which flag named a side is the command line's to know.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from evalsuite.core.errors import ConfigError
from evalsuite.core.rundir import RunDir
from evalsuite.core.types import USABLE_STATUSES, VariantResult

Role = Literal["baseline", "candidate", "control"]


@dataclass
class Side:
    """One side of the gate as given: a run folder and, optionally, one of its variants."""

    run_dir: RunDir
    variant: str | None = None


class SideError(ConfigError):
    """A side that cannot be picked: `side` is the one given, `role` the part it plays in the call
    that failed (a control's variants are read as a candidate's)."""

    def __init__(self, side: Side, role: Role, message: str):
        super().__init__(message)
        self.side, self.role = side, role


class BaselineUnnamed(SideError):
    """A baseline run of several variants, none named, and no `baseline` in its config."""

    def __init__(self, side: Side, run_id: str, names: list[str]):
        super().__init__(side, "baseline", f"baseline: run {run_id} holds {', '.join(names)}; name one "
                                           f"(or set `baseline` in its config)")
        self.run_id, self.names = run_id, names


class NotAVariant(SideError):
    """A variant named that the run does not hold."""

    def __init__(self, side: Side, role: Role, name: str, run_id: str, names: list[str]):
        super().__init__(side, role, f"{role}: {name!r} is not a variant of run {run_id} (allowed: {', '.join(names)})")
        self.name, self.run_id, self.names = name, run_id, names


class NoCandidate(SideError):
    """A candidate run that holds no variant to judge: only the baseline itself and its controls."""

    def __init__(self, side: Side, run_id: str, baseline: str, controls: list[str]):
        but = f" but its controls ({', '.join(controls)}), which are noise references" if controls else ""
        super().__init__(side, "candidate", f"candidate: run {run_id} has no variant to compare with {baseline!r}"
                                            f"{but}; nothing to judge")
        self.run_id, self.baseline, self.controls = run_id, baseline, controls


class ControlTaken(SideError):
    """A control given that is the baseline or a candidate (`whole_run`: the candidate run that
    judges every variant of it, where it was given without one)."""

    def __init__(self, side: Side, taken_by: Literal["baseline", "candidate"], whole_run: str | None = None):
        taken = "the baseline" if taken_by == "baseline" else "a candidate"
        super().__init__(side, "control", f"control {side.run_dir.root}:{side.variant}: is {taken}; a control is "
                                          f"another variant (the baseline rerun, or another engine mode)")
        self.taken_by, self.whole_run = taken_by, whole_run


class OnlyControls(ConfigError):
    """Every candidate given is a control: nothing is left to judge."""

    def __init__(self, labels: list[str]):
        super().__init__(f"nothing to judge: every candidate given is a control ({', '.join(labels)}), a noise "
                         f"reference, never a verdict")
        self.labels = labels


def baseline_variant(side: Side) -> VariantResult:
    """The variant named, else the only variant, else the config's `baseline` key."""
    rd = side.run_dir
    record = rd.load_run()
    names = [v.variant for v in record.variants]
    name = side.variant or (names[0] if len(names) == 1 else rd.read_config().get("baseline"))
    if not name:
        raise BaselineUnnamed(side, record.run_id, names)
    v = record.variant(name)
    if v is None:
        raise NotAVariant(side, "baseline", name, record.run_id, names)
    if v.status not in USABLE_STATUSES:
        raise ConfigError(f"baseline variant {name!r} of run {record.run_id} is {v.status}: {v.reason or '-'}")
    return v


def candidate_variants(side: Side, base_rd: RunDir, base: VariantResult) -> list[VariantResult]:
    """The variant named, else every variant of the candidate run but the baseline itself and the
    controls its config names: a control is named, never a candidate by default."""
    record = side.run_dir.load_run()
    if side.variant:
        v = record.variant(side.variant)
        if v is None:
            raise NotAVariant(side, "candidate", side.variant, record.run_id, [v.variant for v in record.variants])
        return [v]
    same_run = side.run_dir.root.resolve() == base_rd.root.resolve()
    controls = {str(n) for n in side.run_dir.read_config().get("controls") or []}
    out = [v for v in record.variants if not (same_run and v.variant == base.variant) and v.variant not in controls]
    if not out:
        raise NoCandidate(side, record.run_id, base.variant, sorted(controls))
    return out


def control_sides(baseline: Side, controls: list[Side] | None) -> list[Side]:
    """The controls given, else the baseline run's config `controls:` (variants of that run)."""
    if controls is not None:
        return controls
    names = baseline.run_dir.read_config().get("controls") or []
    measured = {v.variant for v in baseline.run_dir.load_run().variants}
    # a control the config names but the run never measured (a run limited with -V) is no noise floor
    return [Side(baseline.run_dir, str(n)) for n in names if str(n) in measured]


def pick_controls(baseline: Side, base: VariantResult, candidates: list[Side], controls: list[Side] | None) -> list[Side]:
    """control_sides, less the baseline and every candidate: a control's checks are a noise reference,
    not a verdict, so a candidate that were also a control would pass unjudged. One given (`controls`)
    that is a candidate, named (RUN:VARIANT) or as one of a run's variants (RUN), or the baseline, is
    refused; one the config names is left out where named as a candidate."""
    taken: dict[tuple, tuple[str, str | None]] = {(c.run_dir.root.resolve(), c.variant): ("candidate", None)
                                                  for c in candidates if c.variant}
    for c in candidates:
        if not c.variant:
            for v in candidate_variants(c, baseline.run_dir, base):
                taken[(c.run_dir.root.resolve(), v.variant)] = ("candidate", c.run_dir.root.name)
    taken[(baseline.run_dir.root.resolve(), base.variant)] = ("baseline", None)
    out = []
    for side in control_sides(baseline, controls):
        role = taken.get((side.run_dir.root.resolve(), side.variant))
        if role and controls is not None:
            raise ControlTaken(side, *role)
        if not role:
            out.append(side)
    return out
