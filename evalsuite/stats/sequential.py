"""Anytime-valid decisions on items scored in a seeded random order, without replacement.

`evalsuite run --stop decided` scores a task's items in a uniformly random order (order_key) and stops
a candidate's task once every check on it is decided. The baseline's N items are a finite population,
the first n a sample without replacement from it. After each item a betting e-process multiplies its
capital by 1 + lambda (y - m), where m is the mean the null hypothesis leaves for the items not yet
seen (Waudby-Smith & Ramdas 2020, "Confidence sequences for sampling without replacement"; bets as in
their 2023 JRSS-B paper). Under the null the capital is a nonnegative supermartingale, so by Ville's
inequality it ever reaches 1/alpha with chance at most alpha: a check may be read after every batch
and the task stopped whenever all are decided. As n nears N the unseen items shrink to none and the
decision becomes the full data's (the finite population correction).

What is decided is the verdict of the gate's own test on all N items, not only the benchmark's drop D:
that test's bound is D plus Tango's margin (per stratum, combined by MOVER), whose square is at most
a linear functional of |d| per stratum plus a constant (`MARGIN_CROSS`, tests/test_sequential.py).
A tangent of the square root at a predictable point turns "the full run would not pass" into a
half-space of population means, which one e-process tests at alpha (`Sequential.log_e`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np
from scipy.stats import norm

from evalsuite.stats.significance import PairedTest, strata_indices, stratum_weights

# Tango's one-sided margin m of n paired items with discordance q (counts b, c, real or whole) obeys
# m^2 <= z^2 q/n + MARGIN_CROSS z^3 sqrt(q/n)/n + z^4/n^2 for one-sided levels from CONFIDENCE_FLOOR
# up: checked over a grid and at random (largest coefficient found 0.90); below the floor a check
# runs to its last item.
MARGIN_CROSS = 1.0
CONFIDENCE_FLOOR = 0.8
BET_CAP = 0.5  # a bet risks at most half the capital on one item
PRIOR_ITEMS = 2.0  # pseudo-items that pull early estimates towards the null and the planning discordance
PRIOR_DISCORDANCE = 0.05
TIE = 1e-12
PLUG_IN_ALPHA = 0.05  # the level the bounding bets are sized for (fixed, so they never depend on the rules read)

Kind = Literal["within", "above", "below", "above_margin"]


@lru_cache(maxsize=64)
def critical(confidence: float) -> float:
    """z of a one-sided bound at `confidence`: the gate's tests use it, and so does the margin bound."""
    return float(norm.ppf(confidence))


def order_key(seed: int, task: str, sample_id: str) -> str:
    """An item's place in its task's seeded order: a hash, so that the order of any subset (a group, a
    length) is the same sequence restricted, and a reader needs no list of the population to find it."""
    return hashlib.sha256(f"{seed}\x00{task}\x00{sample_id}".encode()).hexdigest()


def seeded_order(ids: Iterable[str], seed: int, task: str) -> list[str]:
    return sorted(ids, key=lambda s: order_key(seed, task, s))


@dataclass(frozen=True)
class Population:
    """The N items of one check as the gate weighs them on full data, in the seeded order: each item's
    weight (summing to 1) and cell (stratum), and each cell's size. Cells as the paired test forms
    them: one where every item weighs alike, else each distinct key."""

    weights: np.ndarray
    cells: np.ndarray
    sizes: np.ndarray

    @classmethod
    def of(cls, keys: Sequence[tuple]) -> Population:
        w = stratum_weights(keys)
        groups = [np.arange(len(keys))] if np.allclose(w, w[0]) else strata_indices(keys)
        cells = np.empty(len(keys), dtype=int)
        for c, idx in enumerate(groups):
            cells[idx] = c
        return cls(w, cells, np.array([len(idx) for idx in groups]))

    @property
    def n(self) -> int:
        return len(self.weights)

    def cell_weights(self) -> np.ndarray:
        return np.bincount(self.cells, weights=self.weights, minlength=len(self.sizes))

    def margin_bound(self, q: np.ndarray, z: float) -> np.ndarray:
        """Bound on the full-data margin given each cell's discordance q (rows: times, columns: cells)."""
        big_w, size = self.cell_weights(), self.sizes
        terms = z * z * q / size + MARGIN_CROSS * z**3 * np.sqrt(q / size) / size + z**4 / size**2
        return np.sqrt(terms @ (big_w**2))

    def floor(self, z: float) -> float:
        """The gate's upper bound on full data had no item changed (Tango's z^2/(n+z^2), by MOVER)."""
        return float(math.sqrt(np.sum((self.cell_weights() * z * z / (self.sizes + z * z)) ** 2)))


@dataclass
class _Null:
    """Per item, for one functional and null: its value, the sum of those before it, the mean the null
    leaves for the unseen items, the range a value can take, and the bet's direction (+1: above)."""

    y: np.ndarray
    past: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    sign: int


class Sequential:
    """The e-processes of one check on the first n items of `pop` (drops d = baseline - candidate, in
    [-1, 1]) under the gate's decision `rule`. A test's bets do not depend on the limit it is asked
    about, so each e-value grows with that limit and every bound printed inverts the test that decides."""

    def __init__(self, pop: Population, diffs: Sequence[float], confidence: float, limit: float,
                 rule: str = "upper_bound", discordance: float = PRIOR_DISCORDANCE):
        d = np.asarray(diffs, float)
        self.pop, self.confidence, self.limit, self.n = pop, confidence, limit, len(d)
        self.decisive: tuple[Kind, ...] = ("within", "above") if rule == "upper_bound" else ("below", "above_margin")
        self.z = z = critical(confidence)
        big_n, w, cells = pop.n, pop.weights[: len(d)], pop.cells[: len(d)]
        i = np.arange(len(d), dtype=float)
        self.remaining = big_n - i  # items unseen before item i, itself included
        self.a = big_n * w * d  # mean over the population: D
        past = lambda x: np.cumsum(x) - x  # noqa: E731
        self.a_past = past(self.a)
        square = big_n * w * w * np.abs(d)
        e1, e2 = z * z * square, MARGIN_CROSS * z**3 / 2 * square / np.sqrt(pop.sizes[cells])
        big_w = pop.cell_weights()
        c1, c2 = np.sum(big_w**2 * pop.sizes**-1.5), np.sum(big_w**2 / pop.sizes**2)
        # predictable estimates: the discordance, and the margin functional X whose root the tangent touches
        q_hat = (past(np.abs(d)) + PRIOR_ITEMS * discordance) / (i + PRIOR_ITEMS)
        root_q = np.sqrt(np.maximum(q_hat, 1e-12))
        self.const = MARGIN_CROSS * z**3 * root_q / 2 * c1 + z**4 * c2
        # the functional's mean at the planning discordance: discordance * sum_j w_j^2 g_j
        prior_x = discordance * (z * z * np.sum(pop.weights**2) + MARGIN_CROSS * z**3 / (2 * root_q)
                                 * np.sum(pop.weights**2 / np.sqrt(pop.sizes[pop.cells])))
        x_part = (past(e1) + past(e2) / root_q + PRIOR_ITEMS * prior_x) / (i + PRIOR_ITEMS)
        self.sigma = np.sqrt(x_part + self.const)
        self.margin_item = (e1 + e2 / root_q) / (2 * self.sigma)
        self.margin_past = (past(e1) + past(e2) / root_q) / (2 * self.sigma)
        w_max = float(pop.weights.max()) if big_n else 0.0
        g_max = z * z + MARGIN_CROSS * z**3 / (2 * root_q * math.sqrt(pop.sizes.min()))
        self.spread = big_n * w_max  # |N w d| at most
        self.margin_max = big_n * w_max**2 * g_max / (2 * self.sigma)
        prior_var = discordance * big_n * float(np.sum(pop.weights**2))
        s1, s2 = self.a_past, past(self.a**2)
        self.var = (np.maximum(s2 - s1 * s1 / np.maximum(i, 1), 0) + PRIOR_ITEMS * prior_var) / (i + PRIOR_ITEMS)
        self._extremes(d, w, cells)
        self._bets: dict[Kind, np.ndarray] = {}
        self._cache: dict[tuple[Kind, float], np.ndarray] = {}

    def _extremes(self, d: np.ndarray, w: np.ndarray, cells: np.ndarray) -> None:
        """After each item, the least and most the benchmark's drop can be: every unseen item lost, or
        gained. At the last item both are the drop itself."""
        seen_d, seen_w = np.cumsum(w * d), np.cumsum(w)
        self.d_min, self.d_max = seen_d - (1 - seen_w), seen_d + (1 - seen_w)
        self._d, self._cells = d, cells
        self._mhi: tuple[int, np.ndarray] | None = None

    def _margin_hi(self, rows: np.ndarray) -> np.ndarray:
        """The margin bound with every unseen item changed, after each item from the first of `rows`
        on (before it: +inf): only where the drop's extremes leave a decision open is it worth its cost."""
        out = np.full(self.n, np.inf)
        if not rows.any():
            return out
        start, pop = int(np.argmax(rows)), self.pop
        if self._mhi is not None and self._mhi[0] <= start:  # the drop's extremes move one way: a suffix
            out[start:] = self._mhi[1][start - self._mhi[0]:]
            return out
        k = len(pop.sizes)
        changed0 = np.bincount(self._cells[:start], weights=np.abs(self._d[:start]), minlength=k)
        count0 = np.bincount(self._cells[:start], minlength=k).astype(float)
        onehot = np.zeros((self.n - start, k))
        onehot[np.arange(self.n - start), self._cells[start:]] = 1
        changed = changed0 + np.cumsum(onehot * np.abs(self._d[start:])[:, None], axis=0)
        count = count0 + np.cumsum(onehot, axis=0)
        out[start:] = pop.margin_bound((changed + pop.sizes - count) / pop.sizes, self.z)
        self._mhi = (start, out[start:].copy())
        return out

    def _null(self, kind: Kind, limit: float) -> _Null:
        if kind in ("above", "below"):
            y, past, theta = self.a, self.a_past, np.full(self.n, limit)
            low, high = np.full(self.n, -self.spread), np.full(self.n, self.spread)
        elif kind == "within":  # H0: D + margin >= limit, by the tangent sqrt(X) <= (X/s + s)/2
            y, past = self.a + self.margin_item, self.a_past + self.margin_past
            theta = limit - self.sigma / 2 - self.const / (2 * self.sigma)
            low, high = np.full(self.n, -self.spread), self.spread + self.margin_max
        else:  # above_margin: H0: D - margin <= limit
            y, past = self.a - self.margin_item, self.a_past - self.margin_past
            theta = limit + self.sigma / 2 + self.const / (2 * self.sigma)
            low, high = -self.spread - self.margin_max, np.full(self.n, self.spread)
        mean = (self.pop.n * theta - past) / self.remaining
        return _Null(y, past, mean, low, high, -1 if kind in ("within", "below") else 1)

    def _bet(self, kind: Kind) -> np.ndarray:
        """Each item's bet, predictable. The two tests that decide the check bet as Kelly's growth rate
        approximation (GRAPA) against the check's own limit; the others, which only bound and flag,
        as a confidence sequence does (predictable plug-in, Waudby-Smith & Ramdas 2023), for any
        limit alike. The cap per item is log_e's."""
        if kind not in self._bets:
            i = np.arange(self.n, dtype=float)
            if kind in self.decisive:
                h = self._null(kind, self.limit)
                m = np.clip(h.mean, h.low, h.high)
                gap = h.sign * ((h.past + PRIOR_ITEMS * m) / (i + PRIOR_ITEMS) - m)
                self._bets[kind] = np.maximum(gap / (self.var + gap * gap), 0)
            else:
                self._bets[kind] = np.sqrt(2 * math.log(1 / PLUG_IN_ALPHA) / (self.var * (i + 1) * np.log(i + 2)))
        return self._bets[kind]

    def log_e(self, kind: Kind, limit: float) -> np.ndarray:
        """The running maximum of the log e-value after each item against H0 at `limit` (score units):
        within  the full run's upper bound of the drop is at the limit or above (a pass rejects it)
        above   the benchmark's drop is at the limit or below
        below   the benchmark's drop is at the limit or above
        above_margin  the full run's lower bound of the drop is at the limit or below.
        An H0 that the items seen already rule out, whatever the unseen ones are, is +inf from there on."""
        key = (kind, float(limit))
        if key not in self._cache:
            if len(self._cache) > 8:  # a bound's bisection asks many limits once each
                self._cache.clear()
            h = self._null(kind, limit)
            lam = self._bet(kind)
            impossible = h.mean > h.high if h.sign < 0 else h.mean < h.low
            m = np.clip(h.mean, h.low, h.high)
            # at most BET_CAP of the capital on the item's worst outcome at this limit: the cap grows
            # with the limit as the outcome it guards against shrinks, so the e-value still grows with it
            worst = np.maximum(h.high - m if h.sign < 0 else m - h.low, 1e-12)
            lam = np.minimum(lam, BET_CAP / worst)
            steps = np.log1p(lam * h.sign * (h.y - m))
            steps = np.where(impossible | self._settled(kind, limit), np.inf, steps)
            self._cache[key] = np.maximum.accumulate(np.cumsum(steps)) if self.n else np.zeros(0)
        return self._cache[key]

    def _settled(self, kind: Kind, limit: float) -> np.ndarray:
        """Where H0 is false whatever the unseen items are (beyond sums' rounding: a drop equal to the
        limit at the last item is not above it)."""
        if kind == "above":
            return self.d_min > limit + TIE
        if kind == "below":
            return self.d_max < limit - TIE
        if kind == "within":
            open_ = self.d_max < limit - TIE
            return open_ & (self.d_max + self._margin_hi(open_) < limit - TIE)
        open_ = self.d_min > limit + TIE
        return open_ & (self.d_min - self._margin_hi(open_) > limit + TIE)

    def p(self, kind: Kind, limit: float) -> float:
        """Anytime-valid p-value over the items seen: 1 / the largest e-value reached."""
        if not self.n:
            return 1.0
        return float(min(1.0, math.exp(-self.log_e(kind, limit)[-1])))

    def first(self, kind: Kind, limit: float, alpha: float) -> int:
        """Items after which H0 at `limit` is first rejected at alpha; n + 1 where it never is."""
        hit = self.log_e(kind, limit) >= math.log(1 / alpha)
        return int(np.argmax(hit)) + 1 if hit.any() else self.n + 1

    def bound(self, kind: Kind, alpha: float) -> float:
        """The limit at which the test just rejects (within, below: the least; above, above_margin: the
        most), by bisection: the e-values grow monotonically with the limit."""
        lower = kind in ("within", "below")
        lo, hi = -3.0, 3.0
        for _ in range(50):
            mid = (lo + hi) / 2
            rejects = self.p(kind, mid) < alpha
            lo, hi = (lo, mid) if rejects == lower else (mid, hi)
        return hi if lower else lo


def decision(seq: Sequential, rule: str, limit: float, alpha: float) -> tuple[str | None, int]:
    """(pass/fail/None, items after which it was first decided) for the gate's `decision` rule:
    upper_bound passes where the full run's upper bound is shown below the limit and fails where the
    benchmark's drop is shown above it (the full run's bound is then above it too); lower_bound fails
    where the full run's lower bound is shown above the limit and passes where the drop is shown below."""
    if rule == "upper_bound":
        passed, failed = seq.first("within", limit, alpha), seq.first("above", limit, alpha)
    else:
        passed, failed = seq.first("below", limit, alpha), seq.first("above_margin", limit, alpha)
    if min(passed, failed) > seq.n:
        return None, seq.n + 1
    return ("pass", passed) if passed <= failed else ("fail", failed)


def as_paired_test(seq: Sequential, alpha: float) -> PairedTest:
    """The check's PairedTest at the items seen: its bounds are the sequential bounds of the full run's
    lower and upper bound of the drop, its p-values anytime-valid."""
    n, pop = seq.n, seq.pop
    drop = float(seq.a.mean()) if n else 0.0
    se = math.sqrt(float(seq.var[-1]) / max(n, 1) * max(0.0, 1 - n / pop.n)) if n else math.nan

    def p_limit(limit: float, within: bool) -> float:
        return seq.p("within" if within else "above_margin", limit)

    n_eff = 1 / float(np.sum(pop.weights**2))
    return PairedTest(n, n_eff, float(pop.weights.max()), drop, seq.bound("above_margin", alpha),
                      seq.bound("within", alpha), se, se, seq.p("above_margin", 0.0),
                      f"confidence sequence (betting, sampling without replacement): {n:,} of {pop.n:,} items "
                      f"in the seeded order", None, p_limit, floor=pop.floor(seq.z))
