"""How a latency pass was timed, and when two passes compare: the record (core.types.TimingCondition),
the idle wait that reads NVML (memory.cuda.wait_idle), and the interval of a change from the repeats
(stats.timing.ratio_test) that the gate's latency checks use."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from evalsuite.core.types import InFlight, Metric, Placement, TimingCondition, VariantResult, timing_unlike
from evalsuite.memory.cuda import wait_idle
from evalsuite.stats.timing import latency_key, mw_cdf, ratio_test


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def test_the_wait_for_an_idle_card_outlasts_a_paused_neighbours_queued_kernels():
    """SIGSTOP leaves a neighbour's queued prefill running: NVML reads it busy for a while, then 0; the
    wait ends once it has read 0 throughout a second, and says how long the card took to drain."""
    clock = Clock()
    busy_until = 0.75
    found = wait_idle(lambda: 100.0 if clock.t < busy_until else 0.0, clock=clock, sleep=clock.sleep)
    assert found.ok is True and found.waited_s == pytest.approx(0.8) and set(found.readings) == {0.0}
    clock = Clock()
    never = wait_idle(lambda: 35.0, timeout_s=3.0, clock=clock, sleep=clock.sleep)
    assert never.ok is False and never.waited_s >= 3.0 and never.readings[-1] == 35.0
    clock = Clock()  # a blip of work inside the quiet second starts the second again
    blips = iter([0, 0, 0, 50, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])
    found = wait_idle(lambda: float(next(blips)), clock=clock, sleep=clock.sleep)
    assert found.ok is True and found.waited_s == pytest.approx(0.4)
    assert wait_idle(lambda: None).ok is None  # a card that reports no utilization: not checked


def test_an_older_record_says_how_it_was_timed_from_its_placement():
    latency = [Metric(name="latency/ttft_ms_p50", value=10.0)]
    alone = VariantResult(variant="a", metrics=latency)
    assert alone.timed_as().neighbours == "none" and alone.timed_as().derived and alone.timed_as().warmup == 0
    paused = VariantResult(variant="b", metrics=latency, placement=Placement(
        parallel="auto", ran_with=["a"], latency="pause", paused_for_latency=["a"]))
    assert paused.timed_as().neighbours == "paused" and paused.timed_as().idle_ok is None
    assert "not verified idle" in paused.timed_as().doubt()
    beside = VariantResult(variant="c", metrics=latency, placement=Placement(parallel=2, ran_with=["a"]))
    assert beside.timed_as().neighbours == "running"
    restarted = VariantResult(variant="d", metrics=latency, placement=Placement(parallel=2, ran_with=["a"],
                                                                                engine_alone=True))
    assert restarted.timed_as().neighbours == "none"
    assert VariantResult(variant="e").timed_as() is None  # no latency pass
    assert timing_unlike(alone.timed_as(), restarted.timed_as()) is None  # two older records alone: as before


def test_passes_compare_only_where_nothing_that_moves_a_timing_differs():
    idle = TimingCondition(neighbours="none", idle="nvml", idle_ok=True, warmup=2, repeats=10, engine="offline",
                           device="NVIDIA H100 80GB HBM3")
    drained = idle.model_copy(update={"neighbours": "paused", "drain_s": 0.8,
                                      "paused": {"kv_fp8": InFlight(task="ruler", requests=12, longest_prompt=32768)}})
    assert timing_unlike(idle, drained) is None and timing_unlike(drained, idle) is None
    assert drained.describe() == "1 paused, idle after 0.8 s (nvml), 2 warm-up x 10"
    undrained = drained.model_copy(update={"idle": None, "idle_ok": None})
    assert timing_unlike(idle, undrained).startswith("the candidate neighbours paused but the device not verified idle")
    assert timing_unlike(undrained, idle).startswith("the baseline neighbours paused")
    busy = idle.model_copy(update={"idle_ok": False, "utilization_pct": [37.0], "drain_s": 30.0})
    assert timing_unlike(idle, busy) == "the candidate the device was not found idle (nvml, 37% busy after 30.0 s)"
    for key, value, what in (("device", "NVIDIA H200", "devices"), ("engine", "server", "engine modes"),
                             ("warmup", 0, "warm-ups"), ("cores", 4, "CPU cores")):
        assert timing_unlike(idle, idle.model_copy(update={key: value})).startswith(f"timed with other {what}")
    assert timing_unlike(idle, idle.model_copy(update={"repeats": 3})) is None  # fewer repeats: a wider interval
    no_nvml = idle.model_copy(update={"idle": None, "idle_ok": None})
    assert timing_unlike(idle, no_nvml) is None  # alone where NVML cannot read the card: nothing beside it


def test_mann_whitney_null_counts_are_exact():
    for n, m in ((1, 4), (3, 3), (4, 5), (2, 7), (5, 5)):
        counts = np.zeros(n * m + 1)
        for b in itertools.combinations(range(n + m), n):
            c = [v for v in range(n + m) if v not in b]
            counts[sum(x > y for x in c for y in b)] += 1
        assert np.allclose(np.cumsum(counts) / counts.sum(), mw_cdf(n, m)), (n, m)
    assert mw_cdf(30, 30) is None  # beyond float64's exact counts: the normal approximation


def test_a_median_ratio_interval_from_few_repeats():
    """At 3 a side the 95% bounds are the extreme pairwise ratios (Mann-Whitney's smallest p, 1/20, is
    alpha); at 2 a side no 95% interval exists; identical repeats bound the ratio at exactly 1; a cold
    first repeat moves the median's interval by a rank, not by its size."""
    t = ratio_test([10.0, 11.0, 12.0], [20.0, 21.0, 22.0], 0.95)
    assert t.low == pytest.approx(20 / 12) and t.high == pytest.approx(22 / 10) and t.ratio == pytest.approx(21 / 11)
    assert ratio_test([10.0, 11.0], [20.0, 21.0], 0.95) is None
    same = ratio_test([2.0] * 5, [2.0] * 5, 0.95)
    assert (same.low, same.high) == (1.0, 1.0) and same.p_below(1.25) < 0.05 and same.p_above(1.25) == 1.0
    warm = [2.36, 2.25, 2.25, 2.61, 2.51, 2.30, 2.40, 2.28, 2.33, 2.45]
    cold = [13.68, 7.49, 2.38, 2.37, 2.31, 2.29, 2.42, 2.35, 2.27, 2.39]
    t = ratio_test(warm, cold, 0.95)
    assert 0.9 < t.low < 1.0 < t.high < 1.1  # two cold repeats of ten: no change shown either way
    assert ratio_test([1.0, 2.0, 0.0], [1.0, 2.0, 3.0], 0.95) is None  # a zero time is no timing


def test_the_median_interval_holds_its_level_under_no_change():
    """Under no change (both sides from one distribution) a one-sided 95% bound excludes 1 at most 5% of
    the time, at 3, 5 and 10 repeats a side: the Hodges-Lehmann bound is exact for continuous times."""
    rng = np.random.default_rng(7)
    for n in (3, 5, 10):
        above = sum(ratio_test(b, c, 0.95).low > 1 for b, c in
                    (rng.lognormal(1.0, 0.3, (2, n)) for _ in range(1000)))
        assert above / 1000 <= 0.05 + 3 * (0.05 * 0.95 / 1000) ** 0.5, n


def test_other_statistics_get_a_bootstrap_interval_and_names_parse():
    b = list(np.linspace(10, 12, 20))
    t = ratio_test(b, [x * 1.5 for x in b], 0.95, "p90")
    assert t.low > 1.3 and t.ratio == pytest.approx(1.5) and "bootstrap" in t.method
    assert t.p_above(1.25) < 0.05 and t.p_below(1.25) > 0.5
    assert latency_key("latency/itl_ms_p50/ctx1024") == ("itl_ms", "p50")
    assert latency_key("latency/decode_tok_per_s_mean") == ("decode_tok_per_s", "mean")
    assert latency_key("latency/wall_s") is None and latency_key("needle/acc") is None
