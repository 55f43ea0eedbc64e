"""bench/request_transfer.py runs the offline engine's real round trip around a stand-in LLM and says
what it costs beyond the bare loop in one RESULT line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "request_transfer.py"
sys.path.insert(0, str(BENCH.parent))

import request_transfer  # noqa: E402

from evalsuite.engine.vllm_offline import to_completion  # noqa: E402


def test_request_transfer_prints_one_result_line():
    out = subprocess.run([sys.executable, str(BENCH), "--batch", "8", "--prompt-tokens", "16", "--rounds", "2"],
                         capture_output=True, text=True, timeout=300, check=True).stdout.strip().splitlines()
    last = out[-1]
    assert last.startswith("RESULT bench=request_transfer batch=8 prompt_tokens=16 logprobs=20 ")
    fields = dict(kv.split("=") for kv in last.split()[1:])
    call_s, bare_s = float(fields["call_s"]), float(fields["bare_s"])
    assert call_s > 0 and bare_s > 0
    assert abs(float(fields["overhead_s"]) - (call_s - bare_s)) < 2e-4


def test_the_stand_in_answers_through_the_real_completion_conversion():
    llm = request_transfer.StandInLLM(batch=3, prompt_tokens=10, logprobs=4)
    outs = llm.generate(["a", "b"], [None, None])
    assert len(outs) == 2
    c = to_completion(outs[0])
    assert c.text == " A" and c.prompt_tokens == 10 and c.output_tokens == 1
    assert len(c.top_logprobs) == 1 and len(c.top_logprobs[0]) == 4
