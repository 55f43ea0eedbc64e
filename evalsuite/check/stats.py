"""Intervals for claims, read from run folders: accuracy from the per-item scores a run recorded, the
per-request timings of a timed task. The arithmetic is evalsuite.stats's (paired, significance, timing).

Accuracy goes through the one statistics path of evalsuite.stats.paired (the item reader, strata
rule and paired test of `compare` and `gate`): a paired difference on the items both answered (exact
McNemar with Tango's bounds, Tango per stratum by MOVER where weighted, else the stratified paired
bootstrap), a single score's Wilson interval (normal over fixed strata where weighted) or bootstrap.
Where the items do not reproduce the recorded metric, they do not describe it: the interval falls back
to the recorded standard errors (normal approximation) and says so. A difference on a task that `run
--stop decided` watched gets the gate's confidence sequence (verdict.sequential.stopped_interval),
and one score of a task it stopped early its own (stopped_score), never a fixed-n interval: after a
look at every batch that would not hold its level.

A timing (TTFT, ITL, e2e) compared between two variants gets evalsuite.stats.timing's t interval for
the change in its per-request means, paired by request id where both recorded the same requests.
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

from evalsuite.check.runs import Found, NotMeasurable
from evalsuite.core.errors import ConfigError
from evalsuite.core.rundir import RunDir
from evalsuite.core.types import EarlyStop, Metric, task_of
from evalsuite.verdict.rules import Rules, default_rules_path, load_rules
from evalsuite.verdict.sequential import stopped_interval, stopped_score
from evalsuite.stats.paired import difference_interval, item_interval, item_mean, pair, read_scores
from evalsuite.stats.significance import mcnemar_two_sided, two_sided
from evalsuite.stats.timing import Interval


def items_for(run_root: Path, variant: str, metric: Metric) -> dict[str, dict]:
    """sample id -> {value, group, target, pred} behind `metric`; read without creating anything."""
    return read_scores(RunDir(run_root), variant, metric)


def _reproduces(value: float, recorded: float | None) -> bool:
    return recorded is not None and not math.isnan(recorded) and abs(value - recorded) < 1e-6


def paired_interval(base: dict[str, dict], cand: dict[str, dict], metric: Metric, recorded: tuple[float, float],
                    confidence: float) -> Interval | None:
    """Interval of candidate - baseline (score units) over shared items, or None where the items do not
    reproduce both recorded metrics."""
    strata = metric.strata
    if strata is None:
        return None
    p = pair(base, cand, strata)
    if p.n < 2 or p.smallest_cell < 2:
        return None
    if not all(_reproduces(v, r) for v, r in zip(p.means(), recorded, strict=True)):
        return None
    low, high, test = difference_interval(p, confidence)
    how = f"paired over {p.n:,} items: {test.method}"
    p_value = mcnemar_two_sided(*test.counts) if test.counts else None
    return Interval(low, high, how, p.n, p_value)


def _stop_rules(stop: EarlyStop) -> Rules:
    """The rules that watched the task (its bets aim at their limits), the shipped ones where the
    record names none or the file is not here: any predictable bets keep the sequence's level."""
    try:
        return load_rules(stop.rules or default_rules_path())
    except ConfigError:
        return load_rules(default_rules_path())


def stopped_difference(base: Found, cand: Found, metric: Metric, confidence: float) -> Interval | None:
    """Interval of cand - base (score units) where either side's task was watched by `run --stop
    decided`: the confidence sequence's two bounds at `confidence`, judged against the side that ran
    whole; None where neither was watched. NotMeasurable where no sequence can judge it (both sides
    stopped early, a metric no accuracy rule names): a fixed-n interval there would not hold its level."""
    task = task_of(metric.name)
    stops = [f.result.stopped.get(task) for f in (base, cand)]
    if stops == [None, None]:
        return None
    if all(s is not None and s.early for s in stops):
        raise NotMeasurable(f"both {base.label} and {cand.label} stopped {task} early (run --stop decided): a "
                            "confidence sequence needs one side scored whole")
    flip = stops[1] is None or (stops[0] is not None and stops[0].early)
    whole, watched = (cand, base) if flip else (base, cand)
    stop = watched.result.stopped[task]
    test = stopped_interval(_stop_rules(stop), whole.run.rd, whole.result, watched.run.rd, watched.result,
                            metric.name, two_sided(confidence))
    if test is None:
        if not stop.early:
            return None  # scored whole, and no rule watched this metric: its items are all there are
        raise NotMeasurable(f"{watched.label} stopped {task} at {stop.items:,} of {stop.of:,} items (run --stop "
                            f"decided), and no confidence sequence judges {metric.name} against {whole.label}; "
                            "a fixed-n interval on the items it stopped at would not hold its level")
    # the sequence bounds the drop whole - watched
    low, high = (test.low, test.high) if flip else (-test.high, -test.low)
    return Interval(low, high, test.method, test.n)


def stopped_single(found: Found, metric: Metric, confidence: float) -> Interval | None:
    """One variant's score where `run --stop decided` ended its task early: the confidence sequence of
    its mean over the seeded order, the run's baseline (run whole) giving the population; None where the
    task ran whole. NotMeasurable where no sequence can be formed: Wilson at a stopped n would not hold."""
    stop = found.result.stopped.get(metric.task)
    if stop is None or not stop.early:
        return None
    rd, baseline = found.run.rd, found.run.rd.read_config().get("baseline")
    if not isinstance(baseline, str) or baseline == found.result.variant or rd.load_result(baseline) is None:
        raise NotMeasurable(f"{found.label} stopped {metric.task} at {stop.items:,} of {stop.of:,} items (run "
                            "--stop decided), and its run folder holds no baseline scored whole to weigh them by")
    ci = stopped_score(read_scores(rd, baseline, metric), read_scores(rd, found.result.variant, metric), metric, stop,
                       confidence)
    if isinstance(ci, str):
        raise NotMeasurable(f"{found.label} stopped {metric.task} early (run --stop decided): {ci}")
    return Interval(ci[0], ci[1], f"confidence sequence over the seeded order (run --stop decided: stopped at "
                    f"{stop.items:,} of {stop.of:,} items)", stop.items)


def single_interval(items: dict[str, dict], metric: Metric, recorded: float, confidence: float) -> Interval | None:
    """Interval of one variant's score: Wilson for 0/1 items (normal over fixed strata where weighted), else a bootstrap."""
    strata = metric.strata
    if strata is None or len(items) < 2:
        return None
    if not _reproduces(item_mean(items, strata), recorded):
        return None
    low, high, how = item_interval(items, strata, confidence)
    return Interval(low, high, how, len(items))


@lru_cache(maxsize=64)
def _timed_rows(run_root: Path, variant: str, task: str) -> tuple[tuple[str, str, dict], ...]:
    """(request id, group, timings) of a timed task's samples, read once however many checks ask."""
    rows = []
    for row in RunDir(run_root).load_samples(variant, task):
        score = row.get("score") or {}
        sid = score.get("sample_id") or (row.get("sample") or {}).get("id")
        rows.append((str(sid), str(score.get("group")), score.get("extra") or {}))
    return tuple(rows)


def request_timings(run_root: Path, variant: str, task: str, field: str, group: str | None) -> dict[str, float]:
    """request id -> one timing (`ttft_ms`, `itl_ms`, `e2e_ms`) of a timed task's samples, one prompt length's if given."""
    return {sid: float(extra[field]) for sid, g, extra in _timed_rows(run_root, variant, task)
            if isinstance(extra.get(field), (int, float)) and (group is None or g == group)}


