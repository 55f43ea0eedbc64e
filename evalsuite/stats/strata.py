"""Standard errors of a mean and of a mean of stratum means, the strata fixed: the one definition
that metrics (a macro or balanced accuracy's stderr) and significance (the same interval drawn from
items) both use. Imports nothing else of evalsuite.stats, so neither depends on the other for it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist


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


def strata_stderr(strata: Sequence[Sequence[float]], weights: Sequence[float] | None = None) -> float | None:
    """Standard error of the mean of stratum means (unweighted, else weighed by `weights`), the strata
    fixed (the same subjects, labels or tasks in every run: only their items are a sample). Not the
    spread of the stratum means, which would treat four MMLU subjects as a sample of subjects.

    A stratum of 0/1 items at 0% or 100% (even a single item) keeps its sampling error through the
    Agresti-Coull proportion (x + z^2/2 successes of n + z^2): its plain p(1-p) of zero would make the
    interval a point. Its variance stays over the stratum's n items, not Agresti-Coull's n + z^2: that
    denominator belongs to an interval centred on the adjusted proportion, and around the observed
    mean it shrank a 2-item stratum's error by 1.7x (6 subjects x 2 items: 61% coverage at a nominal
    95%). Other scores use their sample variance (two items at least)."""
    if not strata or any(len(g) < (1 if _binary(g) else 2) for g in strata):
        return None
    if weights is None:
        return combined_stderr([_mean_stderr_fixed(g) for g in strata])
    return math.sqrt(sum((w * _mean_stderr_fixed(g)) ** 2 for g, w in zip(strata, weights, strict=True)))


def _binary(values: Sequence[float]) -> bool:
    return all(v in (0.0, 1.0) for v in values)


def combined_stderr(stderrs: Sequence[float | None]) -> float | None:
    """Standard error of the unweighted mean of k independent estimates: sqrt(sum se^2) / k."""
    if not stderrs or any(se is None for se in stderrs):
        return None
    return math.sqrt(sum(se * se for se in stderrs)) / len(stderrs)


# Agresti-Coull's pseudo-count, z^2 of a 95% interval: part of the estimator, so a recorded stderr never
# moves with the level an interval is later drawn at
_Z2 = NormalDist().inv_cdf(0.975) ** 2


def _mean_stderr_fixed(values: Sequence[float]) -> float:
    n = len(values)
    if _binary(values):
        p = (sum(values) + _Z2 / 2) / (n + _Z2)
        return math.sqrt(p * (1 - p) / n)
    return mean_stderr(values)[1] or 0.0
