"""Pure metric functions over scores and latencies. No I/O, no engine."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence

from evalsuite.types import Metric, Score


def mean_stderr(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and its standard error (sample std / sqrt(n)), as lm-eval reports it."""
    n = len(values)
    if n == 0:
        return float("nan"), None
    mean = sum(values) / n
    if n < 2:
        return mean, None
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


def accuracy(scores: Sequence[Score], name: str) -> Metric:
    mean, se = mean_stderr([s.value for s in scores])
    return Metric(name=name, value=mean, stderr=se, n=len(scores))


def by_group(scores: Iterable[Score], key=lambda s: s.group) -> dict[str, list[Score]]:
    groups: dict[str, list[Score]] = defaultdict(list)
    for s in scores:
        groups[str(key(s))].append(s)
    return dict(sorted(groups.items()))


def macro_accuracy(groups: dict[str, list[Score]], name: str) -> Metric:
    """Unweighted mean of per-group accuracies; stderr from the group accuracies' spread."""
    per_group = [sum(s.value for s in g) / len(g) for g in groups.values() if g]
    mean, se = mean_stderr(per_group)
    return Metric(name=name, value=mean, stderr=se, n=sum(len(g) for g in groups.values()))


def balanced_accuracy(scores: Sequence[Score], name: str) -> Metric:
    """Mean recall over the target classes (LegalBench's metric for Yes/No tasks)."""
    by_target = by_group(scores, key=lambda s: s.target)
    recalls = [sum(s.value for s in g) / len(g) for g in by_target.values() if g]
    value = sum(recalls) / len(recalls) if recalls else float("nan")
    se = _balanced_stderr(by_target)
    return Metric(name=name, value=value, stderr=se, n=len(scores))


def _balanced_stderr(by_target: dict[str, list[Score]]) -> float | None:
    k = len(by_target)
    if k == 0 or any(len(g) < 2 for g in by_target.values()):
        return None
    var = 0.0
    for g in by_target.values():
        p = sum(s.value for s in g) / len(g)
        var += p * (1 - p) / len(g)
    return math.sqrt(var) / k


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), q in [0, 100]."""
    xs = sorted(values)
    if not xs:
        return float("nan")
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def latency_summary(values: Sequence[float | None], prefix: str) -> list[Metric]:
    """mean/p50/p90/p99 of a latency series; `prefix` carries the unit, e.g. latency/ttft_ms."""
    xs = [v for v in values if v is not None and not math.isnan(v)]
    if not xs:
        return []
    mean, se = mean_stderr(xs)
    out = [Metric(name=f"{prefix}_mean", value=mean, stderr=se, n=len(xs))]
    for q in (50, 90, 99):
        out.append(Metric(name=f"{prefix}_p{q}", value=percentile(xs, q), n=len(xs)))
    return out


def paired_diff(base: Sequence[float], cand: Sequence[float]) -> tuple[float, float | None]:
    """Mean of per-item differences (cand - base) and its standard error."""
    return mean_stderr([c - b for b, c in zip(base, cand, strict=True)])
