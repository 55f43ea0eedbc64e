"""The GPU-idle share a run and bench/decision_wall.py report: pure logic on fake readings and clocks."""

import math
import time

import pytest

from evalsuite.memory.busy import BusySampler, idle_share, mean_share


def test_idle_share_is_time_weighted_over_the_wall():
    # 0-1 s fully busy, 1-3 s idle, 3-4 s half busy: idle 2 + 0.5 of 4 s
    readings = [(1.0, 100.0), (3.0, 0.0), (4.0, 50.0)]
    assert idle_share(readings, 0.0, 4.0) == pytest.approx(2.5 / 4)


def test_idle_share_clips_to_the_wall_and_leaves_out_what_no_reading_covers():
    readings = [(-1.0, 0.0), (2.0, 100.0), (10.0, 0.0)]
    # inside [0, 4]: 0-2 busy (the reading at 2 covers it), 2-4 idle (the reading at 10 covers it, clipped)
    assert idle_share(readings, 0.0, 4.0) == pytest.approx(0.5)
    assert idle_share([(1.0, 0.0)], 0.0, 4.0) == pytest.approx(1.0)  # 1-4 s has no reading: not guessed busy
    assert idle_share([], 0.0, 4.0) is None
    assert idle_share([(5.0, 0.0), (6.0, 0.0)], 0.0, 4.0) == pytest.approx(1.0)  # the first one after covers 0-4


def test_idle_share_bounds_odd_readings():
    assert idle_share([(1.0, 130.0)], 0.0, 1.0) == 0.0
    assert idle_share([(1.0, -5.0)], 0.0, 1.0) == 1.0


def test_mean_share_over_cards_skips_cards_without_readings():
    assert mean_share([0.2, None, 0.4]) == pytest.approx(0.3)
    assert mean_share([None, float("nan")]) is None


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_sampler_reads_every_card_and_reports_the_mean_idle_share():
    clock = Clock()
    values = {"0": iter([100.0, 100.0, 0.0, 0.0]), "1": iter([0.0, None, 0.0, 0.0])}
    s = BusySampler({k: (lambda it=it: next(it)) for k, it in values.items()}, clock=clock)
    s.start = clock()
    for t in (1.0, 2.0, 3.0, 4.0):
        clock.t = t
        s.sample()
    s.end = 4.0
    got = s.result()
    assert got.sampled == "nvml" and got.devices == ["0", "1"] and got.readings == 7
    assert got.wall_s == 4.0
    assert got.gpu_idle_frac == pytest.approx((0.5 + 1.0) / 2)


def test_sampler_survives_a_reader_that_raises():
    def broken():
        raise RuntimeError("gone")
    s = BusySampler({"0": broken}, clock=Clock())
    s.sample()
    got = s.result()
    assert got.gpu_idle_frac is None and got.sampled == "nvml: no reading"


def test_without_cards_nothing_is_made_up():
    clock = Clock()
    with BusySampler({}, "no GPU", clock=clock) as s:
        clock.t = 7.0
    got = s.result()
    assert got.gpu_idle_frac is None and got.sampled == "no GPU" and got.wall_s == 7.0
    assert not math.isnan(got.wall_s)


def test_the_thread_samples_until_exit():
    calls = []
    with BusySampler({"0": lambda: calls.append(1) or 0.0}, interval_s=0.001) as s:
        while len(calls) < 3:
            time.sleep(0.001)
    assert s.result().gpu_idle_frac == pytest.approx(1.0)


def test_on_this_machine_the_sampler_says_why_not_when_nvml_is_absent():
    from evalsuite.memory.busy import gpu_sampler
    from evalsuite.memory.cuda import nvml_missing

    s = gpu_sampler()
    if nvml_missing():
        assert not s.readers and s.why == nvml_missing()


def test_a_resumed_runs_wall_adds_each_invocations_and_weights_their_shares():
    from evalsuite.memory.busy import Busy, recorded

    first = recorded(Busy(100.0, 0.5, "nvml", ["0"], 400))
    both = recorded(Busy(300.0, 0.1, "nvml", ["0"], 1200), first)
    assert both.wall_s == 400.0 and both.gpu_idle_frac == pytest.approx((50 + 30) / 400) and both.readings == 1600
    unsampled = recorded(Busy(50.0, None, "no GPU"), first)  # one invocation without a card: no share for the sum
    assert unsampled.wall_s == 150.0 and unsampled.gpu_idle_frac is None and unsampled.sampled == "no GPU"
    assert unsampled.idle_text() == "not sampled (no GPU)" and first.idle_text() == "50.0%"
