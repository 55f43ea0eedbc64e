"""Intervals for timings and recorded means: a change in mean latency between two variants (paired t
by request id, else Welch's t from each mean's standard error and n), and the normal interval from
recorded standard errors where no items are at hand. May import: core.

The repeats of a latency pass are few (3 by default), where a bootstrap of a median has a handful
of values; a workload's requests differ by their place in the batch far more than between settings,
hence pairing by request id where both variants timed the same requests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from evalsuite.core.types import Metric


@dataclass
class Interval:
    low: float
    high: float
    method: str
    n: int | None = None
    p_value: float | None = None  # exact McNemar, two-sided, paired 0/1 scores weighed alike only


def normal_interval(value: float, metrics: list[Metric], confidence: float) -> Interval | None:
    """value +- z x (the metrics' standard errors combined); None when any is missing."""
    ses = [m.stderr for m in metrics]
    if any(se is None or math.isnan(se) for se in ses):
        return None
    half = NormalDist().inv_cdf(0.5 + confidence / 2) * math.sqrt(sum(se * se for se in ses))
    n = min((m.n for m in metrics if m.n is not None), default=None)
    how = "normal from the recorded standard errors" + (" (unpaired)" if len(metrics) > 1 else "")
    return Interval(value - half, value + half, how, n)


def welch_interval(kind: str, base: Metric, cand: Metric, confidence: float) -> Interval | None:
    """Interval of cand's mean against base's, in the kind's unit (a ratio, a % change or a
    difference), by Welch's t with Satterthwaite's degrees of freedom; the baseline mean is the
    denominator, taken as known (its own error is in the t interval of the difference). None
    without a standard error and n >= 2 on both sides."""
    # Written out: only the two recorded means and standard errors are at hand, and scipy's
    # ttest_ind_from_stats gives a p-value from them but no interval.
    from scipy.stats import t as student_t

    sides = (base, cand)
    if kind not in SCALED or base.value == 0 or any(
            m.stderr is None or math.isnan(m.stderr) or (m.n or 0) < 2 for m in sides):
        return None
    var = base.stderr ** 2 + cand.stderr ** 2
    tails = sum(m.stderr ** 4 / (m.n - 1) for m in sides)
    df = var * var / tails if tails > 0 else math.inf
    half = float(student_t.ppf(0.5 + confidence / 2, df)) * math.sqrt(var) if var > 0 else 0.0
    d = cand.value - base.value
    how = f"Welch t on the per-request means ({_shown(kind, d, base.value)}; n={base.n} vs {cand.n}, df={df:.3g})"
    return Interval(_scaled(kind, d - half, base.value), _scaled(kind, d + half, base.value), how, min(base.n, cand.n))


SCALED = ("difference", "ratio", "change_pct")  # the kinds a difference of means is stated in


def _scaled(kind: str, d: float, base_mean: float) -> float:
    """A difference of means as the kind states the effect, the baseline mean as the denominator."""
    return {"difference": d, "ratio": 1 + d / base_mean, "change_pct": d / abs(base_mean) * 100}[kind]


def _shown(kind: str, d: float, base_mean: float) -> str:
    """The means' own change, shown beside a median's (the interval is the means')."""
    v = _scaled(kind, d, base_mean)
    return {"ratio": f"{v:.3g}x", "change_pct": f"{v:+.2f}%"}.get(kind, f"{v:+.4g}")


def paired_timing_interval(kind: str, base: dict[str, float], cand: dict[str, float],
                           confidence: float) -> Interval | None:
    """Paired t interval of the change in mean timing over the requests both variants timed (the same
    ids, all of them); None when the request sets differ or fewer than 2 are shared."""
    from scipy.stats import ttest_rel

    if kind not in SCALED or set(base) != set(cand) or len(base) < 2:
        return None
    ids = sorted(base)
    b, c = np.array([base[i] for i in ids]), np.array([cand[i] for i in ids])
    if b.mean() == 0:
        return None
    d = c - b
    if np.allclose(d, d[0]):
        low = high = float(d[0])  # no spread: t is undefined, the difference is exact
    else:
        ci = ttest_rel(c, b).confidence_interval(confidence)
        low, high = float(ci.low), float(ci.high)
    m = float(b.mean())
    how = f"paired t on the per-request means ({_shown(kind, float(d.mean()), m)}), {len(ids)} requests matched by id"
    return Interval(_scaled(kind, low, m), _scaled(kind, high, m), how, len(ids))
