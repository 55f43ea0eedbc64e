"""bench/sequential_gate.py end to end on kept scores of its own making: it replays every candidate
and ends in its RESULT line; a collapse is decided early. Its figures on the 1.5B: docs/benchmarks.md."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parents[1] / "bench" / "sequential_gate.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("sequential_gate", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def keep(folder: Path, values: np.ndarray, groups: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with gzip.open(folder / "mmlu.scores.jsonl.gz", "wt") as fh:
        for i, (v, g) in enumerate(zip(values, groups, strict=True)):
            fh.write(json.dumps({"sample_id": f"{g}/{i}", "task": "mmlu", "value": float(v), "group": g}) + "\n")


def test_the_bench_replays_each_candidate_and_ends_in_its_result_line(tmp_path, monkeypatch, capsys):
    bench = load_bench()
    rng = np.random.default_rng(0)
    groups = [f"subject{i % 6}" for i in range(1500)]
    base = (rng.random(1500) < 0.6).astype(float)
    flips = {"fp8": 0.01, "awq": 0.05, "gptq": 0.05, "rtn": 0.05, "kv_fp8": 0.4, "kv_fp8_skip_layers_0_1_triton_attn": 0.01,
             "kv_int8_per_token_head": 0.02}
    keep(tmp_path / bench.PAGE / "scores" / "bf16", base, groups)
    for folder, share in flips.items():
        cand = np.where(rng.random(1500) < share, np.where(base == 1, 0.0, base), base)  # loses some right answers
        keep(tmp_path / bench.PAGE / "scores" / folder, cand, groups)
    keep(tmp_path / bench.REPEAT_PAGE / "scores" / "bf16", base, groups)
    monkeypatch.setattr(bench, "RESULTS", tmp_path)
    assert bench.main(["--orders", "3"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("RESULT bench=sequential_gate orders=3 batch=32 candidates=8 checks=2 items=1500 "), last
    fields = dict(kv.split("=") for kv in last.split()[1:])
    assert float(fields["kv_fp8_items_frac"]) < 0.3 and 0 < float(fields["items_used_frac"]) <= 1
    assert float(fields["wrong_decisions"]) <= 0.05
