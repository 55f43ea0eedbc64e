"""lab/plans/qwen-1.5b-stop.sh, expanded without a lent machine (LANES=printf): the stopped run
first, then the full one, each with caches of its own and behind its estimate."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

PLAN = Path(__file__).resolve().parents[2] / "lab" / "plans" / "qwen-1.5b-stop.sh"


def test_stopped_then_full_each_fresh_and_behind_its_estimate():
    res = subprocess.run(["bash", str(PLAN), "1000", "2000"], capture_output=True, text=True,
                         env={**os.environ, "LANES": "printf [%s]\\n"})
    assert res.returncode == 0, res.stderr
    deadline, lane = [line[1:-1] for line in res.stdout.splitlines() if line.startswith("[")]
    assert deadline == str(1000 + 2000 - 150)
    stop, full = [s.strip() for s in lane.split(";")]
    assert stop.startswith("[ $(left) -gt 360 ] && py dws ") and stop.endswith("-- --stop decided")
    assert full.startswith("[ $(left) -gt 600 ] && py dw ") and full.endswith("--")
    assert "--cache-root /root/fresh-dws " in stop and "--cache-root /root/fresh-dw " in full
    assert stop.count("-V ") == full.count("-V ") == 4
