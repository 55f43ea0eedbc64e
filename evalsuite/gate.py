"""The quality gate: does a candidate keep accuracy, memory and latency within a baseline's limits?

Accuracy is judged on paired per-item results (the same sample ids in both runs), because
two variants answering the same questions differ far less than two independent samples:
the paired standard error is what makes a 1-point limit testable at a few hundred items.

Decision rule (rules file `decision`, default `upper_bound`): with drop = baseline - candidate
in points, mean d over paired items, se its standard error and z the one-sided normal quantile
of `confidence`,
  upper_bound  fail unless the data show the drop is within the limit: drop + z*se > limit
               (non-inferiority; conservative for the model's users, needs enough items)
  point        fail when the estimated drop exceeds the limit: drop > limit
  lower_bound  fail only when the drop is shown to exceed the limit: drop - z*se > limit
Every accuracy check also says whether the drop is significant (drop - z*se > 0).
Memory, capacity and latency checks compare the two numbers: growth or drop in percent.
"""

from __future__ import annotations

import fnmatch
import json
import math
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from evalsuite.compare import flat_metrics, fmt_value, read_config
from evalsuite.config import format_validation_error, load_raw
from evalsuite.errors import ConfigError
from evalsuite.metrics import mean_stderr
from evalsuite.records import RunDir
from evalsuite.types import VariantResult

LIMITS = ("max_drop_points", "max_drop_pct", "max_growth_pct")


class Rule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    metrics: list[str] = Field(min_length=1)  # glob patterns over metric names (engine stats: engine/<field>)
    exclude: list[str] = Field(default_factory=list)  # globs taken out again, e.g. "*_depth*" grid cells
    max_drop_points: float | None = Field(default=None, ge=0)  # higher is better; paired per-item test
    max_drop_pct: float | None = Field(default=None, ge=0)  # higher is better (capacity, throughput)
    max_growth_pct: float | None = Field(default=None, ge=0)  # lower is better (memory, latency)
    # macro / balanced scores: the paired test averages per-stratum means, as the score does
    strata: list[Literal["group", "target"]] = Field(default_factory=list)
    tasks: dict[str, float] = Field(default_factory=dict)  # task name -> limit, same unit as the rule's

    @field_validator("metrics", "exclude", "strata", mode="before")
    @classmethod
    def _one_or_many(cls, v):
        return [v] if isinstance(v, str) else v

    @model_validator(mode="after")
    def _one_limit(self):
        given = [k for k in LIMITS if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of {', '.join(LIMITS)} (got {', '.join(given) or 'none'})")
        if any(v < 0 for v in self.tasks.values()):
            raise ValueError("tasks: limits must be >= 0")
        return self

    @property
    def kind(self) -> str:
        return next(k for k in LIMITS if getattr(self, k) is not None)

    @property
    def label(self) -> str:
        return self.name or ",".join(self.metrics)

    def matches(self, metric: str) -> bool:
        hit = any(fnmatch.fnmatchcase(metric, p) for p in self.metrics)
        return hit and not any(fnmatch.fnmatchcase(metric, p) for p in self.exclude)

    def limit_for(self, metric: str) -> float:
        return self.tasks.get(metric.split("/")[0], getattr(self, self.kind))


class Rules(BaseModel):
    model_config = ConfigDict(extra="forbid")

    confidence: float = Field(default=0.95, gt=0.5, lt=1)  # one-sided
    decision: Literal["upper_bound", "point", "lower_bound"] = "upper_bound"
    rules: list[Rule] = Field(min_length=1)

    def rule_for(self, metric: str) -> Rule | None:
        """The first rule that names the metric, so specific rules go above broad ones."""
        return next((r for r in self.rules if r.matches(metric)), None)


def load_rules(path: str | Path) -> Rules:
    path = Path(path)
    raw = load_raw(path)
    try:
        return Rules.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(f"{path}: {format_validation_error(e, Rules)}") from None


@dataclass
class Check:
    candidate: str
    rule: str
    metric: str
    status: Literal["pass", "fail", "skip"]
    detail: str
    baseline: float | None = None
    value: float | None = None
    change: float | None = None  # points (accuracy) or percent, positive = worse
    limit: float | None = None
    unit: str = ""
    significant: bool | None = None


# ---------------------------------------------------------------- paired accuracy


def _labels(sample: dict, score: dict) -> set[str]:
    """Every name a `task/metric/<group>` metric may use for this item's cell.

    Tasks name groups differently: the score's group (a subject, `len1024_depth50`), a prefix
    of it (`len1024`), or a field of the sample's meta / the score's extra (a category, a clause).
    """
    group = str(score.get("group"))
    parts = group.split("_")
    labels = {group, *("_".join(parts[:i]) for i in range(1, len(parts)))}
    for d in (sample.get("meta") or {}, score.get("extra") or {}):
        labels |= {str(v) for v in d.values() if isinstance(v, str)}
        if isinstance(d.get("length"), int):
            labels |= {f"len{d['length']}", f"ctx{d['length']}"}
    return labels


def read_scores(rd: RunDir, variant: str, task: str) -> dict[str, dict]:
    """sample id -> {value, group, target, labels}; first occurrence wins, cut-off lines are skipped."""
    path = rd.root / variant / "samples" / f"{task}.jsonl"
    out: dict[str, dict] = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        sample, score = row.get("sample") or {}, row.get("score") or {}
        sid = sample.get("id") or score.get("sample_id")
        if sid is not None and sid not in out and isinstance(score.get("value"), (int, float)):
            out[sid] = {"value": float(score["value"]), "group": score.get("group"), "target": score.get("target"),
                        "labels": _labels(sample, score)}
    return out


def paired_drop(base: dict[str, dict], cand: dict[str, dict], strata: list[str] | None = None
                ) -> tuple[float, float, int] | None:
    """Mean of (baseline - candidate) over shared items and its standard error, in score units.

    With strata, the unweighted mean of per-stratum means (as macro and balanced scores weigh
    items), its se combined from the strata's ses.
    """
    cells: dict[tuple, list[float]] = defaultdict(list)
    for sid, b in base.items():
        if sid in cand:
            cells[tuple(str(b.get(k)) for k in strata or ())].append(b["value"] - cand[sid]["value"])
    if not cells:
        return None
    stats = [mean_stderr(d) for d in cells.values()]
    k = len(stats)
    drop = sum(m for m, _ in stats) / k
    se = math.sqrt(sum((s or 0.0) ** 2 for _, s in stats)) / k
    return drop, se, sum(len(d) for d in cells.values())


@dataclass
class Pair:
    """Where the two variants' records live, for the paired test."""

    base_rd: RunDir
    base: VariantResult
    cand_rd: RunDir
    cand: VariantResult


def accuracy_check(rules: Rules, rule: Rule, metric: str, pair: Pair, label: str) -> Check:
    b, c = pair.base.metric(metric), pair.cand.metric(metric)
    limit = rule.limit_for(metric)
    parts = metric.split("/")
    group = parts[2] if len(parts) > 2 else None
    base = {k: s for k, s in read_scores(pair.base_rd, pair.base.variant, parts[0]).items()
            if group is None or group in s["labels"]}
    cand = {k: s for k, s in read_scores(pair.cand_rd, pair.cand.variant, parts[0]).items()
            if group is None or group in s["labels"]}
    paired = paired_drop(base, cand, rule.strata)
    if paired is not None:
        drop, se, n = paired
        how = f"paired, n={n}"
    else:  # no shared items: fall back to the two means and their own standard errors
        drop = b.value - c.value
        se = math.sqrt((b.stderr or 0) ** 2 + (c.stderr or 0) ** 2)
        how = "unpaired: no shared sample ids"
    drop, se = drop * 100, se * 100
    z = NormalDist().inv_cdf(rules.confidence)
    low, high = drop - z * se, drop + z * se
    judged = {"upper_bound": high, "point": drop, "lower_bound": low}[rules.decision]
    failed = judged > limit or math.isnan(judged)
    conf = f"{rules.confidence:.0%}"
    sig = "significant" if low > 0 else "not significant"
    detail = (f"drop {drop:+.2f} pt ({how}; {conf} bounds {low:+.2f}..{high:+.2f}, {sig}); "
              f"{rules.decision.replace('_', ' ')} {judged:+.2f} {'>' if failed else '<='} limit {limit:g} pt")
    return Check(label, rule.label, metric, "fail" if failed else "pass", detail, b.value, c.value, drop, limit,
                 "pt", low > 0)


def relative_check(rule: Rule, metric: str, b: float, c: float | None, label: str) -> Check:
    limit = rule.limit_for(metric)
    growth = rule.kind == "max_growth_pct"
    if c is None or math.isnan(c):
        return Check(label, rule.label, metric, "fail", "missing in candidate", b, c, None, limit, "%")
    worse = (c - b) if growth else (b - c)
    change = worse / abs(b) * 100 if b else (0.0 if worse == 0 else math.copysign(math.inf, worse))
    failed = change > limit
    word = "growth" if growth else "drop"
    detail = f"{word} {change:+.1f}% {'>' if failed else '<='} limit {limit:g}%"
    return Check(label, rule.label, metric, "fail" if failed else "pass", detail, b, c, change, limit, "%")


def evaluate(rules: Rules, pair: Pair, label: str, explicit: bool) -> list[Check]:
    """Every baseline metric that a rule names, checked against the candidate."""
    cand = pair.cand
    if cand.status != "ok":
        status = "skip" if cand.status == "skipped" and not explicit else "fail"
        return [Check(label, "status", "variant status", status, f"{cand.status}: {cand.reason or 'no reason given'}")]
    bm, cm = flat_metrics(pair.base), flat_metrics(cand)
    checks = []
    for metric, b in bm.items():
        rule = rules.rule_for(metric)
        if rule is None or b is None or math.isnan(b):
            continue
        if rule.kind != "max_drop_points":
            checks.append(relative_check(rule, metric, b, cm.get(metric), label))
        elif pair.base.metric(metric) is None:
            checks.append(Check(label, rule.label, metric, "skip", "points rules apply to task metrics, not engine stats"))
        elif cand.metric(metric) is None:
            checks.append(Check(label, rule.label, metric, "fail", "missing in candidate", b, limit=rule.limit_for(metric),
                                unit="pt"))
        else:
            checks.append(accuracy_check(rules, rule, metric, pair, label))
    for rule in rules.rules:  # a metric named outright (no wildcard) that the baseline lacks is worth a line
        for name in rule.metrics:
            if not any(ch in name for ch in "*?[") and name not in bm:
                checks.append(Check(label, rule.label, name, "skip", "not in the baseline"))
    return checks


# ---------------------------------------------------------------- which variants


def _same_run(a: RunDir, b: RunDir) -> bool:
    return a.root.resolve() == b.root.resolve()


def baseline_variant(rd: RunDir, wanted: str | None) -> VariantResult:
    """--variant-baseline, else the only variant, else the config's `baseline` key."""
    record = rd.load_run()
    names = [v.variant for v in record.variants]
    name = wanted or (names[0] if len(names) == 1 else read_config(rd).get("baseline"))
    if not name:
        raise ConfigError(f"--variant-baseline: run {record.run_id} holds {', '.join(names)}; name one "
                          f"(or set `baseline` in its config)")
    v = record.variant(name)
    if v is None:
        raise ConfigError(f"--variant-baseline: {name!r} is not a variant of run {record.run_id} "
                          f"(allowed: {', '.join(names)})")
    if v.status != "ok":
        raise ConfigError(f"baseline variant {name!r} of run {record.run_id} is {v.status}: {v.reason or '-'}")
    return v


def candidate_variants(rd: RunDir, wanted: str | None, base_rd: RunDir, base: VariantResult) -> list[VariantResult]:
    """--variant-candidate, else every variant of the candidate run (but the baseline itself)."""
    record = rd.load_run()
    if wanted:
        v = record.variant(wanted)
        if v is None:
            raise ConfigError(f"--variant-candidate: {wanted!r} is not a variant of run {record.run_id} "
                              f"(allowed: {', '.join(v.variant for v in record.variants)})")
        return [v]
    out = [v for v in record.variants if not (_same_run(rd, base_rd) and v.variant == base.variant)]
    if not out:
        raise ConfigError(f"--candidate: run {record.run_id} has no variant to compare with {base.variant!r}")
    return out


# ---------------------------------------------------------------- the report


@dataclass
class GateReport:
    baseline: str
    rules_path: str
    rules: Rules
    checks: list[Check]

    @property
    def passed(self) -> bool:
        return not any(c.status == "fail" for c in self.checks)

    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]


def run_gate(base_rd: RunDir, cand_rd: RunDir, rules: Rules, rules_path: str, variant_baseline: str | None = None,
             variant_candidate: str | None = None) -> GateReport:
    base = baseline_variant(base_rd, variant_baseline)
    checks: list[Check] = []
    for cand in candidate_variants(cand_rd, variant_candidate, base_rd, base):
        pair = Pair(base_rd, base, cand_rd, cand)
        checks += evaluate(rules, pair, f"{cand_rd.run_id}:{cand.variant}", explicit=bool(variant_candidate))
    if not any(c.status != "skip" for c in checks):
        raise ConfigError(f"{rules_path}: no metric of baseline {base.variant!r} matched a rule, or no candidate ran; "
                          f"nothing was checked")
    return GateReport(f"{base_rd.run_id}:{base.variant}", rules_path, rules, checks)


def _change(v: float | None, unit: str) -> str:
    if v is None or math.isnan(v):
        return "-"
    return f"{v:+.2f} pt" if unit == "pt" else f"{v:+.1f}%"


def to_markdown(report: GateReport) -> str:
    """A PR comment: verdict, failures first, then passes; skipped checks folded into one list."""
    icon = {"pass": "✅", "fail": "❌"}
    verdict = "passed" if report.passed else f"failed ({len(report.failures())} check(s))"
    lines = [f"## {icon['pass' if report.passed else 'fail']} evalsuite gate {verdict}", "",
             (f"Baseline `{report.baseline}` · rules `{report.rules_path}` · decision `{report.rules.decision}` "
              f"at {report.rules.confidence:.0%} one-sided confidence. Accuracy changes are in points, "
              f"judged on paired per-item results; positive change = worse."), "",
             "| | candidate | rule | metric | baseline | candidate value | change | limit | detail |",
             "|---|---|---|---|---|---|---|---|---|"]
    for c in sorted((c for c in report.checks if c.status != "skip"), key=lambda c: c.status != "fail"):
        limit = "-" if c.limit is None else f"{c.limit:g}{'%' if c.unit == '%' else ' pt'}"
        lines.append(f"| {icon[c.status]} | `{c.candidate}` | {c.rule} | `{c.metric}` | {fmt_value(c.metric, c.baseline)} | "
                     f"{fmt_value(c.metric, c.value)} | {_change(c.change, c.unit)} | {limit} | "
                     f"{c.detail.replace('|', '/')} |")
    skipped = [c for c in report.checks if c.status == "skip"]
    if skipped:
        lines += ["", "Not checked: " + "; ".join(f"`{c.candidate}` {c.metric} ({c.detail})" for c in skipped)]
    return "\n".join(lines) + "\n"


def to_junit(report: GateReport) -> str:
    """One testsuite per candidate variant, one testcase per rule check."""
    root = ET.Element("testsuites", name="evalsuite gate", tests=str(len(report.checks)),
                      failures=str(len(report.failures())))
    by_candidate: dict[str, list[Check]] = defaultdict(list)
    for c in report.checks:
        by_candidate[c.candidate].append(c)
    for cand, checks in by_candidate.items():
        suite = ET.SubElement(root, "testsuite", name=f"{cand} vs {report.baseline}", tests=str(len(checks)),
                              failures=str(sum(c.status == "fail" for c in checks)),
                              skipped=str(sum(c.status == "skip" for c in checks)))
        for c in checks:
            case = ET.SubElement(suite, "testcase", classname=f"evalsuite.gate.{cand}", name=f"{c.rule}: {c.metric}")
            if c.status == "fail":
                ET.SubElement(case, "failure", message=f"{c.metric}: {c.detail}").text = c.detail
            elif c.status == "skip":
                ET.SubElement(case, "skipped", message=c.detail)
            else:
                ET.SubElement(case, "system-out").text = c.detail
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
