"""Pytest plugin: a real `mlflow server` for the whole session.

Registered from conftest via `pytest_plugins = ["tests.mlflow_server"]` (or `-p tests.mlflow_server`).
A real server, not the client's file store, because the HTTP path (REST, proxied artifact
upload, retries) is what breaks in practice. SQLite backend, 127.0.0.1, a free port.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

STARTUP_TIMEOUT_S = 120  # ~20 s on an idle 2-core box; CI neighbours can make it slower


@dataclass(frozen=True)
class MlflowServer:
    uri: str
    root: Path  # holds the backend database, artifacts and the server log


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(proc: subprocess.Popen, uri: str, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"mlflow server exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            if requests.get(f"{uri}/health", timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"mlflow server not healthy after {STARTUP_TIMEOUT_S}s:\n{log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen) -> None:
    # The server forks workers; signal its own process group so none outlive the session.
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=5)  # uvicorn waits for idle keep-alive clients; no need to be polite
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory) -> MlflowServer:
    root = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
           "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
           "--serve-artifacts", "--artifacts-destination", str(root / "artifacts")]
    log = root / "server.log"
    # MLflow 3's server also starts seven job-runner processes (GenAI scorers); tests use none of them
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=root, start_new_session=True, env=env)
    try:
        _wait_healthy(proc, uri, log)
        yield MlflowServer(uri=uri, root=root)
    finally:
        _stop(proc)


# ---------------------------------------------------------------- synthetic run directories
# Shared by the tracking, compare and gate tests: a run directory as the runner writes it,
# built from a few numbers instead of an engine.


def _timed_requests(rd, name: str, spec: dict) -> None:
    """The latency pass's requests behind a spec's ttft and itl medians: `repeats` a length, spread
    evenly +-2% around the median."""
    repeats = spec.get("repeats", 5)
    lengths = sorted({*spec.get("ttft", {}), *spec.get("itl", {})})
    rows = []
    for k in lengths if repeats else []:
        for r in range(repeats):
            f = 1 + (0.04 * r / (repeats - 1) - 0.02 if repeats > 1 else 0.0)
            extra = {f"{key}_ms": spec[key][k] * f for key in ("ttft", "itl") if k in spec.get(key, {})}
            extra.update(prompt_tokens=k, output_tokens=8)
            rows.append({"sample": {"id": f"len{k}-r{r}"}, "completion": {},
                         "score": {"sample_id": f"len{k}-r{r}", "task": "latency", "value": 1.0, "pred": "",
                                   "target": "", "group": str(k), "extra": extra}})
    if rows:
        rd.append_samples(name, "latency", rows)


def build_run(out: Path, run_id: str, variants: dict[str, dict], *, n: int = 200, baseline: str | None = None,
              tracking: dict | None = None) -> Path:
    """Variant spec keys: wrong (mmlu item indices scored 0), status, reason, settings, build, weights_gib,
    kv_cache_tokens, required_gib, source (engine field -> how measured), ttft (ctx -> ms), itl (ctx -> ms),
    host_load (HostLoad fields: the host's load over the latency pass), timing (TimingCondition fields: how
    it was timed), needle (length -> accuracy). A latency figure is the median of 5 requests recorded
    beside it, spread +-2% around it (repeats: another count, 0 for none)."""
    from evalsuite.core.rundir import RunDir
    from evalsuite.core.types import EngineStats, Metric, RunRecord, Score, VariantResult
    from evalsuite.stats import metrics as M

    rd = RunDir(out / run_id)
    config = {"model": {"hub": "org/tiny", "name": "tiny"}, "variants": {v: {} for v in variants},
              "tasks": [{"type": "mmlu", "name": "mmlu", "limit": n}], "baseline": baseline, "seed": 0,
              "tracking": tracking or {"enabled": True, "uri": None, "experiment": "evalsuite"}}
    rd.write_config(config)
    rd.write_env({"evalsuite_commit": "abc123", "vllm_version": "0.0.test", "vllm_distribution": "vllm"})
    record = RunRecord(run_id=run_id, model="tiny", env={"device": "CPU: test", "model_dir": "/models/tiny"})
    for name, spec in variants.items():
        result = VariantResult(variant=name, status=spec.get("status", "ok"), reason=spec.get("reason"),
                               settings=spec.get("settings", {"dtype": "bfloat16", "engine_args": {"x": [1, 2]}}),
                               build=spec.get("build"), duration_s=12.5, host_load=spec.get("host_load"),
                               timing=spec.get("timing"))
        if result.status == "ok":
            wrong = set(spec.get("wrong", ()))
            # four-way questions whose answers cycle A-D; a wrong answer names the next letter
            scores = [Score(sample_id=f"q{i}", task="mmlu", value=0.0 if i in wrong else 1.0,
                            pred="ABCD"[(i + (i in wrong)) % 4], target="ABCD"[i % 4],
                            group="math" if i % 2 else "law") for i in range(n)]
            result.chance = {"mmlu/acc": 0.25}  # as a run declares its choice tasks' level
            rd.append_samples(name, "mmlu", [{"sample": {"id": s.sample_id}, "completion": {}, "score": s.model_dump()}
                                             for s in scores])
            result.metrics = [M.accuracy(scores, "mmlu/acc"), Metric(name="mmlu/wall_s", value=3.0)]
            needle = []
            for length, acc in spec.get("needle", {}).items():  # 10 items per length, the first ones wrong
                cell = [Score(sample_id=f"n{length}-{i}", task="needle", value=float(i >= round((1 - acc) * 10)),
                              pred="", target=str(7000 + i), group=f"len{length}_depth50", extra={"length": length})
                        for i in range(10)]
                result.metrics.append(M.accuracy(cell, f"needle/acc/len{length}", length=length))
                needle += cell
            if needle:
                rd.append_samples(name, "needle", [{"sample": {"id": s.sample_id}, "completion": {},
                                                    "score": s.model_dump()} for s in needle])
            for key in ("ttft", "itl"):
                result.metrics += [Metric(name=f"latency/{key}_ms_p50/ctx{k}", value=ms)
                                   for k, ms in spec.get(key, {}).items()]
                if spec.get(key):
                    result.metrics.append(Metric(name=f"latency/{key}_ms_p50", value=max(spec[key].values())))
            _timed_requests(rd, name, spec)
            result.engine = EngineStats(vllm_version="0.0.test", device="CPU: test",
                                        weights_gib=spec.get("weights_gib", 1.0),
                                        kv_cache_tokens=spec.get("kv_cache_tokens", 10000),
                                        required_gib=spec.get("required_gib", 2.0), source=spec.get("source", {}))
        rd.write_result(result)
        record.variants.append(result)
    rd.write_run(record)
    return rd.root
