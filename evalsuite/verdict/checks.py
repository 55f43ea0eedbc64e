"""The gate's checks: one per baseline metric a rule names, each judged against the candidate.

Accuracy is judged on paired per-item results (the sample ids both runs answered), because two
variants answering the same questions differ far less than two independent samples; evalsuite.stats
has the methods. Each check is one-sided at alpha (`decide`); Holm or BH adjust only the other
family, the findings that a metric got significantly worse.

Never green without evidence: too few items, a limit this n cannot resolve, or groups a cut run never
reached make a check "insufficient n" (it follows `insufficient_n`), a baseline at chance makes it
`uninformative`; a drop shown beyond the limit fails at any n. Memory compares two figures; latency
(per length) an interval of its repeats, between passes timed alike. `evaluate` is the ladder that
picks a metric's check; the decision rules: evalsuite/verdict/gate_rules.yaml.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from evalsuite.core.rundir import RunDir
from evalsuite.core.types import (POOL_METRICS, USABLE_STATUSES, Metric, MetricKind, VariantResult, meaning_of_name,
                                  pools_comparable, task_of, timing_unlike)
from evalsuite.verdict.capacity import bracket_for, comparable, is_at_slo, judge_brackets
from evalsuite.verdict.compare import flat_metrics, is_latency
from evalsuite.verdict.rules import Rule, Rules, resolution
from evalsuite.verdict.sequential import early_stop, sequential_test
from evalsuite.verdict.informative import AT_CEILING, AT_CHANCE, CHANCE_UNKNOWN, chance_level, mark
from evalsuite.verdict.kinds import register_rule_kind
from evalsuite.stats.metrics import min_samples
from evalsuite.stats.paired import Pairing, p_exceeds_whole, paired_result, pairing, unpaired
from evalsuite.stats.significance import PairedTest, adjust, needed_items
from evalsuite.stats.timing import latency_key, ratio_test, series

MISSING = "missing in candidate"


# uninformative: a check on a task whose baseline is at chance; a warning, never evidence
Status = Literal["pass", "fail", "warn", "uninformative", "skip", "pending"]


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
    mark: str | None = None  # the baseline's task is "at chance" or "at ceiling" (evalsuite.verdict.informative)
    evidence: bool = False  # passed because the data show it, not because a too-small check was let through
    changed: int | None = None  # paired items whose answer changed
    unmeasured: tuple[float, float] = (0.0, 0.0)  # Pairing.unmeasured: groups the paired items miss
    noise: tuple[float, float] | None = None  # the control's interval of the same change, points (accuracy) or %
    value_unit: str = ""  # the unit of baseline and value (the metric's own; "" for a score)

    @property
    def sequential(self) -> bool:
        """Bounded by run --stop decided's confidence sequence (alone, or with the final fixed-n look)."""
        return "confidence sequence" in self.method

    @property
    def outside(self) -> bool:
        """A sequence's bounds (the running intersection over every look) exclude the change on the
        items scored: the bounds, not that change, are the estimate."""
        return self.sequential and None not in (self.low, self.high, self.change) and \
            not self.low - 1e-9 <= self.change <= self.high + 1e-9


# ---------------------------------------------------------------- paired accuracy


@dataclass
class Pair:
    """Where the two variants' records live, for the paired test."""

    base_rd: RunDir
    base: VariantResult
    cand_rd: RunDir
    cand: VariantResult

    @cached_property
    def measured(self) -> dict[str, Metric]:
        """The baseline's figures by name (VariantResult.measured), read once for every check."""
        return self.base.measured()

    @cached_property
    def cand_values(self) -> dict[str, float]:
        """The candidate's figures by name (flat_metrics)."""
        return flat_metrics(self.cand)


NO_SHARED = "no shared sample ids"


@dataclass
class _Tested:
    test: PairedTest | None
    pairs: str  # how the items were matched
    why: str | None = None  # why there is no test (or too few items to trust one)
    on_pairs: tuple[float, float] | None = None  # (baseline, candidate) over the paired items only


def _accuracy_test(rules: Rules, rule: Rule, metric: str, pair: Pair) -> tuple[_Tested, Pairing]:
    """The paired test, and why this n cannot judge the check where it cannot (too few pairs, a small
    stratum, no shared ids, missing groups). A test is kept wherever there are items to test: a drop
    shown beyond the limit fails at any n (see _verdict)."""
    p = pairing(pair.base_rd, pair.base.variant, pair.cand_rd, pair.cand.variant, pair.base.metric(metric),
                rule.strata or None)
    stop = early_stop(pair.cand, metric)
    found = sequential_test(rules, rule, pair.base_rd, pair.base, pair.cand_rd, pair.cand, metric, stop) \
        if stop is not None else None
    if found is not None:  # judged by the test that stopped it: a fixed-n bound fails after optional stopping
        test, how, why = found
        p.unmeasured, p.missing_groups = (0.0, 0.0), ()  # the sequence speaks for the items it did not see
        return _Tested(test, how, why, p.means() if p.n else None), p
    if p.n == 0:
        # no item in common: only the two counts compare, as independent samples of the task's items
        test = unpaired(pair.base.metric(metric), pair.cand.metric(metric), rules.confidence)
        if p.n_base and p.n_cand:
            why = f"the runs scored different items ({p.n_base} and {p.n_cand}, no sample id in common)"
            return _Tested(test, NO_SHARED + (f"; unpaired, n={test.n}" if test else ""),
                           why + ("" if test else ": nothing to pair")), p
        if test is None:
            return _Tested(None, "no per-item scores", "no paired items and no counts to compare"), p
        why = None if test.n >= rules.min_n else f"n={test.n} < min_n {rules.min_n}"
        return _Tested(test, f"unpaired, n={test.n}", why), p
    # a partial variant is compared on the items both answered: its table values are those items',
    # so that baseline - candidate is the change shown
    on_pairs = p.means() if p.partial else None
    how = f"paired, n={p.n}" + (f" of {p.n_base}/{p.n_cand}" if p.partial else "")
    why = _coverage_gap(p)
    if p.n < rules.min_n:
        why = f"n={p.n} paired items < min_n {rules.min_n}"
    elif p.smallest_cell < rules.min_stratum_n:
        why = f"a stratum has {p.smallest_cell} item(s) < min_stratum_n {rules.min_stratum_n}"
    return _Tested(paired_result(p, rules.confidence), how, why, on_pairs), p


def _coverage_gap(p: Pairing) -> str | None:
    """Why the paired items cannot stand for the metric: whole groups that one side scored are
    missing from them (a variant cut before some tasks or lengths), so their mean is another
    population's, however many items it has. The check still fails on a drop shown beyond the limit
    with the candidate right on every item of the missing groups (`p_exceeds_whole`)."""
    if not p.missing_groups:
        return None
    names = ", ".join(p.missing_groups[:3]) + (", ..." if len(p.missing_groups) > 3 else "")
    return f"no paired item in {len(p.missing_groups)} of the {p.groups} groups behind it ({names})"


def baseline_mark(rules: Rules, rule: Rule, metric: str, pair: Pair) -> str | None:
    """At chance (within the rule's limit of it) or at ceiling, from the baseline's own score and its 95%
    interval, the one every report shows beside it."""
    base = pair.base
    return mark(base.metric(metric), chance_level(base, metric, pair.base_rd), rule.limit_for(metric) / 100,
                rules.ceiling)


def _unresolvable(rules: Rules, test: PairedTest, limit: float) -> str | None:
    """Why the outcome is fixed before looking at the data, for this decision and n."""
    best = test.best_bound(rules.confidence)
    if rules.decision == "upper_bound" and best > limit:
        alike = "with equal accuracies (unpaired)" if test.method.startswith("unpaired") else "with no item changed"
        return f"even {alike} the {rules.confidence:.0%} bound is {best * 100:+.1f} pt > limit"
    if rules.decision == "lower_bound" and 1 - best < limit:
        return f"even with every item lost the bound stays below the limit (n={test.n})"
    if rules.decision == "point" and test.max_weight > limit:
        return f"one item moves the score by {test.max_weight * 100:.1f} pt > limit"
    return None


def accuracy_check(rules: Rules, rule: Rule, metric: str, pair: Pair, label: str, base_mark: str | None = None) -> Check:
    """Everything but the verdict, which needs every check's p-values (see decide)."""
    b, c = pair.base.metric(metric), pair.cand.metric(metric)
    limit = rule.limit_for(metric)
    t, p = _accuracy_test(rules, rule, metric, pair)
    test, how, why = t.test, t.pairs, t.why
    base_value, cand_value = t.on_pairs or (b.value, c.value)
    if t.on_pairs:
        how += f"; values on the paired items (each side's own: {b.value:.3f} / {c.value:.3f})"
    check = Check(label, rule.label, metric, "pending", "", base_value, cand_value, (base_value - cand_value) * 100,
                  limit, "pt", test=test, pairs=how, insufficient=why, mark=base_mark, changed=p.changed if p.n else None,
                  unmeasured=p.unmeasured if p.n else (0.0, 0.0))  # unpaired: the counts cover the metric
    if test is None:
        return check
    check.change, check.low, check.high, check.n = test.drop * 100, test.low * 100, test.high * 100, test.n
    check.method = test.method
    # at the rules' planning discordance, as `validate` and `gate --plan` plan it: one figure per check,
    # whichever candidate's answers changed more (the report shows each one's share beside it)
    keys = p.keys if p.n else [()] * test.n
    check.resolvable = resolution(rules, keys) * 100
    check.needed = needed_items(keys, limit / 100, rules.confidence, rules.power, rules.discordance) \
        if limit > 0 else None
    check.insufficient = why or _unresolvable(rules, test, limit / 100)
    return check


def decide(rules: Rules, checks: list[Check]) -> None:
    """Each accuracy check's p against its limit decides it (intersection-union: no adjustment unless
    `adjust` asks); `findings` adjusts the "significantly worse" p-values over each candidate's checks,
    so neither depends on the other candidates of the call."""
    tested = [c for c in checks if c.status == "pending" and c.test is not None]
    for c in tested:
        within = rules.decision == "upper_bound" and c.insufficient is None
        c.p = c.test.p_within(c.limit / 100) if within else _p_beyond(c, c.limit)
        # the test's own p_worse where no group is missing: exact McNemar for 0/1 items
        c.p_worse = _p_beyond(c, 0.0) if c.unmeasured[0] else c.test.p_worse
    for cand in dict.fromkeys(c.candidate for c in tested):
        mine = [c for c in tested if c.candidate == cand]
        for c, q in zip(mine, adjust([c.p for c in mine], rules.adjust), strict=True):
            c.p_adj = q
        for c, q in zip(mine, adjust([c.p_worse for c in mine], rules.findings), strict=True):
            c.p_worse_adj, c.significant = q, q < rules.alpha
    for c in checks:
        if c.status == "pending":
            _verdict(rules, c)


def _insufficient(rules: Rules, c: Check) -> str:
    """`insufficient_n` lets a small check through where it says `pass`; runs of different items are
    no evidence at all, so they warn instead."""
    no_shared = (c.pairs or "").startswith(NO_SHARED)
    return "warn" if no_shared and rules.insufficient_n == "pass" else rules.insufficient_n


def _verdict(rules: Rules, c: Check) -> None:
    if c.test is None:
        c.status, c.detail = _insufficient(rules, c), f"insufficient n: {c.insufficient} ({c.pairs})"
        _uninformative(rules, c)
        return
    shown = c.p_adj < rules.alpha  # p_adj is the raw p with `adjust: none`
    adj = {"holm": "Holm ", "bh": "BH "}.get(rules.adjust, "")
    p = f"{adj}p {c.p_adj:.2g} {'<' if shown else '>='} {rules.alpha:g}"
    limit = f"limit {c.limit:g} pt"
    if c.insufficient is not None:
        c.status = "fail" if shown else _insufficient(rules, c)
        whole = " even with the candidate right on every item of the groups it lacks" if c.unmeasured[0] else ""
        verdict = f"but the drop is shown to exceed the {limit}{whole} ({p})" if shown else f"{rules.insufficient_n} as configured"
        c.detail = f"insufficient n: {c.insufficient}; {verdict}"
    elif rules.decision == "upper_bound":
        c.status, c.evidence = ("pass", True) if shown else ("fail", False)
        c.detail = f"upper bound {c.high:+.2f} pt: {'' if shown else 'not '}shown within {limit} ({p})"
    elif rules.decision == "lower_bound":
        c.status, c.evidence = ("fail", False) if shown else ("pass", True)
        c.detail = f"lower bound {c.low:+.2f} pt: {'' if shown else 'not '}shown above {limit} ({p})"
    else:
        c.status = "fail" if c.change > c.limit else "pass"
        c.evidence = c.status == "pass"
        c.detail = f"point estimate {c.change:+.2f} pt {'>' if c.status == 'fail' else '<='} {limit}"
    counts = f", {c.test.counts[0]} lost/{c.test.counts[1]} gained" if c.test.counts else ""
    sig = "significant drop" if c.significant and c.change > 0 else "no significant drop"
    fam = {"holm": "Holm", "bh": "BH"}.get(rules.findings, "unadjusted")
    c.detail += f"; {c.pairs}{counts}; {c.method}; {sig} (p {c.p_worse:.2g}, {fam} {c.p_worse_adj:.2g})"
    _uninformative(rules, c)


def _p_beyond(c: Check, points: float) -> float:
    """p for H0: the metric's drop <= `points`, over every group behind it: a drop on paired items that
    miss whole groups must hold whatever the candidate scores there."""
    return p_exceeds_whole(c.test, c.unmeasured, points / 100)


def _uninformative(rules: Rules, c: Check) -> None:
    """A check on an at-chance task is no evidence either way, unless the drop is shown beyond the limit
    (a candidate far below a near-chance baseline still fails); at ceiling, a pass means no collapse."""
    beyond = c.test is not None and _p_beyond(c, c.limit) < rules.alpha
    if c.mark in (AT_CHANCE, CHANCE_UNKNOWN) and not beyond:
        c.status, c.evidence = "uninformative", False
        why = (f"the baseline is within the {c.limit:g} pt limit of chance" if c.mark == AT_CHANCE else
               "nothing says what an answer that ignores the item scores (no chance level declared, no choices' "
               "log-probabilities, no targets)")
        c.detail = f"uninformative: {why}, so a candidate that lost all skill could pass; {c.detail}"
    elif c.mark == AT_CEILING and c.status == "pass":
        c.detail = f"at ceiling: shows no collapse, not the absence of a subtle loss; {c.detail}"


# ---------------------------------------------------------------- memory, capacity, latency


def relative_check(rules: Rules, rule: Rule, metric: str, b: float, c: float | None, label: str,
                   n: int | None = None, percentile: int | None = None, simulated: bool = False) -> Check:
    """`percentile`: q where the metric is a percentile, which needs min_samples(q) samples.
    `simulated`: the candidate ran its quantized weights dense, so it has no timing or engine figure
    of its own to miss; those checks are not judged rather than failed (its accuracy still is)."""
    limit = rule.limit_for(metric)
    growth = rule.spec.growth
    if (c is None or math.isnan(c)) and simulated:
        return Check(label, rule.label, metric, "skip", "simulated: measures accuracy only, not this", b)
    if c is None or math.isnan(c):
        return Check(label, rule.label, metric, "fail", MISSING, b, c, None, limit, "%")
    if percentile and n is not None and n < min_samples(percentile):
        need = min_samples(percentile)
        return Check(label, rule.label, metric, rules.insufficient_n,
                     f"insufficient n: p{percentile} from {n} samples (needs >= {need}, 1/(1-q))", b, c, None, limit, "%")
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


def _other_pool(metric: str, pair: Pair) -> str | None:
    """A KV-capacity figure of a pool sized on another device model measures the device, not the variant:
    the candidate's capacity on the baseline's card is not measured (core.types.pools_comparable)."""
    if metric not in POOL_METRICS or pools_comparable(pair.base, pair.cand):
        return None
    return (f"not measured on the baseline's device: KV pool sized on {pair.cand.engine.device} "
            f"(baseline: {pair.base.engine.device}), not fixed alike")


def capacity_check(rules: Rules, rule: Rule, metric: str, pair: Pair, label: str) -> Check:
    """The capacity pass's load at the SLO, the candidate's bracket against the baseline's
    (evalsuite.verdict.capacity), only on one device model and a quiet host (else not comparable:
    no verdict); a bracket the grid cannot resolve counts as an insufficient n."""
    limit = rule.limit_for(metric)
    if pair.cand.simulated:
        return Check(label, rule.label, metric, "skip", "simulated: measures accuracy only, not this")
    base, cand = bracket_for(pair.base_rd, pair.base, metric), bracket_for(pair.cand_rd, pair.cand, metric)
    if base is None:
        return Check(label, rule.label, metric, "skip", "the baseline's level records are missing")
    if cand is None:
        return Check(label, rule.label, metric, "fail", MISSING, base[1].at_slo, None, None, limit, "%")
    if (why := comparable(pair.base.engine.device, base[1], pair.cand.engine.device, cand[1])) is not None:
        return Check(label, rule.label, metric, "skip", why, base[1].at_slo, cand[1].at_slo, None, limit, "%")
    v = judge_brackets(*base, *cand, limit)
    status = rules.insufficient_n if v.status == "insufficient" else v.status
    return Check(label, rule.label, metric, status, v.detail, base[1].at_slo, cand[1].at_slo, v.change, limit, "%")


def _loaded_host(metric: str, pair: Pair) -> str | None:
    """A latency figure timed on a loaded host (evalsuite.core.types.HostLoad) waited for a CPU as well
    as for the engine: against the other side's it is not comparable, which is no evidence either way."""
    if not is_latency(metric):
        return None
    busy = [side for side, v in (("baseline", pair.base), ("candidate", pair.cand)) if v.host_load and v.host_load.loaded]
    if not busy:
        return None
    return f"not comparable: the {' and the '.join(busy)} timed on a loaded host (see the note below the table)"


def _other_condition(metric: str, pair: Pair) -> str | None:
    """Latency figures timed in two conditions (core.types.timing_unlike: paused neighbours whose queued
    work still ran, another warm-up, device or engine mode) measure the conditions as much as the
    variants: not comparable, which is no evidence either way."""
    if not is_latency(metric):
        return None
    why = timing_unlike(pair.base.timed_as(), pair.cand.timed_as())
    return None if why is None else f"not comparable: {why}"


def _timings(rd: RunDir, v: VariantResult, m: Metric | None) -> list[float]:
    """The per-request figures behind a latency metric (all its repeats at its prompt length), from
    the pass's samples; [] where none are kept."""
    found = latency_key(m.name) if m is not None else None
    if found is None:
        return []
    rows = rd.load_samples(v.variant, task_of(m.name))
    extras = [r["score"].get("extra") or {} for r in rows
              if m.length is None or str(r["score"].get("group")) == str(m.length)]
    return series(found[0], extras)


def timing_check(rules: Rules, rule: Rule, metric: str, pair: Pair, label: str) -> Check:
    """A latency or throughput figure's change from the two passes' repeats (evalsuite.stats.timing):
    failed only where its interval shows it beyond the limit, passed where it shows it within, else
    too few repeats to tell (`insufficient_n`)."""
    b_m, c_m = pair.base.metric(metric), pair.cand.metric(metric)
    limit, growth = rule.limit_for(metric), rule.spec.growth
    b, c = b_m.value, (c_m.value if c_m is not None else None)
    n = c_m.n if c_m is not None else b_m.n
    if c is None or math.isnan(c) or b_m.percentile and n is not None and n < min_samples(b_m.percentile):
        return relative_check(rules, rule, metric, b, c, label, n, b_m.percentile, pair.cand.simulated)
    ratio = c / b if b else math.inf
    change = (ratio - 1) * 100 if growth else (1 - ratio) * 100
    word = "growth" if growth else "drop"
    stat = (latency_key(metric) or ("", "p50"))[1]
    test = ratio_test(_timings(pair.base_rd, pair.base, b_m), _timings(pair.cand_rd, pair.cand, c_m), rules.confidence, stat)
    check = Check(label, rule.label, metric, rules.insufficient_n, "", b, c, change, limit, "%", n=n)
    if test is None:
        why = f"no {rules.confidence:.0%} interval of a {stat} from these repeats (3 a side at least, each kept)"
        check.detail = f"insufficient n: {why}; {word} {change:+.1f}%, limit {limit:g}%"
        return check
    edge = 1 + limit / 100 if growth else 1 - limit / 100
    check.low, check.high = ((test.low - 1) * 100, (test.high - 1) * 100) if growth else \
        ((1 - test.high) * 100, (1 - test.low) * 100)
    check.method, check.n = test.method, min(test.n_base, test.n_cand)
    beyond = test.p_above(edge) if growth else test.p_below(edge)
    within = test.p_below(edge) if growth else test.p_above(edge)
    bounds = f"{word} {change:+.1f}%, {rules.confidence:.0%} bounds {check.low:+.1f}..{check.high:+.1f}%"
    if check.low > limit:
        check.status, check.p = "fail", beyond
        check.detail = f"{bounds}: shown beyond the limit {limit:g}% ({test.method})"
    elif check.high <= limit:
        check.status, check.p, check.evidence = "pass", within, True
        check.detail = f"{bounds}: shown within the limit {limit:g}% ({test.method})"
    else:
        check.p = within
        check.detail = (f"insufficient n: {bounds} reach both sides of the limit {limit:g}%; "
                        f"{rules.insufficient_n} as configured ({test.method})")
    return check


def _pooled_timing(m: Metric, measured: dict[str, Metric]) -> bool:
    """latency/<x>_p50 when per-length latency/<x>_p50/ctx<N> exist: a timing over mixed lengths."""
    return m.kind == MetricKind.timing and m.group is None and any(
        o.kind == MetricKind.timing and o.task == m.task and o.group is not None and o.name.startswith(m.name + "/")
        for o in measured.values())


# ---------------------------------------------------------------- the rule kinds (verdict/kinds.py)


@register_rule_kind("max_drop_points", direction="higher", unit="pt")
def points_check(rules: Rules, rule: Rule, metric: str, pair: Pair, label: str) -> Check:
    """Higher is better; an accuracy-like score in [0, 1], the limit in points: the paired per-item test."""
    if pair.base.metric(metric) is None:
        return Check(label, rule.label, metric, "skip", "points rules apply to task metrics, not engine stats")
    if pair.cand.metric(metric) is None:
        b = pair.measured[metric].value
        return Check(label, rule.label, metric, "fail", MISSING, b, limit=rule.limit_for(metric), unit="pt")
    return accuracy_check(rules, rule, metric, pair, label, baseline_mark(rules, rule, metric, pair))


@register_rule_kind("max_drop_pct", direction="higher", unit="%")
def drop_pct_check(rules: Rules, rule: Rule, metric: str, pair: Pair, label: str) -> Check:
    """Higher is better, the limit in percent: KV capacity, throughput, the load at the SLO."""
    if is_at_slo(metric):
        return capacity_check(rules, rule, metric, pair, label)
    return figure_check(rules, rule, metric, pair, label)


@register_rule_kind("max_growth_pct", direction="lower", unit="%")
def growth_pct_check(rules: Rules, rule: Rule, metric: str, pair: Pair, label: str) -> Check:
    """Lower is better, the limit in percent: memory, latency."""
    return figure_check(rules, rule, metric, pair, label)


def figure_check(rules: Rules, rule: Rule, metric: str, pair: Pair, label: str) -> Check:
    """A figure against a percent limit, where the two sides measured it alike: a latency from its
    repeats (timing_check), anything else as two numbers (relative_check)."""
    b, c = pair.measured[metric].value, pair.cand_values.get(metric)
    if differ := _measured_differently(metric, pair):
        return Check(label, rule.label, metric, "skip", differ, b, c)
    if busy := _loaded_host(metric, pair) or _other_condition(metric, pair):
        return Check(label, rule.label, metric, "skip", busy, b, c)
    if elsewhere := _other_pool(metric, pair):
        return Check(label, rule.label, metric, "fail", elsewhere, b, None, None, rule.limit_for(metric), "%")
    if is_latency(metric) and pair.base.metric(metric) is not None:
        return timing_check(rules, rule, metric, pair, label)
    m = pair.cand.metric(metric) or pair.base.metric(metric)
    return relative_check(rules, rule, metric, b, c, label, m.n if m else None, pair.measured[metric].percentile,
                          pair.cand.simulated)


# ---------------------------------------------------------------- the ladder


def evaluate(rules: Rules, pair: Pair, label: str, explicit: bool) -> list[Check]:
    """Every baseline metric that a rule names, checked against the candidate by its rule's kind."""
    cand = pair.cand
    # a partial candidate is checked too: items are paired by id, so only what both sides answered is
    # compared, and every check states its n
    if cand.status not in USABLE_STATUSES:
        status = "skip" if cand.status in ("skipped", "pending") and not explicit else "fail"
        return [Check(label, "status", "variant status", status, f"{cand.status}: {cand.reason or 'no reason given'}")]
    measured = pair.measured
    bm = {name: m.value for name, m in measured.items()}
    checks = []
    for metric, b in bm.items():
        rule = rules.rule_for(metric)
        if rule is None or b is None or math.isnan(b):
            continue
        if _pooled_timing(measured[metric], measured):
            checks.append(Check(label, rule.label, metric, "skip", "pooled over prompt lengths; judged per length"))
        else:
            checks.append(rule.spec.check(rules, rule, metric, pair, label))
    tasks = {task_of(m) for m in bm}
    for rule in rules.rules:  # a metric named outright that the baseline lacks, of a task it ran, is worth a line
        for name in rule.metrics:
            if not any(ch in name for ch in "*?[") and name not in bm and task_of(name) in tasks:
                why = "not in the baseline"
                q = meaning_of_name(name)["percentile"]  # no record says what it is: its name is all there is
                if q and q > 50:
                    why += " (a tail percentile q is recorded only with >= 1/(1-q) samples: p99 >= 100)"
                checks.append(Check(label, rule.label, name, "skip", why))
    cause = (cand.reason or "").strip().splitlines()[:1] if cand.status == "partial" else []  # why a usable one lacks it
    for c in checks:
        c.value_unit = measured[c.metric].unit if c.metric in measured else ""
        if c.detail == MISSING and cause:
            c.detail = f"{MISSING} ({cause[0]})"
    return checks
