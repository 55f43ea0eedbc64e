"""bench/sweep_wall.py's reading of two modes' scores: each variant's primary metric paired packed
against sequential through the suite's paired test (pure: run folders as the runner writes them)."""

from __future__ import annotations

import sys
from pathlib import Path

from evalsuite.core.rundir import RunDir
from tests.mlflow_server import build_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import sweep_wall  # noqa: E402


def test_score_deltas_pair_each_variant_with_itself_across_the_modes(tmp_path, capsys):
    seq = RunDir(build_run(tmp_path, "seq", {"bf16": {}, "rtn": {"wrong": [1, 2, 3, 4]}}, n=100))
    packed = RunDir(build_run(tmp_path, "packed", {"bf16": {}, "rtn": {"wrong": [1, 2, 5, 6, 7, 8]}}, n=100))
    largest = sweep_wall.score_deltas(seq, packed, seq.load_run(), packed.load_run())
    out = capsys.readouterr().out
    assert "bf16 mmlu/acc: n=100, 0 answers changed; sequential 1.0000, packed 1.0000: +0.00 pt" in out
    # 3 and 4 right again, 5-8 wrong: 6 changed, 96% -> 94%
    assert "rtn mmlu/acc: n=100, 6 answers changed; sequential 0.9600, packed 0.9400: -2.00 pt [" in out
    assert abs(largest - 2.0) < 1e-9


def test_answers_are_each_items_text_without_the_latency_pass(tmp_path):
    rd = RunDir(tmp_path / "run")
    def row(sid: str, text: str) -> dict:
        return {"sample": {"id": sid}, "completion": {"text": text},
                "score": {"sample_id": sid, "task": "mmlu", "value": 1.0, "pred": text, "target": "A"}}

    rd.append_samples("bf16", "mmlu", [row(f"q{i}", text) for i, text in enumerate("AB")])
    rd.append_samples("bf16", "latency", [row("l0", "x")])
    with rd.samples_file("bf16", "mmlu").open("a") as f:
        f.write('{"sample": {"id": "q2"}, "compl')  # a line a killed run left half written
    assert sweep_wall.answers(rd.root) == {"bf16/mmlu/q0": "A", "bf16/mmlu/q1": "B"}
