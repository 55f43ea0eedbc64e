"""Exact unconditional test and bounds for a drop between paired 0/1 items (Sidik 2003).

Tango's score bound is asymptotic and too lenient at the n where a limit first resolves
(docs/statistics.md has the rates); this test keeps the size at every n. Its p for H0: drop >= delta
is the largest probability, over every pair of discordance rates on the null's boundary
(p10 - p01 = delta, p01 = q free), of a Tango statistic at most the one observed:

    p(delta) = sup_q  sum_m  Bin(m; n, 2q + delta) * P(B <= k_m | m)

with m = b + c changed answers, B | m ~ Bin(m, (q + delta) / (2q + delta)), and k_m the most losses
among m changed answers whose statistic is still at most the observed one (it rises with the losses
at a fixed m). Maximising over q, the nuisance, makes the size hold whatever the share of answers that
change; the conditional test on b given b + c (Clopper-Pearson) would bound the share of losses, not
the drop. Bounds invert the test, so a limit beyond the bound printed is exactly one the test rejects.
Sidik (2003), Stat Med 22:265-278; Berger & Sidik (2003).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy import optimize
from scipy.special import bdtr, gammaln, xlog1py, xlogy

_EDGE = 1e-9
_GRID = 24  # nuisance values tried before the best two are refined; tests/test_stats.py checks the sup on a fine grid
_TAIL_SD = 8.0  # changed-answer counts further than this many sd (+15) from their mean carry < 1e-15 of the mass
_GAMMA = 1e-6  # the nuisance interval's miss rate, added to every p (Berger & Boos 1994)


def tango_vec(b: np.ndarray, c: np.ndarray, n: int, delta: float) -> np.ndarray:
    """Tango's score statistic for H0: drop = delta, elementwise (evalsuite.stats.significance.tango_statistic
    for one pair): (b - c - n delta) / sqrt(n (2 q + delta (1 - delta))), q the constrained MLE of p01."""
    delta = min(max(delta, -1 + 1e-12), 1 - 1e-12)
    b, c = np.asarray(b, float), np.asarray(c, float)
    a_, b_ = 2.0 * n, -(b + c) + (2 * n - b + c) * delta
    c_ = -c * delta * (1 - delta)
    q = (-b_ + np.sqrt(np.maximum(b_ * b_ - 4 * a_ * c_, 0.0))) / (2 * a_)
    var = n * (2 * q + delta * (1 - delta))
    num = b - c - n * delta
    with np.errstate(divide="ignore", invalid="ignore"):
        t = num / np.sqrt(var)
    return np.where(var > 0, t, np.where(num == 0, 0.0, np.copysign(np.inf, num)))


def _cutoffs(t_obs: float, n: int, delta: float, m: np.ndarray) -> np.ndarray:
    """k_m for each count m: the most losses among m changed answers with a statistic <= t_obs (-1:
    none). A binary search over the losses for every m at once."""
    lo, hi = np.full(len(m), -1), m.copy()  # invariant: T(lo) <= t (or lo = -1), the answer in [lo, hi]
    top = tango_vec(hi, m - hi, n, delta) <= t_obs + 1e-12
    lo, hi = np.where(top, hi, lo), np.where(top, hi, hi - 1)
    while np.any(hi > lo):
        mid = (lo + hi + 1) // 2
        ok = tango_vec(mid, m - mid, n, delta) <= t_obs + 1e-12
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid - 1)
    return lo


def _tail(q: float, n: int, delta: float, m: np.ndarray, k: np.ndarray) -> float:
    """P_q(T <= t_obs) at p01 = q, p10 = q + delta: the sum over the counts that carry Bin(n, 2q +
    delta)'s mass, of those m (ascending, contiguous) whose cutoffs are k."""
    d = min(max(2 * q + delta, 0.0), 1.0)
    sd = math.sqrt(n * d * (1 - d))
    first = max(int(n * d - _TAIL_SD * sd - 15), int(m[0]))
    last = min(int(n * d + _TAIL_SD * sd + 15), int(m[-1]))
    if last < first:
        return 0.0
    mm, kk = m[first - m[0]:last - m[0] + 1], k[first - m[0]:last - m[0] + 1]
    pi = min(max((q + delta) / d, 0.0), 1.0) if d > 0 else 0.0
    log_pmf = gammaln(n + 1) - gammaln(mm + 1) - gammaln(n - mm + 1) + xlogy(mm, d) + xlog1py(n - mm, -d)
    inside = np.where(kk >= 0, bdtr(np.maximum(kk, 0), mm, pi), 0.0)
    return float(np.sum(np.exp(log_pmf) * inside))


def _counts(n: int, d_lo: float, d_hi: float) -> np.ndarray:
    """The changed-answer counts that carry the mass of Bin(n, d) for d in [d_lo, d_hi]."""
    sd = math.sqrt(n * max(d_lo * (1 - d_lo), d_hi * (1 - d_hi), 0.25 if d_lo <= 0.5 <= d_hi else 0.0))
    return np.arange(max(0, int(n * d_lo - _TAIL_SD * sd - 15)), min(n, int(n * d_hi + _TAIL_SD * sd + 15)) + 1)


def _nuisance(c: int, n: int, delta: float) -> tuple[float, float]:
    """The values of p01 to maximise over: those on the null's boundary within a 1 - GAMMA
    Clopper-Pearson interval of p01 from the c gains (Berger & Boos 1994)."""
    from scipy.stats import beta

    lo = float(beta.ppf(_GAMMA / 2, c, n - c + 1)) if c > 0 else 0.0
    hi = float(beta.ppf(1 - _GAMMA / 2, c + 1, n - c)) if c < n else 1.0
    return max(lo, 0.0, -delta), min(hi, (1 - delta) / 2)


@lru_cache(maxsize=65536)
def p_at_least(b: int, c: int, n: int, delta: float) -> float:
    """Exact p for H0: drop >= delta against drop < delta (small: the data show the drop is below
    delta), b items lost and c gained of n paired items. The sup over the nuisance runs over its
    1 - GAMMA interval, GAMMA added to the p (Berger & Boos 1994): valid at every n, and at large n a
    few hundred counts to sum instead of n."""
    if n <= 0 or delta <= -1:
        return 1.0
    if delta > 1:
        return 0.0
    q_lo, q_hi = _nuisance(c, n, delta)
    if q_hi < q_lo:  # no null value is consistent with the gains seen
        return _GAMMA
    t_obs = float(tango_vec(np.array([b]), np.array([c]), n, delta)[0])
    m = _counts(n, 2 * q_lo + delta, min(2 * q_hi + delta, 1.0))
    k = _cutoffs(t_obs, n, delta, m)
    tail = lambda q: _tail(q, n, delta, m, k)  # noqa: E731
    grid = np.linspace(q_lo, q_hi, _GRID) if q_hi > q_lo else np.array([q_lo])
    vals = np.array([tail(q) for q in grid])
    best = float(vals.max())
    for i in np.argsort(vals)[-2:] if len(grid) > 2 else []:  # refine around the two best grid points
        res = optimize.minimize_scalar(lambda q: -tail(q), bounds=(grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]),
                                       method="bounded", options={"xatol": (q_hi - q_lo) * 1e-5})
        best = max(best, -float(res.fun))
    return min(best + _GAMMA, 1.0)


def p_at_most(b: int, c: int, n: int, delta: float) -> float:
    """Exact p for H0: drop <= delta (small: the data show the drop exceeds delta): the mirror of
    p_at_least with losses and gains swapped."""
    return p_at_least(c, b, n, -delta)


@lru_cache(maxsize=16384)
def upper_bound(b: int, c: int, n: int, confidence: float) -> float:
    """The largest drop the test does not reject at 1 - confidence (the sup of the confidence set):
    every limit above it is shown within. p(delta) jumps where a count's statistic crosses the observed
    one, so past the first crossing a few points per 1/n are tried for a later rise above alpha."""
    alpha = 1 - confidence
    est = (b - c) / n
    f = lambda d: p_at_least(b, c, n, d) - alpha  # noqa: E731
    if est >= 1 - _EDGE or f(1.0) >= 0:
        return 1.0
    lo = est
    while True:
        root = _crossing(f, lo, _asymptotic_upper(b, c, n, confidence), n)
        later = next((d for d in root + np.arange(1, 5) / (2 * n) if d < 1 and f(d) >= 0), None)
        if later is None:
            return root
        lo = float(later)


def _crossing(f, lo: float, guess: float, n: int) -> float:
    """A root of f (>= 0 at lo, < 0 at 1) near `guess`: bracketed by steps out of it, then Brent's."""
    step = max(abs(guess - lo) * 0.05, 0.25 / n)
    a = min(max(guess, lo), 1.0)
    if f(a) >= 0:
        b = min(a + step, 1.0)
        while b < 1.0 and f(b) >= 0:
            a, step = b, step * 2
            b = min(a + step, 1.0)
    else:
        b = a
        a = max(b - step, lo)
        while a > lo and f(a) < 0:
            b, step = a, step * 2
            a = max(b - step, lo)
        if f(a) < 0:
            return a
    return float(optimize.brentq(f, a, b, xtol=1e-8))


def _asymptotic_upper(b: int, c: int, n: int, confidence: float) -> float:
    """Tango's score bound (the normal approximation), where the exact one is sought first."""
    from scipy.stats import norm

    z = float(norm.ppf(confidence))
    est = (b - c) / n
    g = lambda d: float(tango_vec(np.array([b]), np.array([c]), n, d)[0]) + z  # noqa: E731
    hi = 1 - 1e-12
    if est >= hi or g(hi) > 0:
        return 1.0
    return float(optimize.brentq(g, est, hi, xtol=1e-10)) if g(est) > 0 else est


def lower_bound(b: int, c: int, n: int, confidence: float) -> float:
    """The largest drop the data show exceeded: the mirror of upper_bound."""
    return -upper_bound(c, b, n, confidence)


@lru_cache(maxsize=4096)
def floor(n: int, confidence: float) -> float:
    """The upper bound with no answer changed: no limit below it is ever shown within at this n."""
    return upper_bound(0, 0, max(int(n), 1), confidence)


@lru_cache(maxsize=1024)
def floor_items(limit: float, confidence: float) -> int:
    """The fewest paired items whose floor is within `limit`: below them no candidate passes."""
    if limit <= 0:
        return math.inf  # type: ignore[return-value]
    alpha = 1 - confidence
    hi = max(2, math.ceil(math.log(alpha) / math.log1p(-min(limit, 1 - 1e-12))))
    while floor(hi, confidence) > limit:
        hi *= 2
    lo = 1
    while lo < hi:
        mid = (lo + hi) // 2
        if floor(mid, confidence) <= limit:
            hi = mid
        else:
            lo = mid + 1
    return lo
