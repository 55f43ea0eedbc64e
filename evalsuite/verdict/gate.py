"""The quality gate: does a candidate keep accuracy, memory and latency within a baseline's limits?

run_gate judges each candidate variant (and control) against the baseline, check by check
(verdict/checks.py), on the sides picked by verdict/sides.py, into a GateReport. A candidate passes
only if EVERY check passes, each one-sided at alpha: an intersection-union test (Berger 1982), so no
multiplicity adjustment on the pass, and one candidate's verdict never depends on which others share
the call. A candidate with no failed check but no evidence is `inconclusive` (exit 3). A control's
verdict never sets the exit code: its checks are a noise reference beside the candidates'.
The decision rules: evalsuite/verdict/gate_rules.yaml; the reasoning: docs/statistics.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from evalsuite.core.errors import ConfigError
from evalsuite.core.types import HostLoad, definitions_unlike
from evalsuite.verdict.checks import MISSING, Check, Pair, decide, evaluate
from evalsuite.verdict.compare import is_latency, label_entries
from evalsuite.verdict.rules import Rules
from evalsuite.verdict.sides import OnlyControls, Side, baseline_variant, candidate_variants, pick_controls

Verdict = Literal["passed", "failed", "inconclusive", "skipped"]
EXIT_CODES = {"passed": 0, "skipped": 0, "failed": 1, "inconclusive": 3}


@dataclass
class GateReport:
    baseline: str
    rules_path: str
    rules: Rules
    checks: list[Check]
    controls: list[str] = field(default_factory=list)  # candidates that measure the engine's own noise
    # by label, the host's load over each side's latency pass: a latency check on a loaded host is said so
    loads: dict[str, HostLoad | None] = field(default_factory=dict)
    # candidate -> task -> how its definition's version differs from the baseline's (core.types.definitions_unlike):
    # the report says so beside its checks, which judge scores of two definitions
    redefined: dict[str, dict[str, str]] = field(default_factory=dict)

    def candidates(self) -> list[str]:
        return list(dict.fromkeys(c.candidate for c in self.checks))

    def verdict(self, candidate: str) -> Verdict:
        """failed: a check failed; inconclusive: none failed, but an accuracy check is too small to
        judge (intersection-union: every check must show its drop within its limit), or no accuracy
        check passed on evidence (all at chance), unless `insufficient_n: pass` lets small checks
        through; skipped: the variant did not run and nobody named it; else passed. A task at chance
        does not hold the others back: a model without the skill has none to lose there."""
        checks = [c for c in self.checks if c.candidate == candidate]
        if any(c.status == "fail" for c in checks):
            return "failed"
        if all(c.status == "skip" for c in checks):
            return "skipped"
        return self.accuracy_verdict(candidate)

    def accuracy_verdict(self, candidate: str) -> Verdict:
        """The verdict of the accuracy checks alone, by the same rules: `passed` only where every one
        shows its drop within its limit on evidence. What `report` means by "within the accuracy
        limits" when it picks a variant for memory or speed."""
        accuracy = [c for c in self.checks if c.candidate == candidate and c.unit == "pt" and c.status != "skip"]
        if any(c.status == "fail" for c in accuracy):
            return "failed"
        if any(c.status == "warn" for c in accuracy):
            return "inconclusive"
        let_through = self.rules.insufficient_n == "pass" and any(c.status == "pass" for c in accuracy)
        if not any(c.evidence for c in accuracy) and not let_through:  # none at all: no evidence either
            return "inconclusive"
        return "passed"

    def verdicts(self) -> dict[str, Verdict]:
        return {cand: self.verdict(cand) for cand in self.candidates()}

    def judged(self) -> dict[str, Verdict]:
        """The verdicts that count: a control is a noise reference, never a verdict."""
        return {cand: v for cand, v in self.verdicts().items() if cand not in self.controls}

    @property
    def exit_code(self) -> int:
        """1 if any candidate failed, else 3 if any is inconclusive, else 0; controls never count."""
        return max((EXIT_CODES[v] for v in self.judged().values()), default=0, key=lambda x: (x == 1, x))

    def failing(self, candidate: str) -> list[Check]:
        """The checks that failed this candidate, most telling first: a drop shown beyond its limit,
        then a change not shown within it, then a figure not measured."""
        order = {"beyond the limit": 0, "not shown within": 1}
        return sorted((c for c in self.checks if c.candidate == candidate and c.status == "fail"),
                      key=lambda c: order.get(failure_kind(c), 2))

    @property
    def passed(self) -> bool:
        return self.exit_code == 0

    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]

    def changed_shares(self, candidate: str) -> dict[str, tuple[int, int]]:
        """Per accuracy metric, (answers changed, paired items) against the baseline: beside a control's,
        how far a candidate moves answers beyond the engine's own nondeterminism."""
        return {c.metric: (c.changed, c.n) for c in self.checks
                if c.candidate == candidate and c.changed is not None and c.n}


def failure_kind(c: Check) -> str:
    """Why a failed check failed: the variant did not run to a usable status; its metric was not
    measured; the change is shown to exceed the limit (the whole interval beyond it, or a figure
    without one past it); or the run's n could not show the change to be within the limit."""
    if c.rule == "status":
        return "variant not usable"
    if c.value is None:
        return "not measured"
    if c.low is None or (c.limit is not None and c.low > c.limit):
        return "beyond the limit"
    return "not shown within"


def failed_checks_line(report: GateReport, candidate: str, most: int = 2) -> str:
    """The checks a failed candidate failed, in a few words each: `needle/acc dropped 50.0 pt (beyond the limit 5 pt)`."""
    out = []
    for c in report.failing(candidate)[:most]:
        if c.change is None or (isinstance(c.change, float) and math.isnan(c.change)):
            out.append(f"{c.metric} {failure_kind(c)}")
        else:
            if c.unit == "pt":  # a drop in points: said as one, never as a signed "+7.0 pt"
                change = f"{'dropped' if c.change >= 0 else 'rose'} {abs(c.change):.1f} pt"
            else:
                change = f"{c.change:+.1f}%"
            out.append(f"{c.metric} {change} ({failure_kind(c)} {c.limit:g}{' pt' if c.unit == 'pt' else '%'})")
    more = len(report.failing(candidate)) - most
    return "; ".join(out) + (f"; {more} more" if more > 0 else "")


def _add_noise(report: GateReport) -> None:
    """Each candidate's accuracy check learns the control's interval of the same drop: its two one-sided
    bounds at the rules' confidence, a two-sided interval at 2 x confidence - 1 (90% at 95%). A drop
    inside it is no larger than what rerunning the baseline (or another engine mode) does by itself.
    Where the control changed no answer, its interval is only the small-n floor (what no change at
    this n cannot exclude), not a measured noise: no band is claimed."""
    level = f"{2 * report.rules.confidence - 1:.0%}"
    for control in report.controls:
        band = {c.metric: (c.low, c.high) for c in report.checks
                if c.candidate == control and c.low is not None and c.changed}
        for c in report.checks:
            if c.candidate == control or c.metric not in band or c.change is None:
                continue
            c.noise = band[c.metric]
            if c.noise[0] <= c.change <= c.noise[1]:
                c.detail += (f"; inside control `{control}`'s {level} interval of the same drop "
                             f"({c.noise[0]:+.2f}..{c.noise[1]:+.2f} pt): no larger than its noise")


def _add_timing_noise(report: GateReport) -> None:
    """Each candidate's latency or throughput check learns the control's change of the same figure
    and its bounds: a change no larger than rerunning the baseline's is the engine's own noise."""
    for control in report.controls:
        band = {c.metric: c for c in report.checks
                if c.candidate == control and c.unit == "%" and is_latency(c.metric) and c.change is not None}
        for c in report.checks:
            ref = band.get(c.metric)
            if c.candidate == control or ref is None or c.status == "skip":
                continue
            c.noise = (ref.low, ref.high) if ref.low is not None else None
            bounds = f" [{ref.low:+.1f}, {ref.high:+.1f}]" if ref.low is not None else ""
            c.detail += f"; control `{control}`: {ref.change:+.1f}%{bounds}"


def run_gate(baseline: Side, candidates: list[Side], rules: Rules, rules_path: str,
             controls: list[Side] | None = None) -> GateReport:
    """Each candidate variant (and control) against the baseline; names are run:variant only where they
    clash. On a large run each paired test is seconds: a caller that needs the verdicts twice (the end
    of `evalsuite run`: the summary's gate column, then the report page) hands this report along."""
    base = baseline_variant(baseline)
    entries = [(baseline.run_dir, base)]
    ctrl = pick_controls(baseline, base, candidates, controls)
    is_control, named = [], set()
    for side in [*candidates, *ctrl]:
        for v in candidate_variants(side, baseline.run_dir, base):
            key = (side.run_dir.root.resolve(), v.variant)
            if key not in {(rd.root.resolve(), e.variant) for rd, e in entries}:
                entries.append((side.run_dir, v))
            if side in ctrl:
                is_control.append(key)
            if side.variant:  # named by the user: its not running is a failure, whoever else is called
                named.add(key)
    labels = label_entries(entries)
    control_labels = [label for (rd, e), label in zip(entries, labels, strict=True)
                      if (rd.root.resolve(), e.variant) in is_control]
    if len(entries) - 1 == len(control_labels):
        raise OnlyControls(control_labels)
    checks: list[Check] = []
    for (rd, cand), label in zip(entries[1:], labels[1:], strict=True):
        explicit = (rd.root.resolve(), cand.variant) in named
        found = evaluate(rules, Pair(baseline.run_dir, base, rd, cand), label, explicit=explicit)
        checks += _as_control(found) if label in control_labels else found
    if not any(c.status != "skip" for c in checks):
        raise ConfigError(f"{rules_path}: no metric of baseline {base.variant!r} matched a rule, or no candidate ran; "
                          f"nothing was checked")
    decide(rules, checks)
    report = GateReport(labels[0], rules_path, rules, checks, control_labels,
                        {label: e.host_load for (_, e), label in zip(entries, labels, strict=True)})
    report.redefined = {label: how for (_, e), label in zip(entries[1:], labels[1:], strict=True)
                        if (how := definitions_unlike(base, e))}
    _add_noise(report)
    _add_timing_noise(report)
    return report


def _as_control(checks: list[Check]) -> list[Check]:
    """A control is a noise reference where it measured; a task it never ran is not its failure."""
    for c in checks:
        if c.status == "fail" and c.detail.startswith(MISSING):
            c.status, c.detail = "skip", "the control did not measure it"
    return checks
