"""The quality gate: does a candidate keep accuracy, memory and latency within a baseline's limits?

Accuracy is judged on paired per-item results (the sample ids both runs answered), because two
variants answering the same questions differ far less than two independent samples.
evalsuite.stats.significance has the methods: exact McNemar and Tango score bounds for 0/1 scores, a paired
(stratified) bootstrap for the rest. Every test is one-sided at alpha = 1 - `confidence`.

Decision rule (rules file `decision`, default `upper_bound`), drop = baseline - candidate:
  upper_bound  pass only when the data show the drop is within the limit: p(drop >= limit) < alpha
               (non-inferiority; a small or noisy eval cannot wave a regression through)
  point        fail when the estimated drop exceeds the limit
  lower_bound  fail only when the data show the drop exceeds the limit: p(drop <= limit) < alpha
With `adjust: holm` (default) those p-values, and the "significant drop" flags, are Holm-adjusted
over every accuracy check of the gate, so that the chance of any wrong claim stays <= alpha.

Too few items to judge ("insufficient n": fewer than `min_n` pairs, a stratum under
`min_stratum_n`, or a limit this n cannot resolve either way) never counts as evidence: the
check follows `insufficient_n` (pass, fail or warn) unless the drop is shown to exceed the limit.
Memory, capacity and latency compare two measurements (growth or drop in percent); latency per
prompt length, never pooled over lengths, and tail percentiles only with enough samples.
"""

from __future__ import annotations

import fnmatch
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from evalsuite.core.configfile import load_model
from evalsuite.core.errors import ConfigError
from evalsuite.core.records import RunDir
from evalsuite.core.types import VariantResult
from evalsuite.report.compare import label_entries
from evalsuite.report.names import flat_metrics
from evalsuite.stats.metrics import min_samples
from evalsuite.stats.paired import paired_result, pairing, unpaired
from evalsuite.stats.significance import PairedTest, best_case_bound, holm, items_needed, resolvable_drop

LIMITS = ("max_drop_points", "max_drop_pct", "max_growth_pct")
# partial: an interrupted variant scored from what it recorded; items are paired by id, so only
# what both sides answered is compared, and every check states its n.
USABLE = ("ok", "partial")
PERCENTILE = re.compile(r"_p(\d+)(/|$)")


class Rule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    metrics: list[str] = Field(min_length=1)  # glob patterns over metric names (engine stats: engine/<field>)
    exclude: list[str] = Field(default_factory=list)  # globs taken out again, e.g. "*_depth*" grid cells
    max_drop_points: float | None = Field(default=None, ge=0)  # higher is better; paired per-item test
    max_drop_pct: float | None = Field(default=None, ge=0)  # higher is better (capacity, throughput)
    max_growth_pct: float | None = Field(default=None, ge=0)  # lower is better (memory, latency)
    # how the score weighs items; empty: as the metric does (acc_macro: group; balanced_acc: group, target)
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
    adjust: Literal["holm", "none"] = "holm"  # which p-values the verdict uses
    min_n: int = Field(default=10, ge=2)  # paired items below which no test is trusted
    min_stratum_n: int = Field(default=5, ge=2)  # items per stratum (a 1-item stratum has no variance)
    insufficient_n: Literal["pass", "fail", "warn"] = "warn"  # what a check too small to judge becomes
    power: float = Field(default=0.8, gt=0, lt=1)  # for "the smallest limit this n resolves"
    discordance: float = Field(default=0.05, gt=0, le=1)  # planning: fraction of items that change answer
    rules: list[Rule] = Field(min_length=1)

    @property
    def alpha(self) -> float:
        return 1 - self.confidence

    def rule_for(self, metric: str) -> Rule | None:
        """The first rule that names the metric, so specific rules go above broad ones."""
        return next((r for r in self.rules if r.matches(metric)), None)


def load_rules(path: str | Path) -> Rules:
    return load_model(path, Rules)


Status = Literal["pass", "fail", "warn", "skip", "pending"]


@dataclass
class Check:
    candidate: str
    rule: str
    metric: str
    status: Status
    detail: str
    baseline: float | None = None
    value: float | None = None
    change: float | None = None  # points (accuracy) or percent, positive = worse
    limit: float | None = None
    unit: str = ""
    significant: bool | None = None
    method: str = ""
    low: float | None = None  # one-sided bounds of the change, points
    high: float | None = None
    n: int | None = None
    p: float | None = None  # the verdict's test, raw and adjusted
    p_adj: float | None = None
    p_worse: float | None = None  # "the candidate is worse", raw and adjusted
    p_worse_adj: float | None = None
    resolvable: float | None = None  # smallest limit this n resolves, points
    needed: int | None = None  # paired items the limit would need, at the observed spread
    insufficient: str | None = None  # why this n cannot judge the check
    test: PairedTest | None = field(default=None, repr=False)
    pairs: str = ""  # how the items were matched


# ---------------------------------------------------------------- paired accuracy


@dataclass
class Pair:
    """Where the two variants' records live, for the paired test."""

    base_rd: RunDir
    base: VariantResult
    cand_rd: RunDir
    cand: VariantResult


@dataclass
class _Tested:
    test: PairedTest | None
    pairs: str  # how the items were matched
    why: str | None = None  # why there is no test (or too few items to trust one)
    on_pairs: tuple[float, float] | None = None  # (baseline, candidate) over the paired items only


def _accuracy_test(rules: Rules, rule: Rule, metric: str, pair: Pair) -> _Tested:
    p = pairing(pair.base_rd, pair.base.variant, pair.cand_rd, pair.cand.variant, metric, rule.strata or None)
    if p.n == 0:
        test = unpaired(pair.base.metric(metric), pair.cand.metric(metric), rules.confidence)
        if test is None:
            return _Tested(None, "no shared sample ids", "no paired items and no counts to compare")
        return _Tested(test, f"unpaired, n={test.n}", None if test.n >= rules.min_n else f"n={test.n} < min_n {rules.min_n}")
    # a partial variant is compared on the items both answered: its table values are those items',
    # so that baseline - candidate is the change shown
    on_pairs = p.means() if p.partial else None
    how = f"paired, n={p.n}" + (f" of {p.n_base}/{p.n_cand}" if p.partial else "")
    if p.n < rules.min_n:
        return _Tested(None, how, f"n={p.n} paired items < min_n {rules.min_n}", on_pairs)
    if p.smallest_cell < rules.min_stratum_n:
        return _Tested(None, how, f"a stratum has {p.smallest_cell} item(s) < min_stratum_n {rules.min_stratum_n}", on_pairs)
    return _Tested(paired_result(p, rules.confidence), how, None, on_pairs)


def _unresolvable(rules: Rules, test: PairedTest, limit: float) -> str | None:
    """Why the outcome is fixed before looking at the data, for this decision and n."""
    best = best_case_bound(test.n_eff, rules.confidence)
    if rules.decision == "upper_bound" and best > limit:
        return f"even with no item changed the {rules.confidence:.0%} bound is {best * 100:+.1f} pt > limit"
    if rules.decision == "lower_bound" and 1 - best < limit:
        return f"even with every item lost the bound stays below the limit (n={test.n})"
    if rules.decision == "point" and test.max_weight > limit:
        return f"one item moves the score by {test.max_weight * 100:.1f} pt > limit"
    return None


def accuracy_check(rules: Rules, rule: Rule, metric: str, pair: Pair, label: str) -> Check:
    """Everything but the verdict, which needs every check's p-values (see decide)."""
    b, c = pair.base.metric(metric), pair.cand.metric(metric)
    limit = rule.limit_for(metric)
    t = _accuracy_test(rules, rule, metric, pair)
    test, how, why = t.test, t.pairs, t.why
    base_value, cand_value = t.on_pairs or (b.value, c.value)
    if t.on_pairs:
        how += f"; values on the paired items (each side's own: {b.value:.3f} / {c.value:.3f})"
    check = Check(label, rule.label, metric, "pending", "", base_value, cand_value, (base_value - cand_value) * 100,
                  limit, "pt", test=test, pairs=how, insufficient=why)
    if test is None:
        return check
    check.change, check.low, check.high, check.n = test.drop * 100, test.low * 100, test.high * 100, test.n
    check.method = test.method
    check.resolvable = resolvable_drop(test.n_eff, test.se0, rules.confidence, rules.power) * 100
    spread = test.se0**2 * test.n_eff  # the share of items that changed, for 0/1 scores
    check.needed = items_needed(limit / 100, spread, rules.confidence, rules.power) if limit > 0 else None
    check.insufficient = why or _unresolvable(rules, test, limit / 100)
    return check


def decide(rules: Rules, checks: list[Check]) -> None:
    """Holm-adjust the accuracy checks' p-values across the gate, then give each its verdict."""
    tested = [c for c in checks if c.status == "pending" and c.test is not None]
    families = {"worse": [(c, c.test.p_worse) for c in tested]}
    for c in tested:
        within = rules.decision == "upper_bound" and c.insufficient is None
        key = "within" if within else "exceeds"
        families.setdefault(key, []).append((c, (c.test.p_within if within else c.test.p_exceeds)(c.limit / 100)))
    for key, members in families.items():
        raw = [p for _, p in members]
        adjusted = holm(raw) if rules.adjust == "holm" else raw
        for (c, p), q in zip(members, adjusted, strict=True):
            if key == "worse":
                c.p_worse, c.p_worse_adj, c.significant = p, q, q < rules.alpha
            else:
                c.p, c.p_adj = p, q
    for c in families.get("exceeds", []):  # shown above a limit >= 0 is shown above 0 (closed testing)
        c[0].significant = c[0].significant or (c[0].limit >= 0 and c[0].p_adj < rules.alpha)
    for c in checks:
        if c.status == "pending":
            _verdict(rules, c)


def _verdict(rules: Rules, c: Check) -> None:
    if c.test is None:
        c.status, c.detail = rules.insufficient_n, f"insufficient n: {c.insufficient} ({c.pairs})"
        return
    shown = c.p_adj < rules.alpha  # p_adj is the raw p with `adjust: none`
    p = f"{'Holm ' if rules.adjust == 'holm' else ''}p {c.p_adj:.2g} {'<' if shown else '>='} {rules.alpha:g}"
    limit = f"limit {c.limit:g} pt"
    if c.insufficient is not None:
        c.status = "fail" if shown else rules.insufficient_n
        verdict = f"but the drop is shown to exceed the {limit} ({p})" if shown else f"{rules.insufficient_n} as configured"
        c.detail = f"insufficient n: {c.insufficient}; {verdict}"
    elif rules.decision == "upper_bound":
        c.status = "pass" if shown else "fail"
        c.detail = f"upper bound {c.high:+.2f} pt: {'' if shown else 'not '}shown within {limit} ({p})"
    elif rules.decision == "lower_bound":
        c.status = "fail" if shown else "pass"
        c.detail = f"lower bound {c.low:+.2f} pt: {'' if shown else 'not '}shown above {limit} ({p})"
    else:
        c.status = "fail" if c.change > c.limit else "pass"
        c.detail = f"point estimate {c.change:+.2f} pt {'>' if c.status == 'fail' else '<='} {limit}"
    counts = f", {c.test.counts[0]} lost/{c.test.counts[1]} gained" if c.test.counts else ""
    sig = "significant drop" if c.significant and c.change > 0 else "no significant drop"
    how = "shown above the limit; " if c.significant and c.p_worse_adj >= rules.alpha else ""
    c.detail += f"; {c.pairs}{counts}; {c.method}; {sig} ({how}p {c.p_worse:.2g}, Holm {c.p_worse_adj:.2g})"


# ---------------------------------------------------------------- memory, capacity, latency


def relative_check(rules: Rules, rule: Rule, metric: str, b: float, c: float | None, label: str,
                   n: int | None = None) -> Check:
    limit = rule.limit_for(metric)
    growth = rule.kind == "max_growth_pct"
    if c is None or math.isnan(c):
        return Check(label, rule.label, metric, "fail", "missing in candidate", b, c, None, limit, "%")
    pct = PERCENTILE.search(metric)
    if pct and n is not None and n < min_samples(int(pct[1])):
        need = min_samples(int(pct[1]))
        return Check(label, rule.label, metric, rules.insufficient_n,
                     f"insufficient n: p{pct[1]} from {n} samples (needs >= {need}, 1/(1-q))", b, c, None, limit, "%")
    worse = (c - b) if growth else (b - c)
    change = worse / abs(b) * 100 if b else (0.0 if worse == 0 else math.copysign(math.inf, worse))
    failed = change > limit
    word = "growth" if growth else "drop"
    detail = f"{word} {change:+.1f}% {'>' if failed else '<='} limit {limit:g}%"
    return Check(label, rule.label, metric, "fail" if failed else "pass", detail, b, c, change, limit, "%")


# Engine fields whose log line measures another quantity than the API: "Model loading took" is the
# allocator's growth while loading, the API's figure the parameter bytes (3.41 vs 3.318 GiB on one
# model). The log's KV capacity is the API's number, so it stays comparable.
LOG_MEASURES_OTHERWISE = ("weights_gib",)


def _measured_differently(metric: str, pair: Pair) -> str | None:
    """An engine figure read two ways that differ by definition is not a change to judge."""
    field = metric.removeprefix("engine/")
    if not metric.startswith("engine/") or field not in LOG_MEASURES_OTHERWISE:
        return None
    b, c = pair.base.engine.source.get(field), pair.cand.engine.source.get(field)
    if b and c and b != c and "log" in (b, c):
        return f"measured two ways (baseline: {b}, candidate: {c}): not compared"
    return None


def _pooled_latency(metric: str, names: set[str]) -> bool:
    """latency/<x>_p50 when per-length latency/<x>_p50/ctx<N> exist: a median over mixed lengths."""
    return metric.startswith("latency/") and metric.count("/") == 1 and any(
        n.startswith(metric + "/ctx") for n in names)


def evaluate(rules: Rules, pair: Pair, label: str, explicit: bool) -> list[Check]:
    """Every baseline metric that a rule names, checked against the candidate."""
    cand = pair.cand
    if cand.status not in USABLE:
        status = "skip" if cand.status == "skipped" and not explicit else "fail"
        return [Check(label, "status", "variant status", status, f"{cand.status}: {cand.reason or 'no reason given'}")]
    bm, cm = flat_metrics(pair.base), flat_metrics(cand)
    checks = []
    for metric, b in bm.items():
        rule = rules.rule_for(metric)
        if rule is None or b is None or math.isnan(b):
            continue
        if _pooled_latency(metric, set(bm)):
            checks.append(Check(label, rule.label, metric, "skip", "pooled over prompt lengths; judged per length"))
        elif rule.kind != "max_drop_points" and (differ := _measured_differently(metric, pair)):
            checks.append(Check(label, rule.label, metric, "skip", differ, b, cm.get(metric)))
        elif rule.kind != "max_drop_points":
            m = cand.metric(metric) or pair.base.metric(metric)
            checks.append(relative_check(rules, rule, metric, b, cm.get(metric), label, m.n if m else None))
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
                why = "not in the baseline"
                pct = PERCENTILE.search(name)
                if pct and int(pct[1]) > 50:
                    why += " (a tail percentile q is recorded only with >= 1/(1-q) samples: p99 >= 100)"
                checks.append(Check(label, rule.label, name, "skip", why))
    return checks


# ---------------------------------------------------------------- which variants


@dataclass
class Side:
    """One side of the gate as given: a run folder and, optionally, one of its variants."""

    run_dir: RunDir
    variant: str | None = None


def baseline_variant(rd: RunDir, wanted: str | None) -> VariantResult:
    """The variant named, else the only variant, else the config's `baseline` key."""
    record = rd.load_run()
    names = [v.variant for v in record.variants]
    name = wanted or (names[0] if len(names) == 1 else rd.read_config().get("baseline"))
    if not name:
        raise ConfigError(f"--baseline: run {record.run_id} holds {', '.join(names)}; name one as "
                          f"{rd.root}:VARIANT or with --variant-baseline (or set `baseline` in its config)")
    v = record.variant(name)
    if v is None:
        raise ConfigError(f"--baseline: {name!r} is not a variant of run {record.run_id} (allowed: {', '.join(names)})")
    if v.status not in USABLE:
        raise ConfigError(f"baseline variant {name!r} of run {record.run_id} is {v.status}: {v.reason or '-'}")
    return v


def candidate_variants(side: Side, base_rd: RunDir, base: VariantResult) -> list[VariantResult]:
    """The variant named, else every variant of the candidate run but the baseline itself."""
    record = side.run_dir.load_run()
    if side.variant:
        v = record.variant(side.variant)
        if v is None:
            raise ConfigError(f"--candidate: {side.variant!r} is not a variant of run {record.run_id} "
                              f"(allowed: {', '.join(v.variant for v in record.variants)})")
        return [v]
    same_run = side.run_dir.root.resolve() == base_rd.root.resolve()
    out = [v for v in record.variants if not (same_run and v.variant == base.variant)]
    if not out:
        raise ConfigError(f"--candidate: run {record.run_id} has no variant to compare with {base.variant!r}")
    return out


# ---------------------------------------------------------------- the gate


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


def run_gate(baseline: Side, candidates: list[Side], rules: Rules, rules_path: str) -> GateReport:
    """Each candidate variant against the baseline; names are run:variant only where they clash."""
    base = baseline_variant(baseline.run_dir, baseline.variant)
    entries = [(baseline.run_dir, base)]
    for side in candidates:
        for v in candidate_variants(side, baseline.run_dir, base):
            key = (side.run_dir.root.resolve(), v.variant)
            if key not in {(rd.root.resolve(), e.variant) for rd, e in entries}:
                entries.append((side.run_dir, v))
    labels = label_entries(entries)
    explicit = any(s.variant for s in candidates)
    checks: list[Check] = []
    for (rd, cand), label in zip(entries[1:], labels[1:], strict=True):
        checks += evaluate(rules, Pair(baseline.run_dir, base, rd, cand), label, explicit=explicit)
    if not any(c.status != "skip" for c in checks):
        raise ConfigError(f"{rules_path}: no metric of baseline {base.variant!r} matched a rule, or no candidate ran; "
                          f"nothing was checked")
    decide(rules, checks)
    return GateReport(labels[0], rules_path, rules, checks)
