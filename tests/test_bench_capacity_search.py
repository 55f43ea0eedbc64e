"""bench/capacity_search.py's reading of its two sides without an engine: the spot check's levels
around the search's bracket, the sweep's time estimated from measured rates, and the RESULT line
(same_bracket only where the sweep, or its spot check read from the bottom up, agrees). The bench
itself runs a server and minutes of levels: its numbers are in docs/benchmarks.md, not a test."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import capacity_search  # noqa: E402

from evalsuite.capacity.sweep import Bracket, Level, judge  # noqa: E402

SLO = {"ttft_p90_ms": 1000.0}
GRID = [1.0, 2.0, 3.0, 4.0, 6.0, 8.0]


def level(x: float, met: bool, rate: float = 1.0) -> Level:
    return judge(Level(length=32, output_tokens=64, mode="concurrency", level=x, requests=100, slo=SLO, completed=100,
                       req_per_s=rate, percentiles={"ttft": {"90": 100.0 if met else 5000.0}}))


def test_spot_levels_around_the_bracket():
    assert capacity_search.spot_levels(GRID, Bracket(length=32, mode="concurrency", levels=GRID, at_slo=4, broke_at=6)) \
        == [3, 4, 6]
    assert capacity_search.spot_levels(GRID, Bracket(length=32, mode="concurrency", levels=GRID, at_slo=0, broke_at=1)) \
        == [1]
    assert capacity_search.spot_levels(GRID, Bracket(length=32, mode="concurrency", levels=GRID, at_slo=8)) == [6, 8]


def test_the_sweeps_time_from_measured_rates():
    args = SimpleNamespace(requests=100)
    est = capacity_search.sweep_estimate(args, GRID, 6.0, [level(1, True, 1.0), level(4, True, 4.0)])
    # 1..8 (one past the break): 100/1 + 100/2 + 100/3 + 100/4 and 100/4 twice above the last measured
    assert est == pytest.approx(100 + 50 + 100 / 3 + 25 * 3)


def test_the_result_line_says_whether_the_brackets_agree(capsys):
    args = SimpleNamespace(prompt_tokens=32, output_tokens=64, step=2 ** 0.5, requests=100)
    found = Bracket(length=32, mode="concurrency", levels=GRID, at_slo=4, broke_at=6, searched=True)
    search = (10.0, [level(4, True, 4.0), level(6, False, 4.0)], found)
    swept = Bracket(length=32, mode="concurrency", levels=GRID, at_slo=4, broke_at=6)
    capacity_search.report(args, "cpu", SLO, GRID, search, (200.0, [], swept), None, [1.0])
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("RESULT bench=capacity_search mode=cpu ") and " search=[4,6) sweep=[4,6) " in line
    assert " same_bracket=1 time_ratio=0.050 " in line
    spot = [level(3, True, 3.0), level(4, False, 4.0), level(6, False, 4.0)]  # the sweep's own 4 missed
    capacity_search.report(args, "gpu", SLO, GRID, search, (30.0, spot, swept), [3, 4, 6], [1.0])
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert " sweep=spot3,4,6 " in line and " same_bracket=0 " in line and " sweep_s_est=" in line
