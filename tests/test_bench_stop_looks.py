"""bench/stop_looks.py end to end on a small task (2,000 items: fewer cannot resolve MMLU's 2 points in a
sequence at the planning discordance, and would run whole): both readers give the same decisions at every look
and the run ends in its RESULT line. The times are the bench's to report (docs/benchmarks.md), not
asserted here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "stop_looks.py"


def test_both_readers_decide_alike_at_every_look():
    res = subprocess.run([sys.executable, str(BENCH), "--items", "2000", "--prompt-chars", "200"],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    last = res.stdout.strip().splitlines()[-1]
    assert last.startswith("RESULT bench=stop_looks items=2000 checks=2 looks=63 batch=32 "), last
    fields = dict(kv.split("=") for kv in last.split()[1:])
    assert fields["same_decisions"] == "1"
    assert float(fields["whole_s"]) > 0 and float(fields["followed_s"]) > 0
