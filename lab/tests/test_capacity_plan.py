"""lab/plans/qwen-1.5b-capacity.sh and llama8b-capacity.sh, expanded without a lent machine
(LANES=printf): the 1.5B's ten cells in two runs, each whole on its own, every step behind its time
budget, within the half hour of card; the 8B's six cells in one."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

PLANS = Path(__file__).resolve().parents[2] / "lab" / "plans"


def lanes(plan: str, **env: str) -> list[str]:
    res = subprocess.run(["bash", str(PLANS / plan), "1000", "2000"], capture_output=True, text=True,
                         env={**os.environ, "LANES": "printf [%s]\\n", **env})
    assert res.returncode == 0, res.stderr
    return [line[1:-1] for line in res.stdout.splitlines() if line.startswith("[")]


def steps(lane: str) -> list[tuple[int, str, str, list[str]]]:
    """(budget s, config, run name, variants) per step."""
    out = []
    for step in lane.split(";"):
        m = re.fullmatch(r"\s*STEP_S=(\d+) run (\S+) (\S+) (.+?)\s*", step)
        assert m, step
        out.append((int(m[1]), m[2], m[3], m[4].split()))
    return out


def test_ten_cells_in_two_whole_runs_within_half_an_hour():
    (_, a), (_, b) = lanes("qwen-1.5b-capacity.sh", PART="a"), lanes("qwen-1.5b-capacity.sh", PART="b")
    a, b = steps(a), steps(b)
    assert {s[2] for s in a} == {"capa"} and {s[2] for s in b} == {"capb"}  # one run folder each
    variants = [v for s in a + b for v in s[3]]
    assert variants == ["bf16", "fp8", "kv_fp8", "kv_fp8_skip_layers_0_1_triton_attn", "awq"]
    assert all(s[0] <= 360 for s in a + b if s[3] != ["awq"])  # <= 3 min a length; awq builds its checkpoint first
    assert sum(s[0] for s in a + b) <= 30 * 60 and {s[1] for s in a + b} == {"lab/configs/h200/qwen-1.5b-capacity.yaml"}


def test_the_8b_shape_and_the_bench():
    _, lane = lanes("llama8b-capacity.sh")
    got = steps(lane)
    assert [s[3] for s in got] == [["bf16"], ["fp8"], ["kv_fp8"]] and sum(s[0] for s in got) <= 21 * 60
    assert got[0][1] == "lab/configs/llama8b-dummy-capacity.yaml"
    _, bench = lanes("qwen-1.5b-capacity.sh", PART="bench")
    assert bench.startswith("STEP_S=480 py capsearch bench/capacity_search.py ") and "--spot" in bench


def test_an_unknown_part_is_refused():
    res = subprocess.run(["bash", str(PLANS / "qwen-1.5b-capacity.sh"), "1", "2"], capture_output=True, text=True,
                         env={**os.environ, "LANES": "printf [%s]\\n", "PART": "c"})
    assert res.returncode == 2 and "PART: a, b, bench" in res.stderr
