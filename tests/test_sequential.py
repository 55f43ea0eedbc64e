"""The sequential test behind `run --stop decided` (evalsuite.stats.sequential): its error under
continuous monitoring, its collapse to the full data at n = N, and the bound on the gate's margin
that lets it decide what the full run would say."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalsuite.stats.sequential import (MARGIN_CROSS, Population, Sequential, as_paired_test, critical, decision,
                                        order_key, seeded_order)
from evalsuite.stats.significance import paired_test, tango_bounds

ALPHA = 0.05


def population(cells: list[int], seed: int, lost: float, gained: float) -> tuple[Population, np.ndarray, list]:
    """Drops of items in cells of the given sizes: each lost (+1) or gained (-1) with these shares."""
    rng = np.random.default_rng(seed)
    keys = [(f"g{c}",) for c, size in enumerate(cells) for _ in range(size)]
    u = rng.random(len(keys))
    d = np.where(u < lost, 1.0, np.where(u < lost + gained, -1.0, 0.0))
    return Population.of(keys), d, keys


def full_bounds(d: np.ndarray, keys: list, confidence: float = 0.95) -> tuple[float, float]:
    """The gate's own one-sided bounds on all items: what the sequential test decides about."""
    t = paired_test(np.clip(d, 0, 1), np.clip(-d, 0, 1), keys, confidence)
    return t.low, t.high


# ---------------------------------------------------------------- the margin bound


@settings(max_examples=400, deadline=None)
@given(n=st.floats(1, 1e5), q=st.one_of(st.just(0.0), st.floats(1e-12, 1)), share=st.floats(0, 1),
       confidence=st.floats(0.8, 0.99999), whole=st.booleans())
def test_tango_margin_is_within_the_bound(n, q, share, confidence, whole):
    """Tango's one-sided margin, either side, never exceeds sqrt(z^2 q/n + z^3 sqrt(q/n)/n + z^4/n^2),
    whole counts or the scaled shares the gate feeds it for partial credit (not denormal ones, where
    the root search of tango_bounds itself gives up)."""
    b, c = q * n * share, q * n * (1 - share)
    if whole:
        n, b, c = math.ceil(n), math.floor(b), math.floor(c)
        q = (b + c) / n
    z = critical(confidence)
    low, high = tango_bounds(b, c, n, confidence)
    d = (b - c) / n
    bound = math.sqrt(z * z * q / n + MARGIN_CROSS * z**3 * math.sqrt(q / n) / n + z**4 / n**2)
    assert high - d <= bound * (1 + 1e-9) and d - low <= bound * (1 + 1e-9)


@pytest.mark.parametrize("cells,lost,gained", [([400], 0.06, 0.03), ([30, 80, 200, 15], 0.1, 0.05),
                                               ([12] * 20, 0.3, 0.2), ([500, 5], 0.0, 0.0)])
def test_the_gates_full_data_bounds_are_within_the_margin_bound(cells, lost, gained):
    pop, d, keys = population(cells, 1, lost, gained)
    low, high = full_bounds(d, keys)
    drop = float(pop.weights @ d)
    q = np.bincount(pop.cells, weights=np.abs(d)) / pop.sizes
    bound = float(pop.margin_bound(q[None, :], critical(0.95))[0])
    assert high - drop <= bound + 1e-12 and drop - low <= bound + 1e-12


# ---------------------------------------------------------------- the order


def test_a_subsets_order_is_the_full_orders_restriction():
    ids = [f"q{i}" for i in range(300)]
    full = seeded_order(ids, 7, "mmlu")
    part = set(ids[::3])
    assert seeded_order(part, 7, "mmlu") == [i for i in full if i in part]
    assert seeded_order(ids, 8, "mmlu") != full and order_key(7, "mmlu", "q1") != order_key(7, "legal", "q1")


# ---------------------------------------------------------------- at n = N


@pytest.mark.parametrize("cells", [[600], [40, 90, 170]])
@pytest.mark.parametrize("seed", range(4))
def test_at_n_equal_N_the_sequence_is_the_benchmarks_drop(cells, seed):
    """Every item seen, whatever the order: every value but the benchmark's drop is ruled out, and
    where the sequence still held the drop (it does but in alpha of the orders) its bounds are it."""
    pop, d, _ = population(cells, 3, 0.08, 0.04)
    drop = float(pop.weights @ d)
    order = np.random.default_rng(seed).permutation(pop.n)
    seq = Sequential(Population(pop.weights[order], pop.cells[order], pop.sizes), d[order], 0.95, 0.02)
    assert seq.d_min[-1] == pytest.approx(drop) and seq.d_max[-1] == pytest.approx(drop)
    assert seq.p("above", drop - 1e-6) < ALPHA and seq.p("below", drop + 1e-6) < ALPHA
    for kind in ("above", "below"):
        if seq.p(kind, drop) >= ALPHA:
            assert seq.bound(kind, ALPHA) == pytest.approx(drop, abs=1e-9)


# ---------------------------------------------------------------- error under continuous monitoring


def wrong_rate(pop: Population, d: np.ndarray, limit: float, kind: str, orders: int, seed: int) -> float:
    """The share of random orders in which the test ever rejects, looked at after every item, under the
    decision rule it decides for (its bets sized for the limit)."""
    rule = "upper_bound" if kind in ("within", "above") else "lower_bound"
    rng, hits = np.random.default_rng(seed), 0
    for _ in range(orders):
        o = rng.permutation(pop.n)
        seq = Sequential(Population(pop.weights[o], pop.cells[o], pop.sizes), d[o], 0.95, limit, rule)
        hits += seq.first(kind, limit, ALPHA) <= seq.n
    return hits / orders


@pytest.mark.parametrize("cells", [[1500], [60, 150, 300, 90]])
def test_a_pass_is_wrong_at_most_alpha_of_the_time(cells):
    """A population whose full run just fails (its upper bound at the limit): however often the test
    is looked at, it passes in at most alpha of the orders (here far fewer: alpha is a bound)."""
    pop, d, keys = population(cells, 5, 0.07, 0.04)
    limit = full_bounds(d, keys)[1]  # the full run's upper bound sits on the limit: passing it is wrong
    rate = wrong_rate(pop, d, limit, "within", 300, 11)
    assert rate <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / 300)


@pytest.mark.parametrize("cells", [[1500], [60, 150, 300, 90]])
@pytest.mark.parametrize("kind", ["above", "below", "above_margin"])
def test_the_other_sides_are_wrong_at_most_alpha_of_the_time(cells, kind):
    """The benchmark's drop shown above (below) a limit equal to it, or the full run's lower bound
    shown above a limit equal to it: each wrong in at most alpha of the orders."""
    pop, d, keys = population(cells, 6, 0.09, 0.03)
    limit = full_bounds(d, keys)[0] if kind == "above_margin" else float(pop.weights @ d)
    assert wrong_rate(pop, d, limit, kind, 300, 12) <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / 300)


def test_clear_cases_are_decided_early():
    """A collapse is shown beyond the limit on a small share of the items; an unchanged candidate
    passes well before the end."""
    pop, d, _ = population([4000], 8, 0.2, 0.05)
    seq = Sequential(pop, d, 0.95, 0.02)
    assert decision(seq, "upper_bound", 0.02, ALPHA) == ("fail", pytest.approx(0, abs=600))
    same = Sequential(pop, np.zeros(pop.n), 0.95, 0.02)
    status, at = decision(same, "upper_bound", 0.02, ALPHA)
    assert status == "pass" and at < pop.n // 2


# ---------------------------------------------------------------- never a crash


@settings(max_examples=150, deadline=None)
@given(sizes=st.lists(st.integers(1, 12), min_size=1, max_size=5), data=st.data(),
       limit=st.floats(0, 0.5), rule=st.sampled_from(["upper_bound", "lower_bound"]))
def test_any_paired_data_gives_p_values_and_monotone_e_values(sizes, data, limit, rule):
    keys = [(f"g{c}",) for c, size in enumerate(sizes) for _ in range(size)]
    d = np.array(data.draw(st.lists(st.sampled_from([-1.0, 0.0, 1.0, 0.5, -0.25]), min_size=len(keys),
                                    max_size=len(keys))))
    n = data.draw(st.integers(0, len(keys)))
    seq = Sequential(Population.of(keys), d[:n], 0.95, limit, rule)
    for kind in ("within", "above", "below", "above_margin"):
        assert 0.0 <= seq.p(kind, limit) <= 1.0
        grows = kind in ("within", "below")
        lo, hi = seq.log_e(kind, limit - 0.1), seq.log_e(kind, limit + 0.1)
        assert np.all(hi >= lo - 1e-9) if grows else np.all(lo >= hi - 1e-9)
    status, at = decision(seq, rule, limit, ALPHA)
    assert status in (None, "pass", "fail") and 1 <= at <= n + 1
    test = as_paired_test(seq, ALPHA)
    assert 0.0 <= test.p_within(limit) <= 1.0 and 0.0 <= test.p_exceeds(limit) <= 1.0
