"""bench/gate_size_strata.py end to end at a few data sets a case: every case runs through the gate's
stratified path and the run ends in its RESULT line. Its rates at 1,000 a case: docs/benchmarks.md."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "gate_size_strata.py"


def test_the_bench_runs_every_case_and_ends_in_its_result_line(capsys):
    spec = importlib.util.spec_from_file_location("gate_size_strata", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--reps", "3"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert sum(line.startswith("| ") and "pt |" in line for line in out) == len(bench.CASES) * len(bench.QS)
    assert out[-1].startswith("RESULT bench=gate_size_strata alpha=0.05 cases=20 reps=3 max_false_pass="), out[-1]
