"""Tracking against a real `mlflow server` (tests/mlflow_server.py), read back through the client."""

from __future__ import annotations

import json
import math
import socket
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from mlflow.utils.validation import _validate_metric_name
from typer.testing import CliRunner

from evalsuite.cli.main import app
from evalsuite.core.rundir import RunDir
from evalsuite.core.types import Metric, Placement, VariantResult
from evalsuite.tracking.settings import TrackingConfig
from evalsuite.tracking.store import TrackingError, _log_batch, flatten, log_run, sanitize
from tests.mlflow_server import build_run, free_port

runner = CliRunner()
VARIANTS = {
    "bf16": {"wrong": range(20), "ttft": {512: 10.0, 2048: 30.0}, "needle": {1024: 1.0, 4096: 0.9}},
    "fp8": {"wrong": range(30), "weights_gib": 0.5, "kv_cache_tokens": 20000, "ttft": {512: 9.0, 2048: 28.0},
            "settings": {"dtype": "bfloat16", "quantization": "fp8", "kv_cache_dtype": "fp8"},
            "host_load": {"cpus": 4, "start": [9.5, 6.0, 3.0], "end": [8.0, 6.0, 3.0]}},
    "int4": {"status": "skipped", "reason": "no W4A16 kernel on CPU"},
    "broken": {"status": "failed", "reason": "engine exited with code 1"},
}


def experiment_runs(client: MlflowClient, name: str) -> list:
    exp = client.get_experiment_by_name(name)
    return [] if exp is None else client.search_runs([exp.experiment_id], max_results=1000)


@pytest.fixture
def run(tmp_path) -> Path:
    return build_run(tmp_path / "runs", "20250101-000000-small", VARIANTS, baseline="bf16")


@pytest.fixture
def client(mlflow_server) -> MlflowClient:
    return MlflowClient(mlflow_server.uri)


def test_sanitize_is_valid_stable_and_injective():
    assert sanitize("needle/acc/len1024") == "needle/acc/len1024"
    assert sanitize("latency/ttft_ms_p50/ctx512") == "latency/ttft_ms_p50/ctx512"
    odd = ["mmlu/acc/µ-physics", "a//b", "a/../b", "/lead", "trail/", "x?y", "x*y", ".", "", "k" * 300]
    out = [sanitize(n) for n in odd]
    for name in out:
        _validate_metric_name(name)  # raises if MLflow would refuse it
        assert len(name) <= 250
    assert len(set(out)) == len(out)
    assert out == [sanitize(n) for n in odd]  # same input, same key
    assert sanitize("x?y") != sanitize("x*y")  # both become x_y; the hash keeps them apart


def test_flatten():
    assert flatten({"dtype": "bf16", "engine_args": {"swap": 4, "ids": [1, 2]}, "none": None}) == {
        "dtype": "bf16", "engine_args.swap": "4", "engine_args.ids": "[1, 2]"}


def test_log_run_parent_variants_params_metrics_tags_artifacts(run, client, mlflow_server):
    rd = RunDir(run)
    record = rd.load_run()
    record.variants[1].metrics.append(Metric(name="mmlu/acc/µ?", value=0.5))  # fp8: a name MLflow refuses
    record.variants[1].placement = Placement.model_validate({
        "parallel": "auto", "ran_with": ["bf16"], "engine_alone": True,
        "predicted": {"weights_gib": 0.52, "kv_cache_gib": 1.0, "footprint_gib": 3.5},
        "measured": {"weights_gib": 0.5, "kv_cache_gib": 1.0}})
    rd.write_run(record)
    res = log_run(rd, TrackingConfig(experiment="t-basic"), uri=mlflow_server.uri)
    assert sorted(res.created) == ["bf16", "broken", "fp8", "int4", "parent"]
    parent = client.get_run(res.parent_run_id)
    assert parent.data.tags["evalsuite.role"] == "parent" and parent.info.run_name == "20250101-000000-small"
    assert parent.data.params["model.name"] == "tiny" and parent.data.params["task.mmlu.limit"] == "200"
    parent_files = {a.path for a in client.list_artifacts(res.parent_run_id, "run")}
    assert parent_files == {"run/config.yaml", "run/env.json", "run/run.json"}
    report = {a.path for a in client.list_artifacts(res.parent_run_id, "report")}
    assert {"report/compare.md", "report/compare.csv", "report/accuracy_vs_weights_gib.png",
            "report/latency_vs_context.png"} <= report

    fp8 = client.get_run(res.variant_run_ids["fp8"])
    assert fp8.data.tags["mlflow.parentRunId"] == res.parent_run_id
    assert fp8.data.tags["evalsuite.status"] == "ok" and fp8.info.status == "FINISHED"
    assert fp8.data.tags["evalsuite.commit"] == "abc123" and fp8.data.tags["vllm.version"] == "0.0.test"
    assert fp8.data.tags["evalsuite.latency_host_loaded"] == "true"  # its latency pass saw a load of 9.5 on 4 CPUs
    assert fp8.data.tags["evalsuite.latency_host_load_1m"] == "9.5"
    # how its latency was timed: an older record's, alone (no condition recorded, so none verified)
    assert fp8.data.tags["evalsuite.latency_timed"] == "alone, 0 warm-up (older record)"
    assert fp8.data.tags["evalsuite.latency_idle_verified"] == "unchecked"
    assert fp8.data.tags["device"] == "CPU: test"
    assert fp8.data.params["quantization"] == "fp8" and fp8.data.params["model.name"] == "tiny"
    m = fp8.data.metrics
    assert m["mmlu/acc"] == pytest.approx(0.85) and m["engine/weights_gib"] == 0.5
    assert m["engine/kv_cache_tokens"] == 20000 and m["latency/ttft_ms_p50/ctx512"] == 9.0
    assert m[sanitize("mmlu/acc/µ?")] == 0.5
    assert fp8.data.tags["evalsuite.placement"] == "bf16"  # packed beside bf16: the plan against the engine
    assert m["placement/weights_gib/predicted"] == 0.52 and m["placement/weights_gib/measured"] == 0.5
    assert m["placement/footprint_gib/predicted"] == 3.5 and "placement/activation_gib/measured" not in m
    assert {a.path for a in client.list_artifacts(fp8.info.run_id)} >= {"result.json", "samples"}
    assert [a.path for a in client.list_artifacts(fp8.info.run_id, "samples")] == ["samples/latency.jsonl",
                                                                                  "samples/mmlu.jsonl"]

    int4 = client.get_run(res.variant_run_ids["int4"])
    assert int4.data.tags["evalsuite.status"] == "skipped"
    assert int4.data.tags["evalsuite.reason"] == "no W4A16 kernel on CPU"
    broken = client.get_run(res.variant_run_ids["broken"])
    assert broken.data.tags["evalsuite.status"] == "failed" and broken.info.status == "FAILED"

    state = json.loads((run / "tracking.json").read_text())["targets"][mlflow_server.uri]
    assert state["parent_run_id"] == res.parent_run_id and state["variant_run_ids"] == res.variant_run_ids
    assert RunDir(run).load_run().mlflow_run_id == res.parent_run_id


def test_figures_and_changes_reach_mlflow_at_full_precision(tmp_path, client, mlflow_server):
    """MLflow is a copy of the record: a figure keeps every digit (its UI rounds what it shows), and a
    change against the baseline is the paired delta itself: 13 more of 200 items lost is -6.5 points,
    not -6 as rounding to its interval's half-width (about 3 points) made it."""
    run = build_run(tmp_path / "runs", "20250101-000000-digits", {"bf16": {"wrong": range(20)},
                                                                  "fp8": {"wrong": range(33)}}, baseline="bf16")
    rd = RunDir(run)
    record = rd.load_run()
    record.variants[1].metrics.append(Metric(name="mmlu/odd_ms", value=123.456789012345))
    rd.write_run(record)
    res = log_run(rd, TrackingConfig(experiment="t-digits"), uri=mlflow_server.uri)
    fp8 = client.get_run(res.variant_run_ids["fp8"]).data.metrics
    assert fp8["mmlu/odd_ms"] == 123.456789012345 and fp8["mmlu/acc"] == 167 / 200
    assert fp8["delta/mmlu/acc_pt"] == pytest.approx(-6.5)


def test_the_parent_run_carries_the_runs_wall_and_gpu_idle_share(tmp_path, client, mlflow_server):
    """What the decision cost, on the parent run: a sampled share as a metric, an unsampled one said in a
    tag and never logged as a number; a resumed run's grown wall replaces the figure."""
    from evalsuite.core.types import RunWall

    run = build_run(tmp_path / "runs", "20250101-000000-cost", {"bf16": {}}, baseline="bf16")
    rd = RunDir(run)
    record = rd.load_run()
    record.wall = RunWall(wall_s=3.5, sampled="no GPU")
    rd.write_run(record)
    cfg = TrackingConfig(experiment="t-cost")
    parent = client.get_run(log_run(rd, cfg, uri=mlflow_server.uri).parent_run_id).data
    assert parent.metrics["run/wall_s"] == 3.5 and "run/gpu_idle_frac" not in parent.metrics
    assert parent.tags["evalsuite.gpu_idle"] == "not sampled (no GPU)"
    record.wall = RunWall(wall_s=900.25, gpu_idle_frac=0.0421, devices=["0"], readings=3600)
    rd.write_run(record)
    parent = client.get_run(log_run(rd, cfg, uri=mlflow_server.uri).parent_run_id).data
    assert parent.metrics["run/wall_s"] == 900.25 and parent.metrics["run/gpu_idle_frac"] == 0.0421
    assert parent.tags["evalsuite.gpu_idle"] == "4.2%"


def test_a_variant_never_started_is_not_uploaded_until_it_runs(tmp_path, client, mlflow_server):
    """An interrupted run's `pending` variants hold nothing: MLflow gets the ones that ran, and the
    pending one once a --resume has run it."""
    run = build_run(tmp_path / "runs", "20250101-000000-pend", {"bf16": {}, "fp8": {}}, baseline="bf16")
    rd = RunDir(run)
    record = rd.load_run()
    ran = record.variants[1]
    record.variants[1] = VariantResult(variant="fp8", status="pending", reason="not started")
    rd.write_run(record)
    cfg = TrackingConfig(experiment="t-pending")
    assert set(log_run(rd, cfg, uri=mlflow_server.uri).variant_run_ids) == {"bf16"}
    record = rd.load_run()
    record.variants[1] = ran  # as after `evalsuite run --resume`
    rd.write_run(record)
    assert log_run(rd, cfg, uri=mlflow_server.uri).created == ["fp8"]


def test_a_parent_whose_started_variants_all_failed_is_failed(tmp_path, client, mlflow_server):
    """Variants an interrupted run never started do not make a run of failures look finished."""
    run = build_run(tmp_path / "runs", "20250101-000000-fail", {"bf16": {"status": "failed", "reason": "boom"},
                                                                 "fp8": {}})
    rd = RunDir(run)
    record = rd.load_run()
    record.variants[1] = VariantResult(variant="fp8", status="pending", reason="not started")
    rd.write_run(record)
    res = log_run(rd, TrackingConfig(experiment="t-allfail"), uri=mlflow_server.uri)
    assert client.get_run(res.parent_run_id).info.status == "FAILED"


def test_nan_metrics_are_accepted(client, mlflow_server):
    # a task with no items scores NaN; MLflow stores it rather than refusing the whole batch
    run = client.create_run(client.create_experiment("t-nan"))
    _log_batch(client, run.info.run_id, metrics={"legal/balanced_acc": math.nan, "mmlu/acc": 0.5})
    assert math.isnan(client.get_run(run.info.run_id).data.metrics["legal/balanced_acc"])


def test_sync_is_idempotent_by_tags_not_only_the_local_file(tmp_path, client, mlflow_server):
    run = build_run(tmp_path, "20250101-000000-small", VARIANTS, tracking={"experiment": "t-idem"})
    cfg = TrackingConfig(experiment="t-idem")
    first = log_run(RunDir(run), cfg, uri=mlflow_server.uri)
    before = {r.info.run_id for r in experiment_runs(client, "t-idem")}
    assert len(before) == 5
    (run / "tracking.json").unlink()  # the server, not the file, says what is there
    res = runner.invoke(app, ["sync", str(run), "--uri", mlflow_server.uri])
    assert res.exit_code == 0 and "already synced" in res.stdout, res.output
    assert {r.info.run_id for r in experiment_runs(client, "t-idem")} == before
    assert json.loads((run / "tracking.json").read_text())["targets"][mlflow_server.uri]["parent_run_id"] == \
        first.parent_run_id


def test_changed_variant_is_replaced_and_the_rest_kept(run, client, mlflow_server):
    cfg = TrackingConfig(experiment="t-stale")
    first = log_run(RunDir(run), cfg, uri=mlflow_server.uri)
    rd = RunDir(run)
    record = rd.load_run()
    record.variants = [v.model_copy(update={"status": "ok", "reason": None}) if v.variant == "broken" else v
                       for v in record.variants]  # as after `evalsuite run --resume`
    rd.write_run(record)
    second = log_run(rd, cfg, uri=mlflow_server.uri)
    assert second.created == ["broken"] and second.parent_run_id == first.parent_run_id
    assert second.variant_run_ids["fp8"] == first.variant_run_ids["fp8"]
    live = {r.data.tags.get("evalsuite.variant"): r for r in experiment_runs(client, "t-stale")}
    assert len(live) == 5 and live["broken"].data.tags["evalsuite.status"] == "ok"


def test_unreachable_server_raises_quickly_and_keeps_records(run):
    port = free_port()  # nothing listens here
    t0 = time.monotonic()
    with pytest.raises(TrackingError, match="unreachable"):
        log_run(RunDir(run), TrackingConfig(), uri=f"http://127.0.0.1:{port}")
    assert time.monotonic() - t0 < 10
    assert RunDir(run).exists() and not (run / "tracking.json").exists()


def test_silent_server_times_out_instead_of_hanging(run):
    with socket.socket() as s:  # accepts connections (kernel backlog) but never answers
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        t0 = time.monotonic()
        with pytest.raises(TrackingError):
            log_run(RunDir(run), TrackingConfig(), uri=f"http://127.0.0.1:{s.getsockname()[1]}")
        assert time.monotonic() - t0 < 20


def test_sync_uploads_what_failed_at_run_time(tmp_path, client, mlflow_server):
    out = tmp_path / "runs"
    run = build_run(out, "20250101-000000-small", VARIANTS, tracking={"experiment": "t-sync"})
    build_run(out, "20250101-000001-other", {"bf16": {}}, tracking={"experiment": "t-sync"})
    build_run(out, "20250101-000002-off", {"bf16": {}}, tracking={"enabled": False, "experiment": "t-sync"})
    with pytest.raises(TrackingError):
        log_run(RunDir(run), None, uri=f"http://127.0.0.1:{free_port()}")
    res = runner.invoke(app, ["sync", "--output-dir", str(out), "--uri", mlflow_server.uri])
    assert res.exit_code == 0, res.output
    assert res.stdout.count("uploaded") == 2 and "tracking disabled" in res.stdout
    assert len(experiment_runs(client, "t-sync")) == 5 + 2
    again = runner.invoke(app, ["sync", "--output-dir", str(out), "--uri", mlflow_server.uri])
    assert again.stdout.count("already synced") == 2 and len(experiment_runs(client, "t-sync")) == 7


def test_sync_reports_failures_with_exit_1(run):
    res = runner.invoke(app, ["sync", str(run), "--uri", f"http://127.0.0.1:{free_port()}"])
    assert res.exit_code == 1 and "not synced" in res.stderr


def test_compare_and_gate_read_mlflow_runs(run, mlflow_server):
    res = log_run(RunDir(run), TrackingConfig(experiment="t-read"), uri=mlflow_server.uri)
    uri = ["--uri", mlflow_server.uri]
    by_parent = runner.invoke(app, ["compare", res.parent_run_id, "--format", "csv", *uri])
    assert by_parent.exit_code == 0, by_parent.output
    assert by_parent.stdout.splitlines()[1].startswith("bf16,ok,0.9,0.0")
    by_experiment = runner.invoke(app, ["compare", "t-read", "--format", "markdown", *uri])
    assert by_experiment.exit_code == 0 and "| mmlu/acc | 0.900 (.851–.934, n=200) | 0.850 (.794–.893, n=200) -5.0 pt [" in by_experiment.stdout
    gate = runner.invoke(app, ["gate", "--baseline", res.variant_run_ids["bf16"], "--candidate",
                               res.variant_run_ids["fp8"], "--rules", "configs/gates/default.yaml", "--format", "markdown", *uri])
    assert gate.exit_code == 1 and "paired, n=200" in gate.stdout  # samples came back from MLflow
    one_variant = runner.invoke(app, ["compare", res.variant_run_ids["fp8"], "--format", "csv", *uri])
    assert one_variant.exit_code == 0 and one_variant.stdout.splitlines()[1].startswith("fp8,ok,0.85")
    missing = runner.invoke(app, ["compare", "no-such-experiment", *uri])
    assert missing.exit_code == 2 and "not a run directory, nor an MLflow run id" in missing.stderr


def test_default_store_is_sqlite_beside_the_runs(run, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    res = log_run(RunDir(run), TrackingConfig(experiment="t-local"))
    out = run.parent
    assert res.uri == f"sqlite:///{out.resolve() / 'mlflow.db'}"
    assert (out / "mlflow.db").exists()
    assert (out / "mlartifacts" / res.variant_run_ids["bf16"] / "artifacts" / "samples" / "mmlu.jsonl").exists()
    client = MlflowClient(res.uri)
    assert client.get_run(res.variant_run_ids["bf16"]).data.metrics["mmlu/acc"] == pytest.approx(0.9)
    assert log_run(RunDir(run), TrackingConfig(experiment="t-local")).created == []


def test_env_uri_is_used_when_config_has_none(run, monkeypatch, mlflow_server, client):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.uri)
    res = log_run(RunDir(run), TrackingConfig(experiment="t-env"))
    assert res.uri == mlflow_server.uri and len(experiment_runs(client, "t-env")) == 5


def test_experiment_opens_on_runs_and_tasks_are_dataset_inputs(run, client, mlflow_server):
    res = log_run(RunDir(run), TrackingConfig(experiment="t-ui-kind"), uri=mlflow_server.uri)
    exp = client.get_experiment(res.experiment_id)
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    inputs = {v: client.get_run(rid).inputs.dataset_inputs for v, rid in res.variant_run_ids.items()}
    by_variant = {v: {d.dataset.name: d for d in ds} for v, ds in inputs.items()}
    assert set(by_variant["bf16"]) == {"mmlu", "needle", "latency"} and set(by_variant["fp8"]) == {"mmlu", "latency"}
    assert by_variant["int4"] == {} and by_variant["broken"] == {}  # no samples, no dataset
    mmlu = by_variant["bf16"]["mmlu"]
    assert {t.key: t.value for t in mmlu.tags} == {"mlflow.data.context": "evaluation"}
    assert mmlu.dataset.digest == by_variant["fp8"]["mmlu"].dataset.digest  # same items, one dataset
    schema = json.loads(mmlu.dataset.schema)["mlflow_colspec"]
    assert {c["name"] for c in schema} >= {"id", "group", "target"}
    assert json.loads(mmlu.dataset.profile)["num_rows"] == 200
    assert {"report/compare.md", "report/accuracy_vs_weights_gib.png"} <= {
        a.path for a in client.list_artifacts(res.parent_run_id, "report")}


def test_experiment_kind_chosen_by_a_user_is_kept(run, client, mlflow_server):
    exp_id = client.create_experiment("t-ui-own", tags={"mlflow.experimentKind": "genai_development"})
    log_run(RunDir(run), TrackingConfig(experiment="t-ui-own"), uri=mlflow_server.uri)
    assert client.get_experiment(exp_id).tags["mlflow.experimentKind"] == "genai_development"
    plain = client.create_experiment("t-ui-plain")  # made elsewhere without a kind: evalsuite sets it
    log_run(RunDir(run), TrackingConfig(experiment="t-ui-plain"), uri=mlflow_server.uri)
    assert client.get_experiment(plain).tags["mlflow.experimentKind"] == "custom_model_development"
