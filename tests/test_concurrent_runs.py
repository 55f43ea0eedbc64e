"""Two runs of one config started at the same moment, in two processes, on one output folder:
each gets a folder of its own, and the MLflow store they both create stays usable (`sync` works).

The engine is the fake one (the test is about folders and the store); MLflow's SQLite store is real.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml
from mlflow.tracking import MlflowClient

REPO = Path(__file__).resolve().parent.parent


def evalsuite(*args: str, cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.Popen([sys.executable, "-m", "evalsuite", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_two_runs_at_once_get_two_folders_and_one_working_store(tmp_path, tiny_model):
    cfg = tmp_path / "same.yaml"
    cfg.write_text(yaml.safe_dump({
        "model": {"path": str(tiny_model)},
        "engine": {"mode": "fake", "batch_size": 2},
        "variants": {"bf16": {"max_model_len": 2048}},
        "tasks": [{"type": "mmlu", "subjects": ["anatomy"], "limit_per_subject": 6, "num_fewshot": 0}],
        "latency": {"prompt_tokens": [16], "output_tokens": 2, "repeats": 1},
        "tracking": {"experiment": "together"},
    }))
    out = tmp_path / "runs"
    time.sleep(1 - time.time() % 1)  # both start early in one second: the same second of the run id
    procs = [evalsuite("run", str(cfg), "-o", str(out), "--no-progress", cwd=tmp_path) for _ in range(2)]
    results = [(p.wait(timeout=600), *p.communicate()) for p in procs]
    for code, stdout, stderr in results:
        assert code == 0 and "MLflow logging failed" not in stdout + stderr, stdout + stderr
    runs = sorted(p for p in out.iterdir() if (p / "run.json").exists())
    # two folders; on a loaded machine the two may reach their folders a second apart, and ids made in
    # one second are held apart by test_records (200 ids, one second)
    assert len(runs) == 2 and runs[0].name != runs[1].name
    for run in runs:
        lines = (run / "bf16" / "samples" / "mmlu.jsonl").read_text().splitlines()
        ids = [json.loads(line)["sample"]["id"] for line in lines]
        assert len(ids) == len(set(ids)) == 6
        assert json.loads((run / "run.json").read_text())["variants"][0]["status"] == "ok"
    sync = subprocess.run([sys.executable, "-m", "evalsuite", "sync", "--output-dir", str(out)], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=300)
    assert sync.returncode == 0, sync.stdout + sync.stderr
    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    exp = client.get_experiment_by_name("together")
    parents = client.search_runs([exp.experiment_id], "tags.`evalsuite.role` = 'parent'")
    assert sorted(r.data.tags["evalsuite.run_id"] for r in parents) == [r.name for r in runs]


def test_a_second_process_on_a_run_folder_is_refused_naming_the_holder(tmp_path, tiny_model):
    """`run --resume` and `finish` on a folder another process holds: one line naming the folder
    and the holder's pid, exit 2, nothing written; `sync` skips it with the same reason; once the
    holder ends, the folder is free."""
    cfg = tmp_path / "held.yaml"
    cfg.write_text(yaml.safe_dump({
        "model": {"path": str(tiny_model)}, "engine": {"mode": "fake", "batch_size": 2},
        "variants": {"bf16": {"max_model_len": 2048}},
        "tasks": [{"type": "mmlu", "subjects": ["anatomy"], "limit_per_subject": 4, "num_fewshot": 0}],
        "tracking": {"enabled": False}, "output_dir": str(tmp_path / "runs")}))
    first = evalsuite("run", str(cfg), "--no-progress", cwd=tmp_path)
    assert first.wait(timeout=600) == 0, first.communicate()
    (run,) = [p for p in (tmp_path / "runs").iterdir() if (p / "run.json").exists()]
    before = (run / "run.json").read_bytes()
    holder = subprocess.Popen([sys.executable, "-c", "import sys; from evalsuite.core.rundir import RunDir\n"
                               "with RunDir(sys.argv[1]).held():\n    print('held', flush=True); sys.stdin.read()",
                               str(run)], env={**os.environ, "PYTHONPATH": str(REPO)}, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == "held\n"
        for args in (["run", str(cfg), "--resume", "--no-progress"], ["finish", str(run)]):
            code, out, err = (lambda p: (p.wait(timeout=600), *p.communicate()))(evalsuite(*args, cwd=tmp_path))
            assert code == 2, out + err
            assert err.count("\n") == 1 and "Traceback" not in err, err
            assert err.startswith(f"evalsuite: error: {run}: in use by another evalsuite process (pid {holder.pid} on ")
        # sync carries on past a held folder (other runs still upload), saying why this one did not
        code, out, err = (lambda p: (p.wait(timeout=600), *p.communicate()))(evalsuite("sync", str(run), cwd=tmp_path))
        assert code == 1 and f"{run}: not synced" in err and f"pid {holder.pid}" in err, out + err
        assert (run / "run.json").read_bytes() == before and not (run / "tracking.json").exists()
    finally:
        holder.communicate("", timeout=60)
    done = evalsuite("finish", str(run), cwd=tmp_path)
    assert done.wait(timeout=600) == 0, done.communicate()
