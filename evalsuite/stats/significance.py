"""Tests and intervals for comparing two variants on the same items, and for single accuracies.

Everything here is pure (arrays in, numbers out); evalsuite.stats.paired reads the items from run
folders. Drops are baseline - candidate in score units (0.02 = 2 points), positive = worse.

Methods (docs/statistics.md has the table, and why each):
  single accuracy      Wilson score interval; a weighted 0/1 score: the normal interval over fixed strata
  binary, unweighted   exact McNemar for "worse"; the exact unconditional test for the drop (stats.exact)
  weighted or partial  Tango's bounds per stratum combined by MOVER (Zou & Donner 2008), shares lost
                       and gained counted as changed answers; p-values by inverting them
  anything else        paired bootstrap of items (percentile), resampled within strata
  many findings        Holm or Benjamini-Hochberg, for claims that something got worse; never for a
                       pass that needs every check to hold (verdict/gate.py)
  unpaired fallback    Newcombe's hybrid score interval for two independent proportions
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
from scipy import optimize
from scipy.stats import binomtest, norm

from evalsuite.stats import CONFIDENCE, exact
from evalsuite.stats.strata import strata_stderr

BOOTSTRAP_SEED = 0  # fixed, so a report is reproducible from its run folders
BOOTSTRAP_RESAMPLES = 9999  # p-values resolve to 1e-4, below Holm's threshold for 100+ checks
_EDGE = 1e-12


def wilson(successes: float, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Two-sided Wilson score interval for a proportion; (nan, nan) without items."""
    from statsmodels.stats.proportion import proportion_confint

    if not n:
        return math.nan, math.nan
    low, high = proportion_confint(successes, n, alpha=1 - confidence, method="wilson")
    return float(low), float(high)


def two_sided(confidence: float) -> float:
    """The one-sided level whose two bounds make a two-sided interval at `confidence`."""
    return 1 - (1 - confidence) / 2


ADJUSTMENTS = {"holm": "holm", "bh": "fdr_bh"}  # our names -> statsmodels' methods


def adjust(pvalues: Sequence[float], method: str) -> list[float]:
    """Adjusted p-values in the input's order (`holm`: family-wise error; `bh`: false discovery rate;
    `none`: as given); nan stays nan."""
    from statsmodels.stats.multitest import multipletests

    if method == "none":
        return list(pvalues)
    idx = [i for i, p in enumerate(pvalues) if p is not None and not math.isnan(p)]
    out = [math.nan] * len(pvalues)
    if idx:
        adjusted = multipletests([pvalues[i] for i in idx], method=ADJUSTMENTS[method])[1]
        for i, p in zip(idx, adjusted, strict=True):
            out[i] = float(p)
    return out


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values (family-wise error), in the input's order; nan stays nan."""
    return adjust(pvalues, "holm")


# ---------------------------------------------------------------- binary pairs: McNemar + Tango


def mcnemar_worse_p(b: int, c: int) -> float:
    """Exact McNemar, one-sided: P(at least b of the b+c discordant items favour the baseline).

    b = items the baseline got right and the candidate wrong, c = the reverse. Under no change
    each discordant item is a fair coin (the conditional binomial test McNemar's exact test is).
    """
    if b + c == 0:
        return 1.0
    return float(binomtest(b, b + c, 0.5, alternative="greater").pvalue)


def mcnemar_two_sided(b: int, c: int) -> float:
    """Exact McNemar, two-sided (statsmodels): a change in either direction."""
    from statsmodels.stats.contingency_tables import mcnemar

    return float(mcnemar([[0, b], [c, 0]], exact=True).pvalue)


def tango_statistic(b: int, c: int, n: int, delta: float) -> float:
    """Tango's score statistic for H0: drop = delta, with the drop's variance at delta's constrained MLE.

    Not in statsmodels 0.15 (its paired-difference interval is still unreleased), so written out:
    q is the MLE of P(baseline wrong, candidate right) given P(right, wrong) = q + delta.
    """
    delta = min(max(delta, -1 + _EDGE), 1 - _EDGE)
    a_, b_ = 2 * n, -(b + c) + (2 * n - b + c) * delta
    c_ = -c * delta * (1 - delta)
    q = (-b_ + math.sqrt(max(b_ * b_ - 4 * a_ * c_, 0.0))) / (2 * a_)
    var = n * (2 * q + delta * (1 - delta))
    num = b - c - n * delta
    if var <= 0:
        return 0.0 if num == 0 else math.copysign(math.inf, num)
    return num / math.sqrt(var)


def tango_bounds(b: float, c: float, n: float, confidence: float) -> tuple[float, float]:
    """One-sided lower and upper score bounds for the drop, each at `confidence` (the normal
    approximation; evalsuite.stats.exact has the exact ones). Tango's statistic falls as the drop
    it is asked about rises and is 0 at the estimate, so each bound is the one root on its side;
    where every item changed the same way the estimate is an end of [-1, 1] and so is that bound."""
    z = float(norm.ppf(confidence))
    est = min(max((b - c) / n, -1.0), 1.0)

    def root(target: float, lo: float, hi: float) -> float:
        f = lambda d: (0.0 if d == est else tango_statistic(b, c, n, d)) - target  # noqa: E731
        at_edge = lo if target > 0 else hi
        if lo >= hi or f(at_edge) * f(est) > 0:  # the statistic never reaches the target: the edge
            return at_edge if lo < hi else est
        return float(optimize.brentq(f, lo, hi, xtol=1e-10))

    low = -1.0 if est <= -1 + _EDGE else root(z, -1 + _EDGE, est)
    high = 1.0 if est >= 1 - _EDGE else root(-z, est, 1 - _EDGE)
    return max(-1.0, min(low, est)), min(1.0, max(high, est))


# ---------------------------------------------------------------- the common result


@dataclass
class PairedTest:
    """A drop between paired items, with one-sided bounds at `confidence` and p-values."""

    n: int  # paired items
    n_eff: float  # 1 / sum(w_i^2): items a plain mean would need for the same precision
    max_weight: float  # the most any one item moves the score (1/n unweighted)
    drop: float
    low: float
    high: float
    se: float  # standard error of the drop at the observed drop
    se0: float  # ... had nothing dropped at the observed churn: what resolution statements use
    p_worse: float  # H0: no drop (one-sided)
    method: str
    counts: tuple[int, int] | None = None  # (b, c) for binary pairs
    _p_limit: Callable[[float, bool], float] = field(default=lambda limit, within: math.nan, repr=False)
    floor: float | None = None  # the upper bound had nothing changed, where not Tango's z^2/(n_eff+z^2)

    def best_bound(self, confidence: float) -> float:
        """The smallest upper bound this n can show: a limit below it is never certified."""
        return self.floor if self.floor is not None else best_case_bound(self.n_eff, confidence)

    def p_within(self, limit: float) -> float:
        """p for H0: drop >= limit; small means the data show the drop is below the limit."""
        return self._p_limit(limit, True)

    def p_exceeds(self, limit: float) -> float:
        """p for H0: drop <= limit; small means the data show the drop is above the limit."""
        return self._p_limit(limit, False)


def binary_test(base: np.ndarray, cand: np.ndarray, confidence: float) -> PairedTest:
    """0/1 items weighed alike: the exact unconditional test and its bounds (evalsuite.stats.exact),
    whose size holds at every n where Tango's asymptotic bound passed 7% of drops at the limit near
    the smallest n a limit resolves; exact McNemar against a limit of 0."""
    n = len(base)
    b = int(np.sum((base == 1) & (cand == 0)))
    c = int(np.sum((base == 0) & (cand == 1)))
    drop = (b - c) / n
    low, high = exact.lower_bound(b, c, n, confidence), exact.upper_bound(b, c, n, confidence)

    def p_limit(limit: float, within: bool) -> float:
        if limit == 0:  # no margin: the exact conditional test applies (McNemar, either direction)
            return mcnemar_worse_p(c, b) if within else mcnemar_worse_p(b, c)
        return exact_p(b, c, n, limit, within, (low, high))

    se = math.sqrt(max((b + c) / n - drop * drop, 0.0) / n)
    return PairedTest(n, float(n), 1 / n, drop, low, high, se, math.sqrt((b + c) / n / n), mcnemar_worse_p(b, c),
                      "exact unconditional test on Tango's statistic; exact McNemar", (b, c), p_limit,
                      floor=exact.floor(n, confidence))


def exact_p(b: int, c: int, n: int, limit: float, within: bool, bounds: tuple[float, float]) -> float:
    """The exact p against `limit`, held to the bounds printed: p(drop) can rise again past the bound's
    first crossing (a count's statistic crossing the observed one), and a limit on the bound's side
    takes the p at the bound, so a check passes exactly where its limit lies beyond the bound."""
    low, high = bounds
    if within:
        p = exact.p_at_least(b, c, n, limit)
        return p if limit > high else max(p, exact.p_at_least(b, c, n, max(high - 1e-7, (b - c) / n)))
    p = exact.p_at_most(b, c, n, limit)
    return p if limit < low else max(p, exact.p_at_most(b, c, n, min(low + 1e-7, (b - c) / n)))


def tango_mover_test(base: np.ndarray, cand: np.ndarray, keys: Sequence[tuple], confidence: float) -> PairedTest:
    """Scores in [0, 1] that weigh unequally (macro, balanced accuracy) or take fractional values
    (RULER's share of needles found): Tango's bounds per stratum, combined for the weighted drop by
    MOVER (Zou & Donner 2008; Newcombe's method 10 is its two-proportion case):
    low = d - sqrt(sum W^2 (d_s - l_s)^2), high = d + sqrt(sum W^2 (u_s - d_s)^2); p-values invert it.

    An item's drop b - c splits into the share lost and the share gained, taken as Tango's discordant
    counts scaled to the shares' own variance (_changed_answers). A percentile bootstrap of rare
    changed answers passed drops at the limit in 7-10% of simulated runs at a nominal 5% (n=132 to
    600); these bounds 2.7-5.5%, within the simulation's error of 5% but not exact as the plain test
    is (bench/gate_size_strata.py; tests/test_stats.py)."""
    w = stratum_weights(keys)
    groups = [np.arange(len(keys))] if np.allclose(w, w[0]) else strata_indices(keys)  # a plain mean: one stratum
    diff = base - cand
    cells = [_changed_answers(diff[idx], float(w[idx].sum())) for idx in groups]
    drop = sum(cw * (b - c) / n for b, c, n, cw in cells)

    def bounds_at(level: float) -> tuple[float, float]:
        return mover(drop, [(cw, (b - c) / n, *_tango_cached(b, c, n, level)) for b, c, n, cw in cells])

    def p_limit(limit: float, within: bool) -> float:
        p_above = inverted_p(bounds_at, drop, limit)
        return p_above if within else 1 - p_above

    floor = mover_floor([(float(w[idx].sum()), len(idx)) for idx in groups], confidence)
    se = math.sqrt(sum(cw * cw * max((b + c) / n - ((b - c) / n) ** 2, 0.0) / n for b, c, n, cw in cells))
    se0 = math.sqrt(sum(cw * cw * (b + c) / n / n for b, c, n, cw in cells))
    low, high = bounds_at(confidence)
    changed = any(b + c for b, c, _, _ in cells)
    p_worse = p_limit(0.0, False) if changed else 1.0  # as McNemar's: no changed answer, no sign of worse
    fractional = "" if np.all(np.isin(base, (0.0, 1.0))) and np.all(np.isin(cand, (0.0, 1.0))) else \
        " (shares lost and gained as changed answers)"
    how = (f"Tango score bounds within {len(cells)} strata, combined by MOVER" if len(cells) > 1
           else "Tango score bounds") + fractional
    return PairedTest(len(base), float(1 / np.sum(w * w)), float(w.max()), drop, low, high, se, se0, p_worse,
                      how, None, p_limit, floor=floor)


def mover_floor(strata: Sequence[tuple[float, int]], confidence: float) -> float:
    """The MOVER upper bound had no answer changed in any stratum, from each stratum's (weight, items):
    sqrt(sum (W z^2 / (n + z^2))^2). Near the boundary MOVER is conservative: k equal strata of m items
    give sqrt(k) times the plain mean's floor, which is why a stratified check needs more items."""
    z2 = float(norm.ppf(confidence)) ** 2
    return math.sqrt(sum((weight * z2 / (n + z2)) ** 2 for weight, n in strata))


def _changed_answers(diff: np.ndarray, weight: float) -> tuple[float, float, float, float]:
    """(lost, gained, n, weight) as Tango's counts. Shares lost or gained (a RULER item that found half
    its needles) count as changed answers of one size k, in n / k items, so the drop stays the same:
    k = sum |d|^3 / sum d^2, the size whose events have the shares' ratio of third to second moment.
    Rare large losses among small ones skew the drop's distribution as fewer, larger events would;
    the mean size (sum d^2 / sum |d|) matched only the variance and passed 5.8% of drops at the limit
    at a nominal 5%. Equal shares: k is their size; 0/1 scores: k = 1, the counts themselves."""
    lost, gained = float(np.clip(diff, 0, None).sum()), float(np.clip(-diff, 0, None).sum())
    square = float(np.sum(diff * diff))
    k = float(np.sum(np.abs(diff) ** 3)) / square if square else 1.0
    return lost / k, gained / k, len(diff) / k, weight


def mover(estimate: float, parts: Sequence[tuple[float, float, float, float]]) -> tuple[float, float]:
    """Bounds of a weighted sum from its parts' (weight, estimate, lower, upper) bounds (MOVER, Zou &
    Donner 2008): estimate -/+ sqrt(sum w^2 (distance of the part's bound from its estimate)^2)."""
    below = sum((w * (e - lo)) ** 2 for w, e, lo, _ in parts)
    above = sum((w * (hi - e)) ** 2 for w, e, _, hi in parts)
    return estimate - math.sqrt(below), estimate + math.sqrt(above)


def strata_indices(keys: Sequence[tuple]) -> list[np.ndarray]:
    """The item indices of each stratum (each distinct key), in first-seen order."""
    by_key: dict[tuple, list[int]] = defaultdict(list)
    for i, k in enumerate(keys):
        by_key[k].append(i)
    return [np.array(idx) for idx in by_key.values()]


@lru_cache(maxsize=65536)
def _tango_cached(b: float, c: float, n: float, level: float) -> tuple[float, float]:
    return tango_bounds(b, c, n, level)


def stratum_weights(keys: Sequence[tuple]) -> np.ndarray:
    """Each item's weight in a nested mean: mean over the first key of mean over the next ... of items.

    That is how macro accuracy (mean over subjects) and balanced accuracy (mean over tasks of
    mean recall per label) weigh items; with empty keys every item weighs 1/n.
    """
    if not keys:
        return np.zeros(0)
    depth = len(keys[0])
    size = Counter(keys)
    children: dict[tuple, set] = defaultdict(set)
    for k in keys:
        for level in range(depth):
            children[k[:level]].add(k[level])
    w = [1 / size[k] / math.prod(len(children[k[:level]]) for level in range(depth)) for k in keys]
    return np.array(w)


def smallest_cell(keys: Sequence[tuple]) -> int:
    """Items in the smallest stratum (all items when unstratified)."""
    return min(Counter(keys).values()) if keys else 0


def _resample_means(diffs: np.ndarray, cells: list[np.ndarray], cell_w: np.ndarray, resamples: int) -> np.ndarray:
    """Bootstrap replicates of sum_s w_s * mean(resample of cell s), cells resampled independently.

    Drawn as multinomial counts over each cell's distinct values: the same distribution as
    resampling items (scipy.stats.bootstrap does that, at O(resamples x n) cost: 6 s for
    MMLU's 14,042 items), at O(resamples x distinct values), since paired differences of
    scores take few values. tests/test_stats.py checks the two agree. Swapping baseline and
    candidate negates every replicate exactly.
    """
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    dist = np.zeros(resamples)
    for idx, cw in zip(cells, cell_w, strict=True):
        values, first, counts = np.unique(diffs[idx], return_index=True, return_counts=True)
        order = np.argsort(first)  # categories in item order, so negated scores draw the same counts
        values, counts = values[order], counts[order]
        rows = max(1, int(4e6 // len(values)))  # bounds memory at ~32 MB per chunk
        for start in range(0, resamples, rows):
            stop = min(start + rows, resamples)
            draws = rng.multinomial(len(idx), counts / len(idx), size=stop - start)
            dist[start:stop] += cw * (draws @ values) / len(idx)
    return dist


def bootstrap_test(diffs: np.ndarray, keys: Sequence[tuple], confidence: float,
                   resamples: int = BOOTSTRAP_RESAMPLES) -> PairedTest:
    """Paired bootstrap of the weighted mean difference, items resampled within their stratum."""
    w = stratum_weights(keys)
    cells = strata_indices(keys)
    dist = _resample_means(diffs, cells, np.array([w[idx].sum() for idx in cells]), resamples)
    low, high = _bootstrap_bounds(dist, 1 - confidence)
    tol = 1e-12  # replicates are sums of floats: one equal to the limit must count as equal

    def p_limit(limit: float, within: bool) -> float:
        beyond = np.sum(dist >= limit - tol) if within else np.sum(dist <= limit + tol)
        return float((beyond + 1) / (len(dist) + 1))

    how = "paired bootstrap" + (f" within {len(cells)} strata" if len(cells) > 1 else "")
    se = float(np.std(dist))
    return PairedTest(len(diffs), float(1 / np.sum(w * w)), float(w.max()), float(np.dot(w, diffs)), low, high,
                      se, se, p_limit(0.0, False), f"{how} (percentile, {resamples} resamples)",
                      None, p_limit)


def _bootstrap_bounds(dist: np.ndarray, alpha: float) -> tuple[float, float]:
    """The replicates at which p_limit's (count + 1) / (R + 1) crosses alpha: a limit beyond a bound
    is exactly one whose p is below alpha, so the bound printed and the decision never disagree
    (an interpolated quantile can sit a hair on the other side)."""
    allowed = math.ceil(round(alpha * (len(dist) + 1), 9)) - 2  # replicates at or beyond a limit that passes
    if allowed < 0:
        return -math.inf, math.inf
    ordered = np.sort(dist)
    return float(ordered[allowed]), float(ordered[-1 - allowed])


def score_interval(values: Sequence[float], keys: Sequence[tuple], confidence: float) -> tuple[float, float, str]:
    """Two-sided interval of one variant's score: Wilson for unweighted 0/1 items, the normal interval
    over fixed strata for weighted ones (the run table's for a macro or balanced accuracy), else a
    bootstrap of the weighted mean within strata."""
    x = np.asarray(values, float)
    keys = list(keys) if keys else [()] * len(x)
    w = stratum_weights(keys)
    if np.all(np.isin(x, (0.0, 1.0))) and np.allclose(w, w[0]):
        low, high = wilson(float(x.sum()), len(x), confidence)
        return low, high, f"Wilson over {len(x):,} items"
    if np.all(np.isin(x, (0.0, 1.0))):
        return _stratified_normal(x, keys, confidence)
    t = bootstrap_test(x, keys, two_sided(confidence))
    return t.low, t.high, f"bootstrap over {len(x):,} items ({t.method.split(' (')[1].rstrip(')')})"


def _stratified_normal(x: np.ndarray, keys: list[tuple], confidence: float) -> tuple[float, float, str]:
    """The interval a macro or balanced accuracy's stderr gives (strata_stderr: each stratum's
    Agresti-Coull proportion, variance over its n, the strata fixed), so the run table and `check`
    agree. Wilson per stratum combined by MOVER, the obvious alternative, held 79-87% at a nominal 95%
    over many strata of a few items each (exact and simulated); this holds 90-99% there, 95% at
    full-run sizes."""
    value, se = stratified_mean(x, keys)
    z = float(norm.ppf(0.5 + confidence / 2))
    return (max(0.0, value - z * se), min(1.0, value + z * se),
            f"normal over {len(strata_indices(keys))} fixed strata (Agresti-Coull variance), over {len(x):,} items")


def stratified_mean(values: Sequence[float], keys: Sequence[tuple]) -> tuple[float, float | None]:
    """A mean of items weighed as nested means over `keys` (stratum_weights), and its standard error
    with the strata fixed (strata_stderr): a macro or balanced accuracy's value and stderr."""
    x = np.asarray(values, float)
    w, groups = stratum_weights(keys), strata_indices(keys)
    return float(w @ x), strata_stderr([x[idx].tolist() for idx in groups], [float(w[idx].sum()) for idx in groups])


def paired_test(base: Sequence[float], cand: Sequence[float], keys: Sequence[tuple] | None,
                confidence: float, resamples: int = BOOTSTRAP_RESAMPLES) -> PairedTest:
    """McNemar/Tango for 0/1 scores that weigh alike, Tango by MOVER for other scores in [0, 1], the
    bootstrap for everything else."""
    base_a, cand_a = np.asarray(base, float), np.asarray(cand, float)
    keys = list(keys) if keys else [()] * len(base_a)
    w = stratum_weights(keys)
    binary = bool(np.all(np.isin(base_a, (0.0, 1.0))) and np.all(np.isin(cand_a, (0.0, 1.0))))
    if binary and np.allclose(w, w[0]):
        return binary_test(base_a, cand_a, confidence)
    if np.all((base_a >= 0) & (base_a <= 1) & (cand_a >= 0) & (cand_a <= 1)):
        return tango_mover_test(base_a, cand_a, keys, confidence)
    return bootstrap_test(base_a - cand_a, keys, confidence, resamples)


def unpaired_test(base: tuple[int, int], cand: tuple[int, int], confidence: float) -> PairedTest:
    """Two independent proportions (successes, n): when the runs share no sample ids.

    Newcombe's hybrid score interval (statsmodels `newcomb`; Newcombe 1998, method 10): it keeps its
    coverage at 0% and 100%, where the score interval's root search fails. Its p-values invert the
    same interval (the level at which a bound meets the limit), so the bound printed and the decision
    taken never disagree. `floor` is the bound had both runs scored alike: a limit below it is one
    these n cannot resolve, whatever the candidate does."""
    (x1, n1), (x2, n2) = base, cand
    drop = x1 / n1 - x2 / n2
    low, high = _newcombe(x1, n1, x2, n2, confidence)
    pooled = (x1 + x2) / (n1 + n2)
    floor = _newcombe(pooled * n1, n1, pooled * n2, n2, confidence)[1]

    def p_limit(limit: float, within: bool) -> float:
        p_above = inverted_p(lambda level: _newcombe(x1, n1, x2, n2, level), drop, limit)  # H0: drop >= limit
        return p_above if within else 1 - p_above

    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    n_eff = 2 / (1 / n1 + 1 / n2)  # the paired n whose drop has this variance when answers are uncorrelated
    return PairedTest(min(n1, n2), n_eff, max(1 / n1, 1 / n2), drop, low, high, se, se, p_limit(0.0, False),
                      "unpaired: Newcombe's score interval for two proportions (no shared sample ids)",
                      None, p_limit, floor=floor)


def _newcombe(x1: float, n1: int, x2: float, n2: int, confidence: float) -> tuple[float, float]:
    """One-sided bounds at `confidence` of p1 - p2."""
    from statsmodels.stats.proportion import confint_proportions_2indep

    low, high = confint_proportions_2indep(x1, n1, x2, n2, method="newcomb", compare="diff",
                                           alpha=2 * (1 - confidence))
    return float(low), float(high)


def inverted_p(bounds_at: Callable[[float], tuple[float, float]], estimate: float, limit: float) -> float:
    """p for H0: drop >= limit from a family of one-sided bounds (lower, upper at each level): the
    level at which the upper bound meets a limit above the estimate gives p = 1 - level, the level
    at which the lower bound meets a limit below it p = level. The bound printed at `confidence` and
    the decision p < 1 - confidence then agree at every limit."""
    if math.isclose(limit, estimate, abs_tol=1e-15):
        return 0.5
    side = 1 if limit > estimate else 0

    def gap(level: float) -> float:
        return bounds_at(level)[side] - limit

    hi = 1 - _EDGE
    if (gap(hi) < 0) == bool(side):  # beyond the bound even at the most extreme level
        return _EDGE if side else 1 - _EDGE
    level = optimize.brentq(gap, 0.5 + _EDGE, hi, xtol=1e-12)
    return 1 - level if side else level


# ---------------------------------------------------------------- resolution (power)


def best_case_bound(n_eff: float, confidence: float) -> float:
    """The upper bound on the drop when no item changed, by the exact test: 1 - alpha^(1/n) (the
    chance that none of n items is lost at a drop of that size is alpha). A limit below it can never
    be certified at this n, whatever the candidate does."""
    return exact.floor(max(int(n_eff), 1), confidence)


def resolvable_drop(n_eff: float, se: float, confidence: float, power: float, floor: float | None = None) -> float:
    """Smallest limit that a candidate with no true drop passes with probability `power`.

    Normal approximation of the paired test (Connor 1987): (z_conf + z_power) * se, floored by
    the best case (`floor`, else Tango's at n_eff), where se is the drop's standard error when
    nothing drops.
    """
    z = float(norm.ppf(confidence)) + float(norm.ppf(power))
    return max(best_case_bound(n_eff, confidence) if floor is None else floor, z * se)


def keyed_resolution(keys: Sequence[tuple], confidence: float, power: float, discordance: float,
                     stratified: bool = False) -> float:
    """resolvable_drop for items weighed by `keys` (their strata, as stratum_weights weighs them): the
    paired test of identical answers gives the effective n and the floor (a plain mean's is exact).
    `stratified`: the strata's MOVER floor even where their weights come out equal, as they rarely do
    for labels (a balanced accuracy), where the test takes the plain mean's."""
    sizes = tuple(sorted(Counter(keys).values()))  # the strata's sizes are all the weights depend on
    return _resolution(sizes, confidence, power, discordance, stratified)


@lru_cache(maxsize=512)
def _resolution(sizes: tuple[int, ...], confidence: float, power: float, discordance: float, stratified: bool) -> float:
    keys = [(i,) for i, size in enumerate(sizes) for _ in range(size)]
    values = np.ones(len(keys))
    test = paired_test(values, values, keys, confidence)
    floor = test.best_bound(confidence)
    if stratified:
        w, cells = stratum_weights(keys), strata_indices(keys)
        floor = mover_floor([(float(w[idx].sum()), len(idx)) for idx in cells], confidence)
    return resolvable_drop(test.n_eff, planned_se(test.n_eff, discordance), confidence, power, floor)


def needed_items(keys: Sequence[tuple], limit: float, confidence: float, power: float, discordance: float,
                 stratified: bool = False) -> int:
    """Items for `limit` to be resolved at the planning `discordance`: for a plain mean the inverse of
    resolvable_drop (items_needed); for a stratified one, its strata (as `keys` weigh them) grown
    alike until keyed_resolution reaches the limit. The one "needed" figure: `validate`, `gate
    --plan`, the gate's reports and the docs all give this one."""
    strata = list(dict.fromkeys(keys))
    if len(strata) <= 1:
        return items_needed(limit, discordance, confidence, power)
    n = len(keys)
    lo, hi = max(1, n // len(strata)), max(2, n // len(strata))

    def grow(m: int) -> float:
        return keyed_resolution([k for k in strata for _ in range(m)], confidence, power, discordance, stratified)

    while grow(hi) > limit:
        lo, hi = hi, hi * 2
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if grow(mid) > limit else (lo, mid)
    return lo * len(strata)


def one_loss_bound(keys: Sequence[tuple], confidence: float, stratified: bool = False) -> float:
    """The gate's upper bound on the drop of a rerun identical to its baseline but for one item lost,
    in the smallest stratum (where one item weighs most): a bound above the limit fails that rerun
    however large the rest of the run, so a config sized only to `needed_items` at its planning
    discordance can still fail a candidate that lost one needle of 35."""
    keys = list(keys) or [()]
    sizes = Counter(keys)
    smallest = min(sizes, key=lambda k: sizes[k])
    base = np.ones(len(keys))
    cand = base.copy()
    cand[keys.index(smallest)] = 0.0
    test = paired_test(base, cand, keys if stratified or len(sizes) > 1 else None, confidence)
    return test.high


def one_loss_items(keys: Sequence[tuple], limit: float, confidence: float, stratified: bool = False) -> int:
    """Items (the strata grown alike) for a rerun that lost one of them to pass `limit`."""
    strata = list(dict.fromkeys(keys)) or [()]

    def bound(m: int) -> float:
        return one_loss_bound([k for k in strata for _ in range(m)], confidence, stratified)

    lo, hi = 1, max(2, len(keys) // len(strata))
    while bound(hi) > limit:
        lo, hi = hi, hi * 2
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if bound(mid) > limit else (lo, mid)
    return lo * len(strata)


def resolves(n: int, resolution: float) -> str:
    """`24 items resolve 12.5 pt`, or, where no drop a score can have is resolved (a bound of 100
    points or more), `cannot resolve any drop at n = 2`: a figure above 100 points means nothing."""
    if resolution >= 1:
        return f"cannot resolve any drop at n = {n:,}"
    return f"{n:,} items resolve {resolution * 100:.1f} pt"


def planned_se(n: float, discordance: float) -> float:
    """se of a paired drop of 0 when a fraction `discordance` of items change answer, half each way."""
    return math.sqrt(discordance / n)


def items_needed(limit: float, discordance: float, confidence: float, power: float) -> int:
    """Paired items for `limit` to be resolvable at `discordance` (inverse of resolvable_drop)."""
    z = float(norm.ppf(confidence)) + float(norm.ppf(power))
    n_se = math.ceil(z * z * discordance / (limit * limit))
    return max(n_se, exact.floor_items(limit, confidence))  # best_case_bound(n) <= limit
