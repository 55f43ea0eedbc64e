"""lab/plans/qwen-1.5b-decision.sh, expanded without a lent machine (LANES=printf): the steps in the
order that leaves something whole at any cut, each behind its estimate, and the control's lane."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

PLAN = Path(__file__).resolve().parents[2] / "lab" / "plans" / "qwen-1.5b-decision.sh"


def lanes(**env: str) -> list[str]:
    res = subprocess.run(["bash", str(PLAN), "1000", "2000"], capture_output=True, text=True,
                         env={**os.environ, "LANES": "printf [%s]\\n", **env})
    assert res.returncode == 0, res.stderr
    return [line[1:-1] for line in res.stdout.splitlines() if line.startswith("[")]


def test_one_lane_curve_then_the_decision_then_the_rest_each_behind_its_estimate():
    deadline, lane = lanes()
    assert deadline == str(1000 + 2000 - 150)
    steps = [s.strip() for s in lane.split(";")]
    names = [s.split("&&")[-1].split()[1] for s in steps]
    assert names == ["curve", "dw", "lp", "dws", "lab/configs/h200/qwen-1.5b-ruler-64k-single.yaml", "dwb"]
    assert all(s.startswith("[ $(left) -gt ") for s in steps)
    assert "--save" in steps[0] and "--fresh-cache --cache-root /root/fresh-dw " in steps[1]
    assert steps[1].endswith("-- --limit 30") and steps[3].endswith("-- --limit 30 --stop decided")
    assert "grep -q -- --stop" in steps[3] and "--full $(ls -d runs/h200/dw/work/runs/*/" in steps[3]
    assert "qwen-1.5b-decision-before.yaml" in steps[5] and steps[1].count("-V ") == 8
    assert "bench/latency_pause.py lab/configs/h200/qwen-1.5b-latency-pause.yaml" in steps[2]


def test_the_control_beside_is_a_second_lane_and_full_items_drop_the_limit():
    deadline, first, second = lanes(CONTROL="beside")
    assert "ruler-64k-single" not in first and second.startswith("run lab/configs/h200/qwen-1.5b-ruler-64k-single.yaml")
    (_, lane) = lanes(CONTROL="no", ITEMS="full")
    assert "ruler-64k-single" not in lane and "--limit" not in lane


def test_the_wall_before_and_after_are_one_step_a_lease_on_the_same_config():
    deadline, before = lanes(PART="wall-before")
    assert before.startswith("[ $(left) -gt 1260 ] && py dwb71 bench/decision_wall.py "
                             "lab/configs/h200/qwen-1.5b-decision-wall.yaml ")
    assert "--before-only --before-src lab/before -- --stop decided" in before and before.count("-V ") == 8
    deadline, after = lanes(PART="wall-after")
    assert after.startswith("[ $(left) -gt 1080 ] && py dwa71 ") and after.endswith("-- --stop decided")
    assert "--before" not in after  # no lab/before/bench.log here: before_s=nan, never a made-up one
    res = subprocess.run(["bash", str(PLAN), "1000", "2000"], capture_output=True, text=True,
                         env={**os.environ, "LANES": "printf [%s]\\n", "PART": "other"})
    assert res.returncode == 2 and "PART: wall-before, wall-after or unset" in res.stderr


def test_the_before_tree_is_a_commit_of_this_repository(tmp_path):
    res = subprocess.run(["bash", str(PLAN), "before-tree"], capture_output=True, text=True,
                         env={k: v for k, v in os.environ.items() if k != "BEFORE"})
    assert res.returncode == 2 and "BEFORE: the commit to measure against" in res.stderr
