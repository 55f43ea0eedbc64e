"""Pure metric functions over scores and latencies. No I/O, no engine."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from statistics import NormalDist

import numpy as np

from evalsuite.core.types import Metric, MetricKind, Score
from evalsuite.stats import CONFIDENCE
from evalsuite.stats.strata import mean_stderr, strata_stderr


def accuracy(scores: Sequence[Score], name: str, kind: MetricKind = MetricKind.proportion,
             length: int | None = None, depth: int | None = None) -> Metric:
    """The mean of per-item scores: a proportion for 0/1 scores, `MetricKind.mean` for partial credit;
    `length` (and `depth`) where the scores are one prompt length's (one grid cell's)."""
    mean, se = mean_stderr([s.value for s in scores])
    return Metric(name=name, value=mean, stderr=se, n=len(scores), length=length, depth=depth,
                  **score_meaning(kind, []))


def score_meaning(kind: MetricKind, strata: list[str]) -> dict:
    """The fields of a mean of per-item scores: higher is better, unitless, weighed by `strata`."""
    return {"kind": kind, "unit": "", "direction": "higher", "strata": strata}


def by_group(scores: Iterable[Score], key=lambda s: s.group) -> dict[str, list[Score]]:
    groups: dict[str, list[Score]] = defaultdict(list)
    for s in scores:
        groups[str(key(s))].append(s)
    return dict(sorted(groups.items()))


def macro_accuracy(groups: dict[str, list[Score]], name: str) -> Metric:
    """Unweighted mean of per-group accuracies; stderr over items, the groups fixed."""
    kept = [g for g in groups.values() if g]
    per_group = [sum(s.value for s in g) / len(g) for g in kept]
    mean = sum(per_group) / len(per_group) if per_group else float("nan")
    se = strata_stderr([[s.value for s in g] for g in kept])
    return Metric(name=name, value=mean, stderr=se, n=sum(len(g) for g in kept),
                  **score_meaning(MetricKind.mean, ["group"]))


def strata_keys(scores: Sequence[Score], strata: Sequence[str]) -> list[tuple[float, tuple]]:
    """(value, its strata's levels) per item, as the paired tests key items: `str` of each field."""
    return [(s.value, tuple(str(getattr(s, k)) for k in strata)) for s in scores]


def balanced_accuracy(scores: Sequence[Score], name: str, strata: tuple[str, ...] = ("target",)) -> Metric:
    """Mean recall over the target classes (LegalBench's metric for Yes/No tasks); with ("group",
    "target"), where its scores span several groups, the mean over groups of each group's mean recall.
    Value, stderr and interval all weigh items by `strata`, as the paired tests and `check` do: a recall
    pooled over groups is another statistic, which the interval and the gate's drop are not centred on."""
    from evalsuite.stats.significance import stratified_mean  # the module loads scipy

    keyed = strata_keys(scores, strata)
    value, se = stratified_mean([v for v, _ in keyed], [k for _, k in keyed]) if keyed else (float("nan"), None)
    return Metric(name=name, value=value, stderr=se, n=len(scores), **score_meaning(MetricKind.mean, list(strata)))


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method), q in [0, 100]; nan for no values."""
    return float(np.percentile(values, q)) if len(values) else float("nan")


def min_samples(q: float) -> int:
    """Samples a percentile needs to mean something: the median any; a tail percentile q enough
    that at least one sample is expected beyond it, 1/(1 - q): p90 10, p99 100."""
    return 1 if q <= 50 else math.ceil(round(1 / (1 - q / 100), 9))


def latency_summary(values: Sequence[float | None], prefix: str, unit: str = "ms", rate: bool = False) -> list[Metric]:
    """mean/p50/p90/p99 of a latency series in `unit` (a rate's, higher better, where `rate`), each
    percentile only with min_samples(q) samples; `prefix` names the unit too, e.g. latency/ttft_ms."""
    xs = [v for v in values if v is not None and not math.isnan(v)]
    if not xs:
        return []
    mean, se = mean_stderr(xs)
    timing = ({"kind": MetricKind.quantity, "unit": unit, "direction": "higher"} if rate
              else {"kind": MetricKind.timing, "unit": unit, "direction": "lower"})
    out = [Metric(name=f"{prefix}_mean", value=mean, stderr=se, n=len(xs), **timing)]
    for q in (50, 90, 99):
        if len(xs) >= min_samples(q):
            out.append(Metric(name=f"{prefix}_p{q}", value=percentile(xs, q), n=len(xs), percentile=q, **timing))
    return out


def accuracy_interval(m: Metric, confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """A single accuracy's two-sided interval: the one recorded with it where its task stopped early
    (`Metric.ci95`, at 95% only), else Wilson for a mean of per-item scores (acc,
    exact_match) and for a mean of partial credit with every item at 0 or every item at 1, else the
    normal interval from its stderr clipped to [0, 1] (partial credit, macro and balanced means of
    several proportions, where no single count exists)."""
    from evalsuite.stats.significance import wilson  # scipy/statsmodels load only when intervals are wanted

    if m.ci95 is not None:  # fixed when the metric was made (a task stopped early): no formula of n holds
        return (m.ci95[0], m.ci95[1]) if len(m.ci95) == 2 and math.isclose(confidence, 0.95) else None
    if m.n and m.kind == MetricKind.proportion and 0 <= m.value <= 1:
        return wilson(m.value * m.n, m.n, confidence)
    if m.n and m.item_score and m.in_points and not m.stderr and m.value in (0.0, 1.0):
        # every item scored the same bound, so every item is 0 or every item 1 and a count exists:
        # the normal interval of a zero stderr would claim a certainty that n items cannot give
        return wilson(m.value * m.n, m.n, confidence)
    if m.stderr is not None and not math.isnan(m.value):
        z = NormalDist().inv_cdf(0.5 + confidence / 2)
        return max(0.0, m.value - z * m.stderr), min(1.0, m.value + z * m.stderr)
    return None


def interval_metrics(metrics: Sequence[Metric], confidence: float = CONFIDENCE) -> list[Metric]:
    """`task/acc_ci95_low` and `_high` beside each task-level proportion and mean (macro, balanced,
    partial credit), for MLflow and readers that have only the metrics; per-group
    intervals are left to compare, to keep MLflow lean."""
    tag = f"ci{round(confidence * 100)}"
    out = []
    for m in metrics:
        if m.group is not None or m.kind not in (MetricKind.proportion, MetricKind.mean):
            continue
        ci = accuracy_interval(m, confidence)
        if ci is not None:
            bound = {"n": m.n, "kind": MetricKind.bound, "direction": "higher"}
            out += [Metric(name=f"{m.name}_{tag}_low", value=ci[0], **bound),
                    Metric(name=f"{m.name}_{tag}_high", value=ci[1], **bound)]
    return out
