"""Properties of the one paired test over random paired data, degenerate strata included (every item
of a stratum lost, or gained, or unchanged; strata of one item; fractional scores): it never raises,
its bounds stay ordered around the drop and within [-1, 1], and every p lies in [0, 1]. For 0/1
items weighed alike the decision against a limit and the bound printed agree."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalsuite.stats import exact
from evalsuite.stats.significance import paired_test

EPS = 1e-9


@st.composite
def paired_data(draw, values=(0.0, 1.0)):
    """(baseline, candidate, keys): 1-4 strata of 1-12 items, each stratum drawn as random answers or
    as one of the degenerate shapes a real candidate produces."""
    base, cand, keys = [], [], []
    for s in range(draw(st.integers(1, 4))):
        n = draw(st.integers(1, 12))
        b = draw(st.lists(st.sampled_from(values), min_size=n, max_size=n))
        shape = draw(st.sampled_from(["random", "all lost", "all gained", "same", "all wrong"]))
        c = {"random": draw(st.lists(st.sampled_from(values), min_size=n, max_size=n)), "all lost": [0.0] * n,
             "all gained": [1.0] * n, "same": list(b), "all wrong": [0.0] * n}[shape]
        if shape in ("all gained", "all lost"):  # every item of the stratum changed the same way
            b = [float(shape == "all lost")] * n
        label = draw(st.sampled_from(["Yes", "No"]))
        base += b
        cand += c
        keys += [(f"g{s}", label)] * n
    return np.array(base), np.array(cand), keys


def _check(t, limit: float) -> None:
    assert -1 - EPS <= t.low <= t.drop + EPS and t.drop - EPS <= t.high <= 1 + EPS, (t.low, t.drop, t.high)
    for p in (t.p_worse, t.p_within(limit), t.p_exceeds(limit)):
        assert 0.0 <= p <= 1.0 and not math.isnan(p), p


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(paired_data(), st.floats(-0.5, 0.5), st.booleans())
def test_binary_and_stratified_tests_never_raise_and_stay_ordered(data, limit, stratified):
    base, cand, keys = data
    t = paired_test(base, cand, keys if stratified else None, 0.95)
    _check(t, limit)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(paired_data(values=(0.0, 0.5, 1.0)), st.floats(-0.5, 0.5))
def test_fractional_scores_never_raise_and_stay_ordered(data, limit):
    base, cand, keys = data
    _check(paired_test(base, cand, keys, 0.95), limit)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 60), st.data(), st.floats(0.005, 0.3))
def test_the_exact_decision_and_its_bound_agree(n, data, limit):
    """A limit above the upper bound is shown within (p < alpha) and one at or below it is not; the
    same for the lower bound and a drop shown beyond the limit."""
    b = data.draw(st.integers(0, n))
    c = data.draw(st.integers(0, n - b))
    base = np.array([1.0] * b + [0.0] * c + [1.0] * (n - b - c))
    cand = np.array([0.0] * b + [1.0] * c + [1.0] * (n - b - c))
    t = paired_test(base, cand, None, 0.95)
    if abs(limit - t.high) > 1e-6:
        assert (t.p_within(limit) < 0.05) == (limit > t.high), (b, c, n, limit, t.high, t.p_within(limit))
    if abs(limit - t.low) > 1e-6:
        assert (t.p_exceeds(limit) < 0.05) == (limit < t.low), (b, c, n, limit, t.low, t.p_exceeds(limit))


def test_the_nuisance_sup_is_found_on_a_fine_grid():
    """The p maximises over the share of answers that change on a coarse grid refined around its best
    points: no value of a 2,000-point grid over the Berger-Boos interval lies above it."""
    for b, c, n, delta in ((0, 0, 59, 0.05), (3, 1, 133, 0.02), (2, 2, 25, 0.10), (10, 4, 300, 0.02), (1, 0, 8, 0.3)):
        found = exact.p_at_least(b, c, n, delta)
        q_lo, q_hi = exact._nuisance(c, n, delta)
        t_obs = float(exact.tango_vec(np.array([b]), np.array([c]), n, delta)[0])
        m = exact._counts(n, 2 * q_lo + delta, min(2 * q_hi + delta, 1.0))
        k = exact._cutoffs(t_obs, n, delta, m)
        fine = max(exact._tail(q, n, delta, m, k) for q in np.linspace(q_lo, q_hi, 2000)) + exact._GAMMA
        assert found >= fine - 1e-9, (b, c, n, delta, found, fine)
