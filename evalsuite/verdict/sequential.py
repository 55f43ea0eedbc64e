"""The gate's accuracy checks on a task scored in a seeded random order (`run --stop decided`).

A candidate's task may end before its last item once every check on it is decided: passed, shown
beyond its limit (evalsuite.run.stopping asks `decisions` after each batch). The gate then
judges every check of a task that was watched so by the same confidence sequence (`sequential_test`),
at the rules' `sequence_share` of alpha; one that ran to its last item also by one fixed-n look on all
of them, at the rest (after looks at every batch a fixed-n bound at the whole alpha would not hold its
level). A check the sequence cannot resolve at the planning discordance is never watched: its task
runs whole and is judged fixed-n, as without --stop. The weights are the baseline's items of each
metric, which `--stop decided` runs whole first; the candidate's items must be the first n of the
seeded order, or they are no random sample of it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from evalsuite.core.errors import ConfigError
from evalsuite.core.rundir import RunDir
from evalsuite.core.types import EarlyStop, Metric, VariantResult, task_of
from evalsuite.verdict.rules import Rule, Rules
from evalsuite.stats.paired import Item, item_keys, paired_result, pairing, read_scores, scores_of
from evalsuite.stats.sequential import (Population, Sequential, as_paired_test, decision, floor, mean_interval,
                                         planned_bound, seeded_order, with_final_look)
from evalsuite.stats.significance import PairedTest, smallest_cell

DECISIONS = ("upper_bound", "lower_bound")  # a `point` rule has no bound to decide early


@dataclass
class Gated:
    """One gated metric of a task: its rule and limit (score units), and the baseline's items of it in
    the seeded order, as the full-data test weighs them."""

    metric: Metric
    rule: Rule
    limit: float
    order: list[str]
    base: dict[str, dict]
    population: Population


def _gated(rules: Rules, base_rd: RunDir, base: VariantResult, task: str, seed: int):
    """Each metric of `task` a rule names, with its check or why the sequence cannot watch it, in order;
    a str (why the task runs whole) ends the walk."""
    if rules.decision not in DECISIONS:
        yield f"decision {rules.decision!r} is decided on the whole task"
        return
    for m in base.metrics:
        rule = rules.rule_for(m.name)
        if task_of(m.name) != task or rule is None:
            continue
        if not rule.spec.per_item or m.strata is None:
            yield f"{m.name} is judged by {rule.kind}, on the whole task"
            return
        yield m, _check(rules, rule, base_rd, base, m, seed)


def checks(rules: Rules, base_rd: RunDir, base: VariantResult, task: str, seed: int) -> list[Gated] | str:
    """The checks a candidate's task must decide before it may stop, or why it must run whole: a rule
    of another kind (latency, memory) on its metrics, scores outside [0, 1], or a check the full data
    could not resolve (too few items, a stratum too small) and that the gate judges on all of them."""
    out = []
    for item in _gated(rules, base_rd, base, task, seed):
        found = item if isinstance(item, str) else item[1]
        if isinstance(found, str):
            return found
        out.append(found)
    return out or "no accuracy rule names its metrics"


def watched(rules: Rules, base_rd: RunDir, base: VariantResult, task: str,
            seed: int) -> tuple[list[Gated], dict[int, str]] | str:
    """(the checks a candidate's task is watched by, length -> why its check runs to its fixed n), or
    why the whole task runs whole. As `checks`, but one length's check the sequence cannot resolve
    keeps only that length's items running: the others stop as their own checks are decided."""
    out, fixed = [], {}
    for item in _gated(rules, base_rd, base, task, seed):
        if isinstance(item, str):
            return item
        m, found = item
        if isinstance(found, str) and m.length is not None and m.depth is None:
            fixed[m.length] = f"fixed n: {found}"
        elif isinstance(found, str):
            return found
        else:
            out.append(found)
    if not out:
        return "no accuracy rule names its metrics" if not fixed else "no check of it can be decided early"
    return out, fixed


def _check(rules: Rules, rule: Rule, base_rd: RunDir, base: VariantResult, m: Metric, seed: int) -> Gated | str:
    items = read_scores(base_rd, base.variant, m)
    if not all(0 <= r["value"] <= 1 for r in items.values()):
        return f"{m.name} has scores outside [0, 1]"
    order = seeded_order(items, seed, task_of(m.name))
    strata = rule.strata or m.strata or []
    keys = item_keys((items[s] for s in order), strata)
    pop, limit = Population.of(keys), rule.limit_for(m.name) / 100
    if pop.n < rules.min_n or smallest_cell(keys) < rules.min_stratum_n:
        return f"{m.name}: {pop.n} items, smallest stratum {smallest_cell(keys)}: too few to judge early"
    if rules.decision == "upper_bound" and floor(pop, limit, rules.sequence_alpha) >= limit:
        return f"{m.name}: {pop.n} items cannot resolve its {limit * 100:g} pt limit in a confidence sequence"
    if rules.decision == "upper_bound" and planned_bound(pop, limit, rules.sequence_alpha, rules.discordance) >= limit:
        return (f"{m.name}: {pop.n} items cannot resolve its {limit * 100:g} pt limit in a confidence sequence at "
                f"{rules.discordance:.0%} of answers changing; judged fixed-n on all of them")
    return Gated(m, rule, limit, order, items, pop)


def sequence(rules: Rules, check: Gated, cand: dict[str, dict], prefix: bool = False) -> Sequential | str:
    """The check's test on the candidate's items, which must be the first n of the seeded order; with
    `prefix`, on the longest run of them that is (a task stopped by length: its task-wide checks were
    decided on such a run, and a confidence sequence holds at any n)."""
    seen = longest_prefix(check.order, cand) if prefix else first_in_order(check.order, cand)
    if seen is None:
        return f"the candidate's {len(cand)} items of {check.metric.name} are not the first of the seeded order"
    drops = [check.base[s]["value"] - cand[s]["value"] for s in seen]
    return Sequential(check.population, drops, check.limit, rules.sequence_alpha, rules.discordance, rules.final_alpha)


def first_in_order(order: list[str], cand: dict[str, dict]) -> list[str] | None:
    """The ids of `order` the candidate scored, where they are its first n (a random sample of it), else None."""
    seen = [s for s in order if s in cand]
    return seen if seen == order[: len(seen)] else None


def longest_prefix(order: list[str], cand: dict[str, dict]) -> list[str]:
    """The first ids of `order`, up to the first the candidate did not score."""
    out = []
    for s in order:
        if s not in cand:
            break
        out.append(s)
    return out


def decisions(rules: Rules, found: list[Gated], cand: Iterable[Item], prefix: bool = False) -> dict[str, str | None]:
    """Each check's decision on the candidate's items recorded so far (stats.paired.scored_items of its
    samples): pass, fail, or None (open)."""
    out: dict[str, str | None] = {}
    cand = tuple(cand)
    for check in found:
        seq = sequence(rules, check, scores_of(cand, check.metric), prefix)
        out[check.metric.name] = None if isinstance(seq, str) else decision(seq, rules.decision)[0]
    return out


def early_stop(cand: VariantResult, metric: str) -> EarlyStop | None:
    return cand.stopped.get(task_of(metric))


def sequential_test(rules: Rules, rule: Rule, base_rd: RunDir, base: VariantResult, cand_rd: RunDir,
                    cand: VariantResult, metric: str, stop: EarlyStop) -> tuple[PairedTest | None, str, str | None] | None:
    """(the test, how the items were matched, why it cannot judge) for a check of a task run under
    --stop decided: its bounds and p-values are the confidence sequence's at the items recorded (and,
    at the last item, the final fixed-n look's). One the task stopped before deciding is open (a record
    of a futility stop reads so). None: judge it fixed-n, as without --stop (a task these
    rules never watch, run to its last item)."""
    m = base.metric(metric)
    if m is None or not read_scores(base_rd, base.variant, m):  # the items that decided the stop are not there
        raise ConfigError(f"{base_rd.samples_file(base.variant, task_of(metric))}: no scored items of {metric}, yet "
                          f"{cand.variant}'s record says --stop decided ended its task by them (stopped.{task_of(metric)}); "
                          "the baseline's run folder is incomplete")
    found = _check(rules, rule, base_rd, base, m, stop.seed)
    if isinstance(found, str) and not stop.early and isinstance(checks(rules, base_rd, base, task_of(metric),
                                                                       stop.seed), str):
        # these rules never watch the task, and it ran to its last item: its data are the full data
        # whatever was looked at, so it is judged as a run without --stop would be
        return None
    if isinstance(found, str) and m.length is not None and m.length not in stop.lengths \
            and read_scores(base_rd, base.variant, m).keys() <= read_scores(cand_rd, cand.variant, m).keys():
        return None  # a length whose check the sequence cannot resolve ran to its fixed n: judged fixed-n
    if isinstance(found, str):
        return None, "sequential", f"run under --stop decided, but {found}"
    seq = sequence(rules, found, read_scores(cand_rd, cand.variant, found.metric), prefix=bool(stop.lengths))
    if isinstance(seq, str):
        return None, "sequential", seq
    decided, _ = decision(seq, rules.decision)
    whole = seq.n >= seq.pop.n
    share = rules.sequence_share
    how = (f"all {seq.n} items in the seeded order (run --stop decided)" if whole else
           f"stopped early at n={seq.n} of {seq.pop.n} in the seeded order (run --stop decided)")
    why = None if decided or whole else (f"the task stopped at {seq.n} of {seq.pop.n} items before this check was "
                                         f"decided (under {stop.rules or 'the shipped rules'})")
    test = as_paired_test(seq, "", share)
    if whole and rules.final_alpha and decided != "fail":  # the final fixed-n look, at the rest of alpha
        p = pairing(base_rd, base.variant, cand_rd, cand.variant, found.metric, found.rule.strata or None)
        test = with_final_look(test, paired_result(p, 1 - rules.final_alpha), share)
    return test, how, why


def stopped_score(base: dict[str, dict], cand: dict[str, dict], metric: Metric, stop: EarlyStop,
                  confidence: float) -> tuple[float, float] | str:
    """One variant's score interval where `stop` ended its task early: the confidence sequence of its
    mean over the seeded order (stats.sequential.mean_interval), the strata weighed as in the
    population, which the baseline's items (run whole first) give; or why none holds its level."""
    order = seeded_order(base, stop.seed, metric.task)
    seen = longest_prefix(order, cand) if stop.lengths else first_in_order(order, cand)
    if not seen or (len(seen) < len(cand) and not stop.lengths):
        return (f"{metric.name}: the items scored are not the first {len(cand):,} of the baseline's {len(order):,} "
                "in the seeded order")
    values = [cand[s]["value"] for s in seen]
    if not all(0 <= v <= 1 for v in values):
        return f"{metric.name} has scores outside [0, 1]"
    keys = item_keys((base[s] for s in order), metric.strata or [])
    return mean_interval(Population.of(keys), values, confidence)


def stopped_interval(rules: Rules, base_rd: RunDir, base: VariantResult, cand_rd: RunDir, cand: VariantResult,
                     metric: str, confidence: float) -> PairedTest | None:
    """For `compare`: the sequential test's one-sided bounds at `confidence` where the candidate stopped
    the metric's task early (a fixed-n interval on the items it stopped at would not hold its level),
    else None."""
    stop, rule = early_stop(cand, metric), rules.rule_for(metric)
    if stop is None or rule is None or not rule.spec.per_item:
        return None
    at = rules.model_copy(update={"confidence": confidence})
    found = sequential_test(at, rule, base_rd, base, cand_rd, cand, metric, stop)
    return None if found is None else found[0]
