"""bench/capacity_overhead.py end to end on the real (CPU) engine: both sides sweep the same level
against one server and the run ends in its RESULT line. The overhead itself is not asserted: benches
measure, tests do not time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine

BENCH = Path(__file__).resolve().parents[1] / "bench" / "capacity_overhead.py"


def test_capacity_overhead_bench_ends_in_its_result_line(tiny_model):
    res = subprocess.run([sys.executable, str(BENCH), "--model", str(tiny_model), "--levels", "2",
                          "--prompt-tokens", "32", "--output-tokens", "4", "--requests", "100", "--rounds", "1",
                          "--engine-arg", "enforce_eager=true"],
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    last = res.stdout.strip().splitlines()[-1]
    assert last.startswith("RESULT bench=capacity_overhead levels=2 requests=100 rounds=1 "), last
    fields = dict(kv.split("=") for kv in last.split()[1:])
    assert float(fields["alone_s"]) > 0 and float(fields["pass_s"]) > 0 and fields["ok"] in ("True", "False")
