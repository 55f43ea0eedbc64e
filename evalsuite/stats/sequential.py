"""One anytime-valid confidence sequence per check, for tasks scored in a seeded random order.

`run --stop decided` scores a task's items in a uniformly random order (order_key), so the first n
are exchangeable draws and their contributions y = N w d (d = baseline - candidate, w the item's
weight in the metric: 1/N plain, 1/(K n_k) over K strata) are i.i.d. with mean the superpopulation's
drop of the metric. Two betting e-processes bound it (Waudby-Smith & Ramdas 2023, "Estimating means
of bounded random variables by betting", JRSS-B): one against H0 "drop >= m" (a pass at m = limit),
one against "drop <= m" (shown beyond). Under its H0 each is a nonnegative supermartingale, so by
Ville's inequality it ever reaches 1/alpha with chance at most alpha, however often it is read. The
gate gives it a share of alpha and a fixed-n look on all N items the rest (`with_final_look`), so a
check the full data pass is not lost at the last item. Bets are predictable and aimed at the check's
limit (aGRAPA, at 0.7 of the Kelly fraction), capped so that the capital grows with m: each bound printed is the test that
decides. A check neither passed nor shown beyond runs to its last item, where the final look decides:
no stop for futility, as a predicted failure may be one the full data pass. confseq (Howard et al.) has no wheel for this
Python and evaluates a grid of means per item; the benches replay thousands of sequences: numpy here.
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

CAP = 0.5  # a bet risks at most half the capital on one item's worst outcome (WSR 2023's c)
PRIOR_ITEMS = 10.0  # pseudo-items of no change at the planning discordance: early bets stay small
PRIOR_DISCORDANCE = 0.05
# fractional Kelly: a bet at 0.7 of the estimated Kelly fraction gives up a little growth for much less
# spread of the log capital, which early estimates of the mean make large (bench/sequential_gate.py: 1.0, 0.7
# and 0.5 tried; 0.7 the fewest wrong checks)
KELLY = 0.7

Kind = Literal["within", "above"]
Decision = Literal["pass", "fail"]


@lru_cache(maxsize=64)
def critical(confidence: float) -> float:
    return float(norm.ppf(confidence))


def order_key(seed: int, task: str, sample_id: str) -> str:
    """An item's place in its task's seeded order: a hash, so that the order of any subset (a group, a
    length) is the same sequence restricted, and a reader needs no list of the population to find it."""
    return hashlib.sha256(f"{seed}\x00{task}\x00{sample_id}".encode()).hexdigest()


def seeded_order(ids: Iterable[str], seed: int, task: str) -> list[str]:
    return sorted(ids, key=lambda s: order_key(seed, task, s))


@dataclass(frozen=True)
class Population:
    """The N items of one check in the seeded order: each item's weight in the metric (summing to 1)
    and cell (stratum), and each cell's size."""

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

    @property
    def spread(self) -> float:
        """The most one item's contribution N w d can be, either way."""
        return float(self.n * self.weights.max()) if self.n else 1.0


def _past(x: np.ndarray) -> np.ndarray:
    return np.cumsum(x, axis=-1) - x


class Sequential:
    """The confidence sequence of one check on the first n items of `pop` (drops in [-1, 1]; rows of
    a 2-D `diffs` are separate sequences, for simulation). Its bets depend on the limit, not on the
    m a bound asks about, so the capital is monotone in m."""

    def __init__(self, pop: Population, diffs: Sequence[float] | np.ndarray, limit: float | None, alpha: float,
                 discordance: float = PRIOR_DISCORDANCE, final_alpha: float | None = None):
        d = np.asarray(diffs, float)
        self.pop, self.limit, self.alpha, self.n = pop, limit, alpha, d.shape[-1]
        self.final_alpha = final_alpha  # the fixed-n look at the last item, where the split gives it some alpha
        self.y = pop.n * pop.weights[: self.n] * d
        self.spread = pop.spread
        i = np.arange(self.n, dtype=float)
        prior_var = discordance * pop.n * float(np.sum(pop.weights**2))  # E y^2 at the planning discordance
        self.mean = _past(self.y) / (i + PRIOR_ITEMS)  # predictable, shrunk towards no change
        dev = (self.y - self.mean) ** 2
        self.var = (_past(dev) + PRIOR_ITEMS * prior_var) / (i + PRIOR_ITEMS)
        self._dev = dev
        # the side the estimate points to bets for the limit (aGRAPA); the other as a confidence
        # sequence does (predictable plug-in, WSR 2023 eq. 26), so that both bounds say something
        plug_in = np.sqrt(2 * math.log(1 / alpha) / (self.var * (i + 1) * np.log(i + 2)))
        if limit is None:  # no limit to aim at (one score's interval): both sides bet as a confidence sequence
            self._bets = {"within": plug_in, "above": plug_in}
        else:
            gap = limit - self.mean
            kelly = KELLY * np.abs(gap) / (self.var + gap * gap)
            self._bets = {"within": np.where(gap > 0, kelly, plug_in), "above": np.where(gap < 0, kelly, plug_in)}
        self._cache: dict[tuple[Kind, float], np.ndarray] = {}

    def log_e(self, kind: Kind, m: float) -> np.ndarray:
        """The running maximum of the log capital after each item against H0 at m:
        within  the drop is m or more (rejected: the drop is shown below m)
        above   the drop is m or less (rejected: shown above m)."""
        key = (kind, float(m))
        if key not in self._cache:
            if len(self._cache) > 8:  # a bound's bisection asks many m once each
                self._cache.clear()
            sign = -1.0 if kind == "within" else 1.0
            # the cap keeps 1 + lam (m - y) >= 1 - CAP at y's worst; it grows with m (within) as that
            # outcome shrinks, which keeps the capital monotone in m
            worst = max(self.spread + sign * m, 1e-12)
            lam = np.minimum(self._bets[kind], CAP / worst)
            steps = np.log1p(lam * sign * (self.y - m))
            self._cache[key] = np.maximum.accumulate(np.cumsum(steps, axis=-1), axis=-1)
        return self._cache[key]

    def p(self, kind: Kind, m: float) -> float:
        """Anytime-valid p-value over the items seen: 1 / the largest capital reached."""
        if not self.n:
            return 1.0
        return float(min(1.0, math.exp(-max(float(self.log_e(kind, m)[-1]), 0.0))))

    def first(self, kind: Kind, m: float) -> np.ndarray | int:
        """Items after which H0 at m is first rejected at alpha; n + 1 where it never is."""
        return self._first_hit(self.log_e(kind, m) >= math.log(1 / self.alpha))

    def _first_hit(self, hit: np.ndarray) -> np.ndarray | int:
        if not self.n:
            return 1
        at = np.where(hit.any(axis=-1), np.argmax(hit, axis=-1) + 1, self.n + 1)
        return int(at) if at.ndim == 0 else at

    def bound(self, kind: Kind) -> float:
        """within: the least m rejected (the upper bound); above: the most (the lower bound)."""
        lower = kind == "within"
        lo, hi = -1.0, 1.0
        for _ in range(40):
            mid = (lo + hi) / 2
            rejects = self.p(kind, mid) < self.alpha
            lo, hi = (lo, mid) if rejects == lower else (mid, hi)
        return hi if lower else lo


def decision(seq: Sequential, rule: str) -> tuple[Decision | None, int]:
    """(pass/fail/None, items after which it was first decided): a pass where the drop is shown below
    the limit, a fail where shown above it (`rule` is kept for the callers: either rule stops on the
    same two outcomes). Ties go to the pass, which the bound at the limit shows."""
    passed, failed = seq.first("within", seq.limit), seq.first("above", seq.limit)
    at = min(passed, failed)
    if at > seq.n:
        return None, seq.n + 1
    return ("pass" if passed == at else "fail"), at


def mean_interval(pop: Population, values: Sequence[float], confidence: float) -> tuple[float, float]:
    """Two-sided interval of the population's (weighted) mean of scores in [0, 1] from the first n of
    its seeded order, anytime-valid: each bound a confidence sequence at (1 - confidence) / 2, so it
    holds at an n chosen by looking, as a stopped task's is (a score's variance is up to 1/4)."""
    seq = Sequential(pop, values, None, (1 - confidence) / 2, discordance=0.25)
    return max(0.0, seq.bound("above")), min(1.0, seq.bound("within"))


def floor(pop: Population, limit: float, alpha: float) -> float:
    """The sequence's upper bound at N had no item changed: the least limit its pass can show."""
    return Sequential(pop, np.zeros(pop.n), limit, alpha).bound("within")


def planned_bound(pop: Population, limit: float, alpha: float, discordance: float) -> float:
    """The sequence's upper bound at N had a share `discordance` of the items changed, half lost and
    half gained, spread evenly over the order (no drop): a check whose limit is below it cannot be
    passed by the sequence at the planning discordance, so it is judged fixed-n on all its items."""
    every = max(1, round(1 / discordance)) if discordance > 0 else pop.n + 1
    d = np.zeros(pop.n)
    changed = np.arange(0, pop.n, every)
    d[changed] = np.where(np.arange(len(changed)) % 2 == 0, 1.0, -1.0)
    return Sequential(pop, d, limit, alpha, discordance).bound("within")


def with_final_look(seq_test: PairedTest, fixed: PairedTest, share: float) -> PairedTest:
    """The check of a watched task that ran to its last item: passed where the sequence (at share x
    alpha, p-values already scaled by 1/share) or the fixed-n test on all N (at the rest) shows it, so
    its p is the smaller of the two scaled p-values and each bound the tighter of the two."""
    rest = 1 - share

    def p_limit(limit: float, within: bool) -> float:
        seq_p, fixed_p = ((t.p_within(limit) if within else t.p_exceeds(limit)) for t in (seq_test, fixed))
        return min(1.0, seq_p, fixed_p / rest)

    floors = [x for x in (seq_test.floor, fixed.floor) if x is not None]
    return PairedTest(fixed.n, fixed.n_eff, fixed.max_weight, fixed.drop, max(seq_test.low, fixed.low),
                      min(seq_test.high, fixed.high), fixed.se, fixed.se0, min(1.0, seq_test.p_worse, fixed.p_worse / rest),
                      f"{fixed.method}, at {rest:.0%} of alpha; or {seq_test.method}, at {share:.0%} of alpha",
                      fixed.counts, p_limit, floor=min(floors) if floors else None)


def as_paired_test(seq: Sequential, how: str = "", share: float = 1.0) -> PairedTest:
    """The check's PairedTest at the items seen: the sequence's bounds (at its own alpha, `share` of
    the rules'), its anytime-valid p-values divided by `share`, so that they compare with the rules'
    alpha as any check's do."""
    n, pop = seq.n, seq.pop
    drop = float(seq.y.mean()) if n else 0.0
    se = math.sqrt(float(seq.var[-1]) / n) if n else math.nan

    def p_limit(limit: float, within: bool) -> float:
        return min(1.0, seq.p("within" if within else "above", limit) / share)

    n_eff = 1 / float(np.sum(pop.weights**2))
    return PairedTest(n, n_eff, float(pop.weights.max()), drop, seq.bound("above"), seq.bound("within"), se, se,
                      min(1.0, seq.p("above", 0.0) / share), f"confidence sequence (betting, Waudby-Smith & Ramdas "
                      f"2023): {n:,} of {pop.n:,} items in the seeded order{how}", None, p_limit,
                      floor=floor(pop, seq.limit, seq.alpha))
