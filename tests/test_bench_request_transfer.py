"""bench/request_transfer.py times a batch's crossing to the engine child and back, and says so in one RESULT line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "request_transfer.py"


def test_request_transfer_prints_one_result_line_with_both_directions():
    out = subprocess.run([sys.executable, str(BENCH), "--batch", "8", "--prompt-tokens", "16", "--rounds", "2"],
                         capture_output=True, text=True, timeout=120, check=True).stdout.strip().splitlines()
    last = out[-1]
    assert last.startswith("RESULT bench=request_transfer batch=8 prompt_tokens=16 logprobs=20 ")
    fields = dict(kv.split("=") for kv in last.split()[1:])
    assert float(fields["requests_s"]) > 0 and float(fields["completions_s"]) > 0
    assert float(fields["per_item_ms"]) > 0
