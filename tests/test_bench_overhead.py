"""bench/overhead.py end to end on the real (CPU) engine: both sides answer the same requests alike
and the run ends in its RESULT line. The ratio itself is not asserted: benches measure, tests do not time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "overhead.py"


def test_overhead_bench_both_sides_answer_alike(tiny_model):
    res = subprocess.run([sys.executable, str(BENCH), "--model", str(tiny_model), "--mmlu-per-subject", "1",
                          "--needle-lengths", "512", "--needle-depths", "0", "--rounds", "1", "--warmup", "0"],
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    last = res.stdout.strip().splitlines()[-1]
    assert last.startswith("RESULT bench=overhead items=58 "), last
    fields = dict(kv.split("=") for kv in last.split()[1:])
    assert fields["same_answers"] == "True"
    assert float(fields["evalsuite_s"]) > 0 and float(fields["bare_s"]) > 0
