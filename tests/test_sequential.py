"""The confidence sequence behind `run --stop decided` (evalsuite.stats.sequential): its size at a
true drop equal to the limit under continuous monitoring, its bounds' order and monotonicity, its
early decisions, and that it never raises on any paired data."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalsuite.stats.sequential import (Population, Sequential, as_paired_test, decision, mean_interval, order_key,
                                       seeded_order)

ALPHA = 0.05


def superpopulation(n: int, drop: float, q: float, seed: int, reps: int = 1) -> np.ndarray:
    """reps x n drops drawn i.i.d.: +1 at rate (q + drop)/2, -1 at (q - drop)/2."""
    u = np.random.default_rng(seed).random((reps, n))
    return np.where(u < (q + drop) / 2, 1.0, np.where(u < q, -1.0, 0.0))


def plain(n: int) -> Population:
    return Population.of([()] * n)


# ---------------------------------------------------------------- the order


def test_a_subsets_order_is_the_full_orders_restriction():
    ids = [f"q{i}" for i in range(300)]
    full = seeded_order(ids, 7, "mmlu")
    part = set(ids[::3])
    assert seeded_order(part, 7, "mmlu") == [i for i in full if i in part]
    assert seeded_order(ids, 8, "mmlu") != full and order_key(7, "mmlu", "q1") != order_key(7, "legal", "q1")


# ---------------------------------------------------------------- size under continuous monitoring


@pytest.mark.parametrize("limit,q,n", [(0.02, 0.1, 3000), (0.05, 0.3, 1500), (0.05, 0.05, 1000)])
def test_a_pass_at_a_true_drop_equal_to_the_limit_is_rare(limit, q, n):
    """Looked at after every item, the sequence shows a drop that is exactly the limit within it in at
    most alpha of the replicates (bench/sequential_size.py: more cases, more replicates)."""
    reps = 400
    seq = Sequential(plain(n), superpopulation(n, limit, q, 5, reps), limit, ALPHA)
    rate = float(np.mean(seq.first("within", limit) <= n))
    assert rate <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / reps)


def test_shown_beyond_at_a_true_drop_equal_to_the_limit_is_rare():
    reps, n, limit = 400, 2000, 0.02
    seq = Sequential(plain(n), superpopulation(n, limit, 0.1, 6, reps), limit, ALPHA)
    assert float(np.mean(seq.first("above", limit) <= n)) <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / reps)



@pytest.mark.parametrize("p,n", [(0.6, 1500), (0.9, 800), (0.25, 1000)])
def test_one_scores_interval_covers_its_mean_at_every_n(p, n):
    """mean_interval's two bounds, read after every item, both hold the true mean at once in at least
    95% of the replicates, where a Wilson interval read after every item would not."""
    from evalsuite.stats.significance import wilson

    reps = 300
    scores = (np.random.default_rng(11).random((reps, n)) < p).astype(float)
    seq = Sequential(plain(n), scores, None, (1 - 0.95) / 2, discordance=0.25)
    missed = (seq.first("within", p) <= n) | (seq.first("above", p) <= n)
    assert float(np.mean(missed)) <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / reps)
    low, high = mean_interval(plain(n), scores[0], 0.95)
    wl, wh = wilson(scores[0].sum(), n, 0.95)
    assert high - low > wh - wl  # wider than the fixed-n interval at the same n
    peeked = [any(not (lo <= p <= hi) for lo, hi in (wilson(row[:k].sum(), k, 0.95) for k in range(50, n + 1, 50)))
              for row in scores[:100]]
    assert np.mean(peeked) > ALPHA  # why a stopped task needs the sequence


# ---------------------------------------------------------------- decisions


def test_clear_cases_are_decided_early():
    """A collapse stops on a small share of the items (shown beyond the limit); an unchanged candidate
    passes well before the end."""
    n = 4000
    (collapse,) = superpopulation(n, 0.15, 0.25, 8)
    status, at = decision(Sequential(plain(n), collapse, 0.02, ALPHA), "upper_bound")
    assert status == "fail" and at < 600
    status, at = decision(Sequential(plain(n), np.zeros(n), 0.02, ALPHA), "upper_bound")
    assert status == "pass" and at < n // 2


def test_a_drop_near_the_limit_runs_to_its_last_item():
    """A drop just under the limit that N items cannot show within it is never stopped: no futility
    stop, since a failure predicted from an early stretch may be one the full data pass; the final
    fixed-n look decides it."""
    n = 3000
    (d,) = superpopulation(n, 0.018, 0.2, 9)
    seq = Sequential(plain(n), d, 0.02, ALPHA)
    for rule in ("upper_bound", "lower_bound"):
        status, at = decision(seq, rule)
        assert status in (None, "pass") and (status is None) == (at == n + 1)


def test_the_bounds_are_the_tests_that_decide():
    (d,) = superpopulation(5000, 0.01, 0.1, 10)
    seq = Sequential(plain(5000), d, 0.02, ALPHA)
    low, high = seq.bound("above"), seq.bound("within")
    assert low <= float(d.mean()) <= high
    assert seq.p("within", high + 1e-6) < ALPHA <= seq.p("within", high - 1e-6)
    assert seq.p("above", low - 1e-6) < ALPHA <= seq.p("above", low + 1e-6)


def test_a_weighted_metric_is_bounded_by_its_weighted_contributions():
    """Macro accuracy over unequal strata: the sequence bounds the weighted drop, not the plain one."""
    keys = [("a",)] * 200 + [("b",)] * 1800
    pop = Population.of(keys)
    d = np.r_[np.ones(200) * 0.5, np.zeros(1800)]  # half of the small stratum lost: macro drop 0.25
    order = np.random.default_rng(11).permutation(2000)
    seq = Sequential(Population(pop.weights[order], pop.cells[order], pop.sizes), d[order], 0.02, ALPHA)
    assert pop.spread == pytest.approx(5.0) and seq.bound("above") > 0.1 > float(d.mean())


# ---------------------------------------------------------------- never a crash


@settings(max_examples=150, deadline=None)
@given(sizes=st.lists(st.integers(1, 12), min_size=1, max_size=5), data=st.data(),
       limit=st.floats(0, 0.5), rule=st.sampled_from(["upper_bound", "lower_bound"]))
def test_any_paired_data_gives_ordered_bounds_and_monotone_capital(sizes, data, limit, rule):
    keys = [(f"g{c}",) for c, size in enumerate(sizes) for _ in range(size)]
    d = np.array(data.draw(st.lists(st.sampled_from([-1.0, 0.0, 1.0, 0.5, -0.25]), min_size=len(keys),
                                    max_size=len(keys))))
    n = data.draw(st.integers(0, len(keys)))
    seq = Sequential(Population.of(keys), d[:n], limit, ALPHA)
    for kind in ("within", "above"):
        assert 0.0 <= seq.p(kind, limit) <= 1.0
        lo, hi = seq.log_e(kind, limit - 0.1), seq.log_e(kind, limit + 0.1)
        assert np.all(hi >= lo - 1e-9) if kind == "within" else np.all(lo >= hi - 1e-9)
    status, at = decision(seq, rule)
    assert status in (None, "pass", "fail") and 1 <= at <= n + 1
    test = as_paired_test(seq)
    assert -1.0 <= test.low <= test.high <= 1.0
    assert 0.0 <= test.p_within(limit) <= 1.0 and 0.0 <= test.p_exceeds(limit) <= 1.0
