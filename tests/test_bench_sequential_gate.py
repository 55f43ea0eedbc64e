"""bench/sequential_gate.py end to end on kept scores of its own making: it replays every candidate
and ends in its RESULT line; a collapse is decided early. Its figures on the 1.5B: docs/benchmarks.md."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parents[1] / "bench" / "sequential_gate.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("sequential_gate", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def rows(values: np.ndarray, groups: list[str]) -> dict[str, dict]:
    return {f"{g}/{i}": {"sample_id": f"{g}/{i}", "task": "mmlu", "value": float(v), "group": g}
            for i, (v, g) in enumerate(zip(values, groups, strict=True))}


def test_the_bench_replays_each_candidate_and_ends_in_its_result_line(monkeypatch, capsys):
    bench = load_bench()
    rng = np.random.default_rng(0)
    groups = [f"subject{i % 6}" for i in range(1500)]
    base = (rng.random(1500) < 0.6).astype(float)
    flips = {"fp8": 0.01, "awq": 0.05, "gptq": 0.05, "rtn": 0.05, "kv_fp8": 0.4, "kv_fp8_skip_layers_0_1_triton_attn": 0.01,
             "kv_int8_per_token_head": 0.02}
    kept = {bench.PAGE: {"bf16": {"mmlu": rows(base, groups)}}, bench.REPEAT_PAGE: {"bf16": {"mmlu": rows(base, groups)}}}
    for folder, share in flips.items():
        cand = np.where(rng.random(1500) < share, np.where(base == 1, 0.0, base), base)  # loses some right answers
        kept[bench.PAGE][folder] = {"mmlu": rows(cand, groups)}
    ruler = {"bf16": {"ruler": ruler_rows(rng.random(528) < 0.85)}, "fp8": {"ruler": ruler_rows(rng.random(528) < 0.85)}}
    # kept scores of its own, in the shape the pages' reader gives (variant -> task -> id -> row)
    parts = {"scores-ruler": ruler}  # the page's other run folders hold none of these tasks here
    monkeypatch.setattr(bench, "kept_scores", lambda page, part="scores", variants=(): kept[page] if part == "scores"
                        else parts.get(part, {}))
    assert bench.main(["--orders", "3"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    last = out[-1]
    assert last.startswith("RESULT bench=sequential_gate orders=3 batch=32 share=0.5 candidates=9 watched=8 items=1500 "), last
    fields = dict(kv.split("=") for kv in last.split()[1:])
    assert float(fields["kv_fp8_items_frac"]) < 0.3 and 0 < float(fields["items_used_frac"]) <= 1
    assert float(fields["wrong_decisions"]) <= 0.05 and float(fields["fast_fails_slow_pass"]) <= 0.05
    # 132 items a length cannot resolve 5 points in a sequence: RULER runs whole, judged as without --stop
    assert any(line.startswith("scores-ruler/ruler fp8: ") and "runs whole" in line for line in out), out


def ruler_rows(found: np.ndarray) -> dict[str, dict]:
    """RULER's items, 12 per task and length at 4K-32K, each scoring the share of needles found."""
    return {f"ruler-{i}": {"sample_id": f"ruler-{i}", "task": "ruler", "value": float(v), "group": f"t{i % 11}",
                           "extra": {"length": 4096 * 2 ** (i // 132)}} for i, v in enumerate(found)}
