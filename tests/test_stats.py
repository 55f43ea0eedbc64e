"""The statistics the gate and compare trust: known answers first, then properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import minimize_scalar
from scipy.stats import bootstrap, norm
from statsmodels.stats.contingency_tables import mcnemar

from evalsuite.core.types import Metric, MetricKind, Score
from evalsuite.stats.metrics import (accuracy, accuracy_interval, interval_metrics, latency_summary, macro_accuracy,
                                     min_samples)
from evalsuite.stats.significance import (
    best_case_bound,
    bootstrap_test,
    holm,
    items_needed,
    mcnemar_worse_p,
    paired_test,
    planned_se,
    resolvable_drop,
    stratum_weights,
    tango_bounds,
    tango_statistic,
    wilson,
)

Z95 = norm.ppf(0.95)


def pair_arrays(n: int, lost: int, gained: int, right: int) -> tuple[np.ndarray, np.ndarray]:
    """Baseline/candidate 0/1 scores with `lost` items only the baseline got, `gained` only the candidate."""
    base = np.array([1] * lost + [0] * gained + [1] * right + [0] * (n - lost - gained - right), float)
    cand = np.array([0] * lost + [1] * gained + [1] * right + [0] * (n - lost - gained - right), float)
    return base, cand


# ---------------------------------------------------------------- known answers


@pytest.mark.parametrize(("b", "c", "one_sided"), [
    (9, 0, 1 / 512),  # all 9 changed items lost: 0.5^9
    (7, 2, (36 + 9 + 1) / 512),  # P(X >= 7), X ~ Bin(9, 1/2): (C(9,7) + C(9,8) + C(9,9)) / 2^9
    (3, 3, 0.65625),  # P(X >= 3), X ~ Bin(6, 1/2) = 42/64
    (0, 0, 1.0),  # nothing changed: no evidence
])
def test_exact_mcnemar_against_hand_computed_binomials(b, c, one_sided):
    assert mcnemar_worse_p(b, c) == pytest.approx(one_sided, rel=1e-12)
    if b > c:  # statsmodels' exact McNemar is two-sided: twice the smaller tail
        two_sided = mcnemar([[50, b], [c, 50]], exact=True).pvalue
        assert two_sided == pytest.approx(2 * one_sided, rel=1e-12)


@pytest.mark.parametrize(("x", "n", "low", "high"), [
    (81, 263, 0.2553, 0.3662),  # Newcombe (1998), Stat Med 17:857, the Wilson (score) interval examples
    (15, 148, 0.0624, 0.1605),
    (0, 20, 0.0, 0.1611),
    (1, 29, 0.0061, 0.1718),
    (29, 29, 0.8830, 1.0),
])
def test_wilson_against_documented_values(x, n, low, high):
    got = wilson(x, n, 0.95)
    assert got == (pytest.approx(low, abs=5e-5), pytest.approx(high, abs=5e-5))


def test_holm_against_hand_examples():
    # sorted p x (k - rank), then running max: 0.01*3, 0.03*2, max(0.04*1, 0.06)
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.005, 0.011, 0.02, 0.04, 0.13]) == pytest.approx([0.025, 0.044, 0.06, 0.08, 0.13])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert holm([0.01, math.nan]) == [pytest.approx(0.01), pytest.approx(math.nan, nan_ok=True)]


def _brute_force_statistic(b: int, c: int, n: int, d: float) -> float:
    """Tango's statistic with the constrained MLE found numerically instead of by the quadratic."""
    m = n - b - c

    def nll(q):
        return -(b * math.log(q + d) + c * math.log(q) + m * math.log(1 - 2 * q - d))

    q = minimize_scalar(nll, bounds=(max(0, -d) + 1e-12, (1 - d) / 2 - 1e-12), method="bounded",
                        options={"xatol": 1e-13}).x
    return (b - c - n * d) / math.sqrt(n * (2 * q + d * (1 - d)))


@pytest.mark.parametrize(("b", "c", "n", "d"), [(9, 0, 10, 0.5), (2, 0, 200, 0.02), (5, 3, 40, -0.1),
                                                (20, 10, 100, 0.2), (3, 7, 50, 0.05)])
def test_tango_statistic_matches_a_numerical_mle(b, c, n, d):
    assert tango_statistic(b, c, n, d) == pytest.approx(_brute_force_statistic(b, c, n, d), rel=1e-6)


def test_tango_at_zero_is_mcnemars_statistic():
    for b, c in [(10, 3), (1, 7), (40, 40)]:
        chi2 = mcnemar([[80, b], [c, 80]], exact=False, correction=False).statistic
        assert tango_statistic(b, c, 200, 0.0) ** 2 == pytest.approx(chi2)


def test_bounds_with_nothing_changed_have_a_closed_form():
    """Tango's asymptotic bound is z^2 / (n + z^2); the exact one (the gate's floor) is the drop at
    which losing none of n items has probability alpha: 1 - alpha^(1/n), wider at every n."""
    for n in (10, 100, 1000):
        low, high = tango_bounds(0, 0, n, 0.95)
        assert high == pytest.approx(Z95**2 / (n + Z95**2), abs=1e-9)
        assert low == pytest.approx(-high, abs=1e-9)
        assert best_case_bound(n, 0.95) == pytest.approx(1 - 0.05 ** (1 / n), abs=1e-5)  # + 1e-6 (Berger-Boos)
        assert best_case_bound(n, 0.95) > high


def test_the_h200_needle_case_stays_a_difference_of_proportions():
    # 9 of 10 needle items lost: a Wald interval said +73.6..+106.5 points; a drop cannot exceed 100
    base, cand = pair_arrays(10, lost=9, gained=0, right=1)
    t = paired_test(base, cand, None, 0.95)
    assert t.method == "exact unconditional test on Tango's statistic; exact McNemar" and t.counts == (9, 0)
    assert t.drop == pytest.approx(0.9)
    assert 0 < t.low < t.drop < t.high <= 1
    assert t.p_worse == pytest.approx(1 / 512)
    everything = paired_test(*pair_arrays(10, lost=10, gained=0, right=0), None, 0.95)
    assert everything.high == 1.0 and everything.low < 1.0


def test_bootstrap_agrees_with_scipy():
    rng = np.random.default_rng(3)
    base = rng.choice([0.0, 0.5, 1.0], 80)
    cand = base.copy()
    cand[:9], cand[9:12] = 0.0, 1.0
    keys = [("a",)] * 30 + [("b",)] * 50
    ours = bootstrap_test(base - cand, keys, 0.95)  # scores outside [0, 1] take this path
    assert ours.method.startswith("paired bootstrap within 2 strata")
    d = base - cand
    ref = bootstrap((d[:30], d[30:]), lambda x, y, axis=-1: (x.mean(axis=axis) + y.mean(axis=axis)) / 2,
                    n_resamples=20000, method="percentile", confidence_level=0.90, rng=np.random.default_rng(5))
    assert ours.drop == pytest.approx((d[:30].mean() + d[30:].mean()) / 2)
    assert ours.low == pytest.approx(ref.confidence_interval.low, abs=0.01)
    assert ours.high == pytest.approx(ref.confidence_interval.high, abs=0.01)
    assert ours.se == pytest.approx(np.std(ref.bootstrap_distribution), rel=0.05)


def test_stratum_weights_reproduce_balanced_accuracy():
    # task a: 2 "Yes" items, 1 "No"; task b: 1 "Yes": mean over tasks of mean recall per label
    keys = [("a", "Yes"), ("a", "Yes"), ("a", "No"), ("b", "Yes")]
    assert stratum_weights(keys) == pytest.approx([1 / 8, 1 / 8, 1 / 4, 1 / 2])
    values = np.array([1.0, 0.0, 1.0, 1.0])
    balanced = ((0.5 + 1.0) / 2 + 1.0) / 2
    assert float(np.dot(stratum_weights(keys), values)) == pytest.approx(balanced)
    assert stratum_weights([(), (), ()]) == pytest.approx([1 / 3] * 3)


def test_resolution_and_items_needed_invert_each_other():
    # 5% of answers changing: a 1-point limit needs (1.645 + 0.842)^2 * 0.05 / 0.01^2 = 3,092 items
    n = items_needed(0.01, 0.05, 0.95, 0.8)
    assert n == math.ceil((Z95 + norm.ppf(0.8)) ** 2 * 0.05 / 0.01**2)
    assert resolvable_drop(n, planned_se(n, 0.05), 0.95, 0.8) == pytest.approx(0.01, rel=1e-3)
    # with nothing changing the exact floor rules: n >= log(alpha) / log(1 - L)
    assert items_needed(0.10, 0.0, 0.95, 0.8) == math.ceil(math.log(0.05) / math.log(0.9)) == 29


def test_wilson_interval_metrics_for_mlflow():
    scores = [Score(sample_id=str(i), task="mmlu", value=float(i < 81), pred="", target="") for i in range(263)]
    m = accuracy(scores, "mmlu/acc")
    extra = interval_metrics([m, Metric(name="mmlu/acc/stem", value=0.5, n=10), Metric(name="mmlu/wall_s", value=1.0)])
    assert [(e.name, round(e.value, 4)) for e in extra] == [("mmlu/acc_ci95_low", 0.2553), ("mmlu/acc_ci95_high", 0.3662)]
    # a macro or balanced mean has no single count: the normal interval from its stderr, kept in [0, 1]
    assert accuracy_interval(Metric(name="legal/balanced_acc", value=0.98, stderr=0.02, n=50)) == (
        pytest.approx(0.98 - 1.96 * 0.02, abs=1e-3), 1.0)


def test_a_partial_credit_mean_at_a_bound_keeps_the_uncertainty_of_its_n():
    """RULER's score is a mean of partial credit; a task where all 12 items scored 1 (or 0) has a zero
    standard error, and 12 items cannot make its interval a point: Wilson's for 12 of 12 (0 of 12)."""
    for value in (1.0, 0.0):
        scores = [Score(sample_id=str(i), task="ruler", value=value, pred="", target="") for i in range(12)]
        m = accuracy(scores, "ruler/score/niah_single_1_len65536", kind=MetricKind.mean)
        assert m.stderr == 0
        assert accuracy_interval(m) == pytest.approx(wilson(12 * value, 12, 0.95))
    low, high = accuracy_interval(m)
    assert high == pytest.approx(0.2425, abs=1e-4) and low == pytest.approx(0.0, abs=1e-12)
    # partial credit between the bounds keeps the normal interval of its stderr
    mixed = accuracy([Score(sample_id=str(i), task="ruler", value=v, pred="", target="")
                      for i, v in enumerate([1.0, 0.5] * 6)], "ruler/score", kind=MetricKind.mean)
    assert accuracy_interval(mixed) == pytest.approx((0.75 - 1.96 * mixed.stderr, 0.75 + 1.96 * mixed.stderr), abs=1e-3)


def _exact_macro_coverage(sizes: tuple[int, ...], p: float) -> float:
    """P(the macro accuracy's 95% interval holds p) over every outcome of strata of `sizes` 0/1 items
    each at true accuracy p: exact, by enumerating each stratum's count."""
    from itertools import product

    from scipy.stats import binom

    covered = 0.0
    for counts in product(*(range(n + 1) for n in sizes)):
        groups = {str(g): [Score(sample_id=f"{g}-{i}", task="mmlu", value=float(i < x), pred="", target="")
                           for i in range(n)] for g, (x, n) in enumerate(zip(counts, sizes))}
        low, high = accuracy_interval(macro_accuracy(groups, "mmlu/acc_macro"))
        if low <= p <= high:
            covered += math.prod(binom.pmf(x, n, p) for x, n in zip(counts, sizes))
    return covered


@pytest.mark.parametrize(("sizes", "p"), [((2,) * 6, 0.5), ((2,) * 6, 0.4), ((5,) * 4, 0.5), ((10,) * 3, 0.3),
                                          ((2, 2, 2, 3), 0.3), ((5, 5, 5, 6), 0.5), ((3, 4), 0.5)])
def test_a_macro_interval_over_small_strata_keeps_its_coverage(sizes, p):
    """A `--limit 2` MMLU run over 6 subjects: the normal interval held the truth in 61% of runs when
    each stratum's variance was divided by n + z^2 instead of its n items. Wilson per stratum combined
    by MOVER held 86-89% at unequal strata such as these; this interval 92-96% (no method keeps 95%
    at every p with a few items a stratum)."""
    assert _exact_macro_coverage(sizes, p) >= 0.92


def test_check_and_the_run_table_draw_one_interval_for_a_balanced_accuracy():
    """`check` draws it from the items (score_interval), the table from the metric's stderr."""
    from evalsuite.stats.significance import score_interval, stratum_weights
    from evalsuite.tasks.balanced import balanced_metrics

    scores = [Score(sample_id=f"{g}{t}{i}", task="legal", value=float((i + len(g)) % 3 > 0), pred="", target=t,
                    group=g) for g in ("a", "bb") for t in ("Yes", "No") for i in range(4 if t == "Yes" else 2)]
    head = balanced_metrics(scores, "legal")[0]
    keys, values = [(s.group, s.target) for s in scores], [s.value for s in scores]
    low, high, method = score_interval(values, keys, 0.95)
    assert head.name == "legal/balanced_acc" and head.value == pytest.approx(stratum_weights(keys) @ values)
    assert accuracy_interval(head) == pytest.approx((low, high)) and "fixed strata" in method


def test_tail_percentiles_need_enough_samples():
    assert [min_samples(q) for q in (50, 90, 99)] == [1, 10, 100]
    names = [m.name for m in latency_summary([1.0] * 99, "latency/ttft_ms")]
    assert names == ["latency/ttft_ms_mean", "latency/ttft_ms_p50", "latency/ttft_ms_p90"]
    assert "latency/ttft_ms_p99" in [m.name for m in latency_summary([1.0] * 100, "latency/ttft_ms")]
    assert [m.name for m in latency_summary([5.0], "x")] == ["x_mean", "x_p50"]


# ---------------------------------------------------------------- properties


def _random_case(seed: int):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 400))
    binary = seed % 2 == 0
    base = rng.integers(0, 2, n).astype(float) if binary else rng.choice([0.0, 1 / 3, 2 / 3, 1.0], n)
    cand = np.where(rng.random(n) < rng.uniform(0, 0.3), rng.permutation(base), base)
    keys = [(str(i % 3), str(int(base[i] > 0.5))) for i in range(n)] if seed % 3 == 0 else None
    return base, cand, keys


@pytest.mark.parametrize("seed", range(12))
def test_identical_scores_show_no_drop(seed):
    base, _, keys = _random_case(seed)
    t = paired_test(base, base, keys, 0.95)
    assert t.drop == 0 and t.low <= 0 <= t.high and t.p_worse == 1.0
    # the drop is shown to be within any limit the n can resolve
    limit = best_case_bound(t.n_eff, 0.95) + 1e-9
    assert t.p_within(max(limit, t.high + 1e-9)) < 0.05


@pytest.mark.parametrize("seed", range(12))
def test_swapping_baseline_and_candidate_flips_the_sign(seed):
    base, cand, keys = _random_case(seed)
    ab, ba = paired_test(base, cand, keys, 0.95), paired_test(cand, base, keys, 0.95)
    assert ba.drop == pytest.approx(-ab.drop, abs=1e-12)
    assert (ba.low, ba.high) == (pytest.approx(-ab.high, abs=1e-8), pytest.approx(-ab.low, abs=1e-8))
    assert ba.method == ab.method
    for limit in (0.0, 0.02, 0.05):
        assert ba.p_exceeds(-limit) == pytest.approx(ab.p_within(limit), abs=1e-9)


def test_a_pairings_means_are_the_metric_on_the_shared_items_and_differ_by_the_tests_drop():
    from evalsuite.stats.paired import pair, paired_result

    base = {f"s{i}": {"value": float(i % 3 != 0), "group": "a" if i < 30 else "b", "target": "x"} for i in range(40)}
    cand = {f"s{i}": {"value": float(i % 4 != 0), "group": "a" if i < 30 else "b", "target": "x"} for i in range(35)}
    p = pair(base, cand, ["group"])  # macro: mean over groups of the group means
    assert p.partial and p.n == 35
    b, c = p.means()
    shared_a, shared_b = [f"s{i}" for i in range(30)], [f"s{i}" for i in range(30, 35)]
    macro = lambda d: (sum(d[s]["value"] for s in shared_a) / 30 + sum(d[s]["value"] for s in shared_b) / 5) / 2  # noqa: E731
    assert (b, c) == pytest.approx((macro(base), macro(cand)))
    assert b - c == pytest.approx(paired_result(p, 0.95).drop)
    assert not pair(cand, cand, ["group"]).partial


def test_compare_gate_and_check_give_one_interval_for_one_pair(tmp_path):
    """One statistics path: for the same pair and level, `compare`'s paired interval, the gate's bounds
    and `check`'s interval are the same numbers (here 200 items, 10 lost, and a stratified metric)."""
    from evalsuite.check import stats as check_stats
    from evalsuite.core.rundir import RunDir
    from evalsuite.report.compare import compare
    from evalsuite.verdict.checks import Pair, accuracy_check
    from evalsuite.verdict.rules import Rule, Rules
    from evalsuite.stats.paired import read_scores
    from tests.mlflow_server import build_run

    run = build_run(tmp_path, "20250101-000000-one", {"bf16": {}, "fp8": {"wrong": range(10)}}, baseline="bf16")
    rd = RunDir(run)
    rec = rd.load_run()
    base, cand = rec.variant("bf16"), rec.variant("fp8")
    shown = compare([(rd, None)], "bf16").paired[("fp8", "mmlu/acc")]  # two-sided 95%, points, cand - base
    rules = Rules.model_validate({"confidence": 0.975, "rules": [{"metrics": "mmlu/acc", "max_drop_points": 2}]})
    gated = accuracy_check(rules, rules.rules[0], "mmlu/acc", Pair(rd, base, rd, cand), "fp8")  # one-sided 97.5%
    acc = base.metric("mmlu/acc")
    checked = check_stats.paired_interval(read_scores(rd, "bf16", acc), read_scores(rd, "fp8", acc),
                                          acc, (base.metric("mmlu/acc").value, cand.metric("mmlu/acc").value), 0.95)
    assert (shown.low, shown.high) == pytest.approx((-gated.high, -gated.low), abs=1e-9)
    assert (shown.low, shown.high) == pytest.approx((checked.low * 100, checked.high * 100), abs=1e-9)
    assert shown.low < -5.0 + 1e-9 < shown.high and shown.method == checked.method.split(": ")[1].split(" (")[0]
    # a stratified metric (macro over two subjects) goes through the same bootstrap in all three
    rule = Rule(metrics=["mmlu/acc"], max_drop_points=2, strata=["group"])
    strat = accuracy_check(rules, rule, "mmlu/acc", Pair(rd, base, rd, cand), "fp8")
    from evalsuite.stats.paired import difference_interval, pairing

    low, high, _ = difference_interval(pairing(rd, "bf16", rd, "fp8", acc, ["group"]), 0.95)
    assert (low * 100, high * 100) == pytest.approx((-strat.high, -strat.low), abs=1e-9)


def test_bootstrap_bound_and_decision_agree_at_every_limit():
    """A limit beyond the printed bootstrap bound is exactly one whose p is below alpha: the bound
    is the replicate where (count + 1) / (R + 1) crosses alpha, not an interpolated quantile."""
    import numpy as np

    from evalsuite.stats.significance import bootstrap_test

    rng = np.random.default_rng(3)
    for _ in range(5):
        t = bootstrap_test(rng.normal(0.0, 0.02, 400), [()] * 400, 0.95)
        for limit in np.linspace(t.high - 2e-4, t.high + 2e-4, 41):
            if abs(limit - t.high) > 1e-12:
                assert (t.p_within(limit) < 0.05) == (limit > t.high)
        for limit in np.linspace(t.low - 2e-4, t.low + 2e-4, 41):
            if abs(limit - t.low) > 1e-12:
                assert (t.p_exceeds(limit) < 0.05) == (limit < t.low)


def test_fractional_and_weighted_scores_keep_the_level_at_the_limit():
    """A true drop exactly at the limit passes at most ~alpha of the time: RULER-like shares lost
    (n=132, 5 pt) and a macro accuracy over unequal strata (400 + 200 items, 2 pt), where a
    percentile bootstrap passed 7-10% of such runs."""
    rng = np.random.default_rng(11)

    def false_passes(n, keys, lose_p, shares, limit, reps=200):
        passed = 0
        for _ in range(reps):
            base, cand = np.ones(n), np.ones(n)
            lose = rng.random(n) < lose_p
            cand[lose] = 1 - rng.choice(shares, size=int(lose.sum()))
            passed += paired_test(base, cand, keys, 0.95).p_within(limit) < 0.05
        return passed / reps

    assert false_passes(132, None, 0.05 / (1.75 / 3), [0.25, 0.5, 1.0], 0.05) <= 0.06
    assert false_passes(600, [("a",)] * 400 + [("b",)] * 200, 0.02, [1.0], 0.02) <= 0.06


def test_one_stratum_of_mover_is_tango_and_wilson_itself():
    """Second method for the combined bounds: with one stratum MOVER adds nothing, so the weighted
    path gives Tango's own bounds (paired) and Wilson's (one variant) on the same 0/1 items."""
    from evalsuite.stats.significance import mover, tango_mover_test, wilson

    base, cand = pair_arrays(300, lost=14, gained=5, right=200)
    t = tango_mover_test(base, cand, [()] * len(base), 0.95)
    assert (t.low, t.high) == pytest.approx(tango_bounds(14, 5, 300, 0.95))
    lo, hi = wilson(120, 200)
    assert mover(0.6, [(1.0, 0.6, lo, hi)]) == pytest.approx((lo, hi))
