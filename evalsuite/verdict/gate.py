"""The quality gate: does a candidate keep accuracy, memory and latency within a baseline's limits?

Accuracy is judged on paired per-item results (the sample ids both runs answered), because two
variants answering the same questions differ far less than two independent samples; evalsuite.stats
has the methods. A candidate passes only if EVERY check passes, each one-sided at alpha: an
intersection-union test (Berger 1982), so no multiplicity adjustment on the pass, and one candidate's
verdict never depends on which others share the call. Holm or BH adjust only the other family, the
findings that a metric got significantly worse.

Never green without evidence: too few items, a limit this n cannot resolve, or groups a cut run never
reached make a check "insufficient n" (it follows `insufficient_n`), a baseline at chance makes it
`uninformative`, and a candidate with no failed check but no evidence is `inconclusive` (exit 3); a
drop shown beyond the limit fails at any n. A control's verdict never sets the exit code. Memory
compares two figures; latency (per length) an interval of its repeats, between passes timed alike.
The decision rules: evalsuite/verdict/gate_rules.yaml; the reasoning: docs/statistics.md.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Literal

from evalsuite.core.errors import ConfigError
from evalsuite.core.records import RESULT_FILE, RUN_FILE, SAMPLES_DIR, SAMPLES_SUFFIX, RunDir
from evalsuite.core.types import (POOL_METRICS, USABLE_STATUSES, HostLoad, Metric, MetricKind, VariantResult, definitions_unlike,
                                  meaning_of_name, pools_comparable, task_of, timing_unlike)
from evalsuite.verdict.capacity import bracket_for, comparable, is_at_slo, judge_brackets
from evalsuite.verdict.compare import flat_metrics, is_latency, label_entries
from evalsuite.verdict.rules import Rule, Rules, resolution
from evalsuite.verdict.sequential import early_stop, sequential_test
from evalsuite.verdict.informative import AT_CEILING, AT_CHANCE, CHANCE_UNKNOWN, chance_level, mark
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
    growth = rule.kind == "max_growth_pct"
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
    limit, growth = rule.limit_for(metric), rule.kind == "max_growth_pct"
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


def evaluate(rules: Rules, pair: Pair, label: str, explicit: bool) -> list[Check]:
    """Every baseline metric that a rule names, checked against the candidate."""
    cand = pair.cand
    # a partial candidate is checked too: items are paired by id, so only what both sides answered is
    # compared, and every check states its n
    if cand.status not in USABLE_STATUSES:
        status = "skip" if cand.status in ("skipped", "pending") and not explicit else "fail"
        return [Check(label, "status", "variant status", status, f"{cand.status}: {cand.reason or 'no reason given'}")]
    measured, cm = pair.base.measured(), flat_metrics(cand)
    bm = {name: m.value for name, m in measured.items()}
    checks = []
    for metric, b in bm.items():
        rule = rules.rule_for(metric)
        if rule is None or b is None or math.isnan(b):
            continue
        if _pooled_timing(measured[metric], measured):
            checks.append(Check(label, rule.label, metric, "skip", "pooled over prompt lengths; judged per length"))
        elif is_at_slo(metric) and rule.kind == "max_drop_pct":
            checks.append(capacity_check(rules, rule, metric, pair, label))
        elif rule.kind != "max_drop_points" and (differ := _measured_differently(metric, pair)):
            checks.append(Check(label, rule.label, metric, "skip", differ, b, cm.get(metric)))
        elif rule.kind != "max_drop_points" and (busy := _loaded_host(metric, pair) or _other_condition(metric, pair)):
            checks.append(Check(label, rule.label, metric, "skip", busy, b, cm.get(metric)))
        elif rule.kind != "max_drop_points" and (elsewhere := _other_pool(metric, pair)):
            checks.append(Check(label, rule.label, metric, "fail", elsewhere, b, None, None, rule.limit_for(metric), "%"))
        elif rule.kind != "max_drop_points" and is_latency(metric) and pair.base.metric(metric) is not None:
            checks.append(timing_check(rules, rule, metric, pair, label))
        elif rule.kind != "max_drop_points":
            m = cand.metric(metric) or pair.base.metric(metric)
            checks.append(relative_check(rules, rule, metric, b, cm.get(metric), label, m.n if m else None,
                                         measured[metric].percentile, cand.simulated))
        elif pair.base.metric(metric) is None:
            checks.append(Check(label, rule.label, metric, "skip", "points rules apply to task metrics, not engine stats"))
        elif cand.metric(metric) is None:
            checks.append(Check(label, rule.label, metric, "fail", MISSING, b, limit=rule.limit_for(metric), unit="pt"))
        else:
            checks.append(accuracy_check(rules, rule, metric, pair, label, baseline_mark(rules, rule, metric, pair)))
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


# ---------------------------------------------------------------- which variants


@dataclass
class Side:
    """One side of the gate as given: a run folder and, optionally, one of its variants."""

    run_dir: RunDir
    variant: str | None = None
    # the command-line flag that named this side's variant, for an error about it; not part of its identity
    flag: str | None = field(default=None, compare=False)


def baseline_variant(rd: RunDir, wanted: str | None, flag: str = "--baseline") -> VariantResult:
    """The variant named, else the only variant, else the config's `baseline` key."""
    record = rd.load_run()
    names = [v.variant for v in record.variants]
    name = wanted or (names[0] if len(names) == 1 else rd.read_config().get("baseline"))
    if not name:
        raise ConfigError(f"--baseline: run {record.run_id} holds {', '.join(names)}; name one as "
                          f"{rd.root}:VARIANT or with --variant-baseline (or set `baseline` in its config)")
    v = record.variant(name)
    if v is None:
        raise ConfigError(f"{flag}: {name!r} is not a variant of run {record.run_id} (allowed: {', '.join(names)})")
    if v.status not in USABLE_STATUSES:
        raise ConfigError(f"baseline variant {name!r} of run {record.run_id} is {v.status}: {v.reason or '-'}")
    return v


def candidate_variants(side: Side, base_rd: RunDir, base: VariantResult) -> list[VariantResult]:
    """The variant named, else every variant of the candidate run but the baseline itself and the
    controls its config names: a control is named, never a candidate by default."""
    record = side.run_dir.load_run()
    flag = side.flag or "--candidate"
    if side.variant:
        v = record.variant(side.variant)
        if v is None:
            raise ConfigError(f"{flag}: {side.variant!r} is not a variant of run {record.run_id} "
                              f"(allowed: {', '.join(v.variant for v in record.variants)})")
        return [v]
    same_run = side.run_dir.root.resolve() == base_rd.root.resolve()
    controls = {str(n) for n in side.run_dir.read_config().get("controls") or []}
    out = [v for v in record.variants if not (same_run and v.variant == base.variant) and v.variant not in controls]
    if not out:
        but = f" but its controls ({', '.join(sorted(controls))}), which are noise references" if controls else ""
        raise ConfigError(f"{flag}: run {record.run_id} has no variant to compare with {base.variant!r}{but}; "
                          f"nothing to judge")
    return out


# ---------------------------------------------------------------- the gate


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


def control_sides(baseline: Side, controls: list[Side] | None) -> list[Side]:
    """The controls given, else the baseline run's config `controls:` (variants of that run)."""
    if controls is not None:
        return controls
    names = baseline.run_dir.read_config().get("controls") or []
    measured = {v.variant for v in baseline.run_dir.load_run().variants}
    # a control the config names but the run never measured (a run limited with -V) is no noise floor
    return [Side(baseline.run_dir, str(n)) for n in names if str(n) in measured]


def _controls(baseline: Side, base: VariantResult, candidates: list[Side], controls: list[Side] | None) -> list[Side]:
    """control_sides, less the baseline and every candidate: a control's checks are a noise reference,
    not a verdict, so a candidate that were also a control would pass unjudged. One given on the
    command line that is a candidate, named (RUN:VARIANT) or as one of a run's variants (RUN), or the
    baseline, is refused; one the config names is left out where named as a candidate."""
    taken = {(c.run_dir.root.resolve(), c.variant): "a candidate" for c in candidates if c.variant}
    for c in candidates:
        if not c.variant:
            for v in candidate_variants(c, baseline.run_dir, base):
                taken[(c.run_dir.root.resolve(), v.variant)] = f"a candidate (--candidate {c.run_dir.root.name} " \
                                                              f"judges every variant of that run but its controls)"
    taken[(baseline.run_dir.root.resolve(), base.variant)] = "the baseline"
    out = []
    for side in control_sides(baseline, controls):
        role = taken.get((side.run_dir.root.resolve(), side.variant))
        if role and controls is not None:
            raise ConfigError(f"{side.flag or '--control'} {side.run_dir.root}:{side.variant}: is {role}; "
                              f"a control is another variant (the baseline rerun, or another engine mode)")
        if not role:
            out.append(side)
    return out


_LAST: dict[tuple, GateReport] = {}


def run_gate(baseline: Side, candidates: list[Side], rules: Rules, rules_path: str,
             controls: list[Side] | None = None) -> GateReport:
    """Each candidate variant (and control) against the baseline; names are run:variant only where they clash.
    The end of `evalsuite run` asks twice for the same verdicts (the summary's gate column, then the
    report page), and on a large run each paired test is seconds: the last answer is kept, keyed on
    the sides, the rules and the records' modification times, and handed out as a copy."""
    key = _gate_key(baseline, candidates, rules, rules_path, controls)
    if key not in _LAST:
        _LAST.clear()
        _LAST[key] = _run_gate(baseline, candidates, rules, rules_path, controls)
    return copy.deepcopy(_LAST[key])


def _gate_key(baseline: Side, candidates: list[Side], rules: Rules, rules_path: str,
              controls: list[Side] | None) -> tuple:
    sides = [baseline, *candidates, *(controls or [])]
    roots = {s.run_dir.root.resolve() for s in sides}
    patterns = (RUN_FILE, f"*/{RESULT_FILE}", f"*/{SAMPLES_DIR}/*{SAMPLES_SUFFIX}")
    files = [f for r in sorted(roots) for pattern in patterns for f in sorted(r.glob(pattern))]
    return (tuple((str(s.run_dir.root.resolve()), s.variant) for s in sides), len(candidates),
            rules.model_dump_json(), rules_path, tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files))


def _run_gate(baseline: Side, candidates: list[Side], rules: Rules, rules_path: str,
              controls: list[Side] | None) -> GateReport:
    base = baseline_variant(baseline.run_dir, baseline.variant, baseline.flag or "--baseline")
    entries = [(baseline.run_dir, base)]
    ctrl = _controls(baseline, base, candidates, controls)
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
        raise ConfigError(f"nothing to judge: every candidate given is a control ({', '.join(control_labels)}), a noise "
                          f"reference, never a verdict; give a --candidate that is not one")
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
