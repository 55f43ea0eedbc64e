"""Intervals for timings: a latency pass's change between two variants from its repeats (the gate's
latency and throughput checks, the benches), a change in mean latency (paired t by request id, else
Welch's t from each mean's standard error and n) for `check`, and the normal interval from recorded
standard errors where no items are at hand. May import: core.

A median's change is a ratio, cand/base, bounded by the Hodges-Lehmann interval of the shift in log
time (Mann-Whitney, exact for up to 50 repeats in all): distribution-free and exact at 3 repeats a
side, where a bootstrap of a median of 3 has 10 distinct values; a cold first repeat moves it by one
rank, not by its size. Other statistics (mean, p90, p99) get a percentile bootstrap of the ratio.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from statistics import NormalDist
from typing import Any

import numpy as np

from evalsuite.core.types import REQUEST_TIMINGS, Metric


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


# ---------------------------------------------------------------- a latency pass's per-request series


def _decode(x: dict) -> float | None:
    """Decode tokens a second: every token after the first over the time from the first to the last."""
    e2e, ttft, n = x.get("e2e_ms"), x.get("ttft_ms"), x.get("output_tokens")
    if not e2e or ttft is None or n is None or e2e <= ttft:
        return None
    return (n - 1) / (e2e - ttft) * 1000


def _prefill(x: dict) -> float | None:
    ttft = x.get("ttft_ms")
    return x["prompt_tokens"] / ttft * 1000 if ttft and x.get("prompt_tokens") is not None else None


def _timing(key: str):
    return lambda x: x.get(key)


# a latency metric's key (latency/<key>_<stat>) -> its value from one request's record, and its unit
SERIES = {**{key: (_timing(key), "ms") for key in REQUEST_TIMINGS},
          "decode_tok_per_s": (_decode, "/s"), "prefill_tok_per_s": (_prefill, "/s")}
RATES = ("/s",)  # tokens per second: more is faster


def latency_key(name: str) -> tuple[str, str] | None:
    """`latency/itl_ms_p50/ctx1024` -> ("itl_ms", "p50"): the per-request series and the statistic over
    it; None for another name."""
    parts = name.split("/")
    if len(parts) < 2 or parts[0] != "latency":
        return None
    key, _, stat = parts[1].rpartition("_")
    return (key, stat) if key in SERIES and (stat == "mean" or stat[1:].isdigit() and stat[0] == "p") else None


def series(key: str, extras: Sequence[dict]) -> list[float]:
    """One figure per timed request (its score's `extra`), those that have it."""
    read = SERIES[key][0]
    out = [read(x) for x in extras]
    return [float(v) for v in out if v is not None and not math.isnan(v)]


# ---------------------------------------------------------------- a change between two variants' repeats


@dataclass
class RatioTest:
    """cand/base of a statistic of two sets of repeats, with one-sided bounds at `confidence` each
    (together a two-sided interval at 2 x confidence - 1) and the p-values of a ratio beyond a given one."""

    ratio: float  # the statistic's own ratio, candidate over baseline
    low: float
    high: float
    method: str
    n_base: int
    n_cand: int
    _p: Callable[[float, str], float] = field(repr=False, default=lambda r, side: float("nan"))

    def p_above(self, r: float) -> float:
        """p of 'the true ratio is at most r': small where the data show it above r."""
        return self._p(r, "above")

    def p_below(self, r: float) -> float:
        """p of 'the true ratio is at least r': small where the data show it below r."""
        return self._p(r, "below")


EXACT_UP_TO = 50  # repeats in all: the null counts stay within float64's exact integers (C(50, 25) < 2^53)
BOOTSTRAP = 9_999


@lru_cache(maxsize=256)
def mw_cdf(n: int, m: int) -> np.ndarray | None:
    """P(U <= u), u = 0..n*m, for Mann-Whitney's U of n against m values under no shift: the
    coefficients of the Gaussian binomial [n+m choose n]_q, built from [m choose 0]_q = 1 by
    [m+k choose k] = [m+k-1 choose k-1] (1 - q^(m+k)) / (1 - q^k). None beyond EXACT_UP_TO."""
    if n + m > EXACT_UP_TO:
        return None
    coef = np.zeros(n * m + 1)
    coef[0] = 1.0
    for k in range(1, n + 1):
        shift = m + k
        if shift < len(coef):
            coef[shift:] -= coef[:len(coef) - shift].copy()
        for i in range(k, len(coef)):  # divided by (1 - q^k): terms above n*m are zero, so truncation is exact
            coef[i] += coef[i - k]
    return np.cumsum(coef) / coef.sum()


def _u_cdf(n: int, m: int):
    """u -> P(U <= u), exact where mw_cdf is, else the normal approximation with continuity."""
    exact = mw_cdf(n, m)
    if exact is not None:
        return lambda u: 0.0 if u < 0 else 1.0 if u >= n * m else float(exact[int(math.floor(u))])
    mean, sd = n * m / 2, math.sqrt(n * m * (n + m + 1) / 12)
    return lambda u: NormalDist().cdf((math.floor(u) + 0.5 - mean) / sd)


def ratio_test(base: Sequence[float], cand: Sequence[float], confidence: float, stat: str = "p50") -> RatioTest | None:
    """cand/base of `stat` (p50, mean, p90, p99) with its bounds; None where the repeats cannot give
    them: a non-positive time, or for a median fewer than 3 a side at 95% (Mann-Whitney's smallest
    p is 1/C(n+m, n): 1/20 at 3 and 3)."""
    b, c = np.asarray([x for x in base if x > 0], float), np.asarray([x for x in cand if x > 0], float)
    if len(b) < len(base) or len(c) < len(cand) or not len(b) or not len(c):
        return None
    own = _stat(stat)
    ratio = float(own(c) / own(b))
    if stat == "p50":
        return _shift_test(np.log(b), np.log(c), confidence, ratio)
    return _bootstrap_test(b, c, own, confidence, ratio, stat)


def _stat(stat: str) -> Callable[..., Any]:
    if stat == "mean":
        return lambda x, axis=None: np.mean(x, axis=axis)
    q = float(stat.removeprefix("p"))
    return lambda x, axis=None: np.percentile(x, q, axis=axis)


def _shift_test(lb: np.ndarray, lc: np.ndarray, confidence: float, ratio: float) -> RatioTest | None:
    """Hodges-Lehmann / Moses: the k-th smallest and largest of the n*m differences log c - log b,
    k - 1 the largest u with P(U <= u) <= alpha."""
    n, m = len(lb), len(lc)
    cdf = _u_cdf(n, m)
    alpha = 1 - confidence
    crit = max((u for u in range(n * m + 1) if cdf(u) <= alpha + 1e-12), default=-1)
    if crit < 0:
        return None
    d = np.sort((lc[None, :] - lb[:, None]).ravel())
    low, high = float(np.exp(d[crit])), float(np.exp(d[n * m - 1 - crit]))

    def p(r: float, side: str) -> float:
        shifted = lc - math.log(r)
        u = float((shifted[None, :] > lb[:, None]).sum() + 0.5 * (shifted[None, :] == lb[:, None]).sum())
        # ties counted half: the conservative neighbour of a half-integer u
        return 1 - cdf(math.floor(u) - 1) if side == "above" else cdf(math.ceil(u))

    method = (f"Hodges-Lehmann interval of the shift in log time (Mann-Whitney, "
              f"{'exact' if n + m <= EXACT_UP_TO else 'normal approximation'}), {n} vs {m} repeats")
    return RatioTest(ratio, low, high, method, n, m, p)


def _bootstrap_test(b: np.ndarray, c: np.ndarray, own: Callable[..., Any], confidence: float, ratio: float,
                    stat: str) -> RatioTest:
    """Percentile bootstrap of the ratio, each side resampled alone (the repeats are not paired), seeded."""
    rng = np.random.default_rng(0)
    rb = own(b[rng.integers(0, len(b), (BOOTSTRAP, len(b)))], axis=1)
    rc = own(c[rng.integers(0, len(c), (BOOTSTRAP, len(c)))], axis=1)
    reps = np.sort(rc / rb)
    alpha = 1 - confidence
    low, high = float(np.quantile(reps, alpha)), float(np.quantile(reps, 1 - alpha))

    def p(r: float, side: str) -> float:
        beyond = (reps <= r).sum() if side == "above" else (reps >= r).sum()
        return float((beyond + 1) / (BOOTSTRAP + 1))

    method = f"percentile bootstrap of the {stat}'s ratio ({BOOTSTRAP:,} resamples), {len(b)} vs {len(c)} repeats"
    return RatioTest(ratio, low, high, method, len(b), len(c), p)
