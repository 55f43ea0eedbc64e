"""lab/plans/qwen-1.5b-ruler-rest.sh without a lent machine: its budget (BUDGET=1) from the kept scores'
counts and one lease's figures, and its lanes (LANES=printf) in order of value, whole steps behind
twice their estimate, steps with every item kept left out."""

from __future__ import annotations

import gzip
import os
import re
import subprocess
from pathlib import Path

PLAN = Path(__file__).resolve().parents[2] / "lab" / "plans" / "qwen-1.5b-ruler-rest.sh"
INT8 = "kv_int8_per_token_head"


def keep(results: Path, folder: str, variant: str, task: str, n: int) -> None:
    d = results / folder / variant
    d.mkdir(parents=True, exist_ok=True)
    with gzip.open(d / f"{task}.scores.jsonl.gz", "wt") as f:
        f.writelines(f'{{"sample_id": "{task}-{i}"}}\n' for i in range(n))


def as_published(results: Path) -> Path:
    """The counts the 1.5B page's kept scores hold: INT8 whole at 4K-32K, 128 of its 150 contract
    questions, 32 of its 132 items at 64K, none at 128K; no control."""
    keep(results, "scores-ruler", INT8, "ruler", 528)
    keep(results, "scores-ruler", INT8, "legal_long_multi", 128)
    keep(results, "scores-ruler-64k", INT8, "ruler", 32)
    keep(results, "scores-ruler-64k", "bf16", "ruler", 132)
    return results


def plan(results: Path, **env: str) -> list[str]:
    res = subprocess.run(["bash", str(PLAN), "1000", "1800"], capture_output=True, text=True,
                         env={**os.environ, "RESULTS_DIR": str(results), **env})
    assert res.returncode == 0, res.stderr
    return res.stdout.splitlines()


def test_one_lease_holds_both_whole_steps_and_the_rest_resumes_lease_by_lease(tmp_path):
    """The figures the plan's comment sources: a run's start 120 s, a 64K item on Triton 7 s, INT8's
    32K question 3 s, its 64K item 24 s and 128K item 93 s; 1,370 s of lanes a lease."""
    out = plan(as_published(tmp_path), BUDGET="1")
    assert out[0].endswith("= 1370 s")  # 1,800 s less carrying 190, setup 90 and the 150 s margin
    steps = {m[1]: (m[2], int(m[3]), int(m[4])) for m in (re.match(r"step (\S+) lane \d (\S+): (\d+) items .* = (\d+) s", line)
                                                           for line in out) if m}
    assert steps == {"c64": ("whole", 36, 120 + 36 * 7), "r4i": ("whole", 22, 120 + 22 * 3),
                     "l64": ("resumable", 100, 120 + 100 * 24), "l128": ("resumable", 132, 120 + 132 * 93)}
    leases = [line for line in out if line.startswith("lease ")]
    assert leases[:3] == ["lease 1: c64 36 (whole), r4i 22 (whole), l64 28", "lease 2: l64 52",
                          "lease 3: l64 20 (whole), l128 6"]
    assert leases[3] == "lease 4: l128 13" and out[-1] == "leases: 13" == f"leases: {len(leases)}"
    # each whole step fits one lease's lanes beside the other, at twice its card seconds
    assert 2 * (steps["c64"][2] + steps["r4i"][2]) <= 1370
    # another rate for the resumable steps (the first lease's log) changes only their share
    lower = [line for line in plan(tmp_path, BUDGET="1", T64="13", T128="50") if line.startswith("lease")]
    assert lower[1] == "lease 2: l64 47 (whole), l128 10" and lower[-1] == "leases: 7"


def test_lanes_in_order_of_value_each_seeded_from_what_is_kept(tmp_path):
    deadline, control, int8, items = [line[1:-1] for line in plan(as_published(tmp_path), LANES="printf [%s]\\n")
                                      if line.startswith("[")]
    assert deadline == str(1000 + 1800 - 150)
    assert control == "[ $(left) -gt 744 ] && { run lab/configs/h200/qwen-1.5b-ruler-64k-single.yaml c64 bf16_triton_attn; }"
    steps = re.split(r"; (?=\[ \$\(left\))", int8)
    assert [re.search(r"run \S+ (\S+) ", s)[1] for s in steps] == ["r4i", "l64", "l128"]
    assert steps[0].startswith("[ $(left) -gt 372 ] && { seed ") and f"scores-ruler lab/configs/h200/qwen-1.5b-ruler.yaml r4i {INT8};" in steps[0]
    assert steps[1].startswith("[ $(left) -gt 144 ] && { seed ") and f"scores-ruler-64k lab/configs/h200/qwen-1.5b-ruler-64k.yaml l64 {INT8};" in steps[1]
    assert "seed" not in steps[2]  # nothing kept at 128K: the run starts afresh
    assert items == "py i128 lab/ruler_items.py lab/configs/h200/qwen-1.5b-ruler-128k.yaml"


def test_a_step_with_every_item_kept_is_left_out(tmp_path):
    results = as_published(tmp_path)
    keep(results, "scores-ruler-64k-single", "bf16_triton_attn", "ruler", 36)
    keep(results, "scores-ruler", INT8, "legal_long_multi", 150)
    keep(results, "scores-ruler-64k", INT8, "ruler", 132)
    deadline, int8, items = [line[1:-1] for line in plan(results, LANES="printf [%s]\\n") if line.startswith("[")]
    assert "c64" not in int8 and "r4i" not in int8 and "l64" not in int8
    assert int8 == f"[ $(left) -gt 213 ] && {{ run lab/configs/h200/qwen-1.5b-ruler-128k.yaml l128 {INT8}; }}"
    assert plan(results, BUDGET="1")[-2:] == ["lease 11: l128 2 (whole)", "leases: 11"]
