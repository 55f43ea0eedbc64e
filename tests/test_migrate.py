"""Records of schemas 1 and 2 read through the migration (evalsuite.core.migrate): the published H200 run
folders and kept results as fetched, a version-1 variant with a quantized checkpoint, a simulated label and
metrics recorded before they carried their meaning, and a version-2 run record whose scheduler's
decisions sit in its `env`."""

from __future__ import annotations

import json

import pytest

from evalsuite.core.errors import ConfigError
from evalsuite.core.migrate import migrate_v1, upgraded
from evalsuite.core.rundir import RunDir, read_result
from evalsuite.core.types import SCHEMA_VERSION, Build, MetricKind, RunRecord, VariantResult, meaning_of_name

# a version-1 simulated variant as runs wrote it (fields trimmed): the build in its settings
V1_SIMULATED = {
    "variant": "w4a16_sim", "status": "ok", "reason": None,
    "settings": {"quantize": "rtn", "simulate": True, "dtype": "bfloat16", "simulated": True,
                 "quantized": {"checkpoint": "/cache/quantized/m-rtn-w4a16-1", "cached": True, "method": "rtn",
                               "key": "m-rtn-w4a16-1", "quantize_s": 3.5, "wall_s": 4.0,
                               "params": {"method": "rtn", "scheme": "W4A16"}, "recipe": None,
                               "source_fingerprint": "abc", "simulated": True,
                               "quantization_config": {"quant_method": "compressed-tensors"}, "tensors_rounded": 14},
                 "dense_engine": {"weights_gib": 0.531, "kv_cache_tokens": 145221}},
    "metrics": [{"name": "mmlu/acc", "value": 0.5, "stderr": 0.05, "n": 100},
                {"name": "needle/acc/len4096", "value": 1.0, "stderr": 0.0, "n": 10, "kind": "proportion", "unit": "",
                 "direction": "higher", "strata": [], "percentile": None},
                {"name": "legal/balanced_acc", "value": 0.6, "stderr": 0.1, "n": 6, "ci95": [0.4, 0.8]}],
    "engine": {}, "predicted": {}, "started_at": "2026-11-29T10:00:00Z", "duration_s": 12.0}


def test_a_v1_variant_moves_its_build_out_of_its_settings_and_gets_its_metrics_meaning():
    v = VariantResult.model_validate_json(json.dumps(upgraded(json.loads(json.dumps(V1_SIMULATED)), "r", run=False)),
                                          strict=True)
    assert v.settings.model_dump() == {"quantize": "rtn", "simulate": True, "dtype": "bfloat16"}  # the config alone
    assert v.simulated and isinstance(v.build, Build) and v.build.checkpoint == "/cache/quantized/m-rtn-w4a16-1"
    assert v.build.dense_engine == {"weights_gib": 0.531, "kv_cache_tokens": 145221} and v.build.tensors_rounded == 14
    assert v.predicted is None and v.placement is None
    acc, needle, legal = v.metrics
    assert acc.kind == MetricKind.proportion and acc.strata == [] and acc.direction == "higher"
    assert (needle.length, needle.depth) == (4096, None)  # written before the prompt position was kept
    assert legal.strata == meaning_of_name("legal/balanced_acc")["strata"] and "ci95" not in legal.model_dump()


def test_a_v1_result_json_reads_and_is_written_back_as_this_version(tmp_path):
    (tmp_path / "w4a16_sim").mkdir()
    (tmp_path / "w4a16_sim" / "result.json").write_text(json.dumps(V1_SIMULATED))
    rd = RunDir(tmp_path)
    v = rd.load_result("w4a16_sim")
    assert v.simulated and v.build.method == "rtn"
    rd.write_result(v)
    written = json.loads((tmp_path / "w4a16_sim" / "result.json").read_text())
    assert written["schema_version"] == SCHEMA_VERSION == 3 and "simulated" not in written["settings"]
    assert rd.load_result("w4a16_sim") == v


def test_an_unknown_schema_version_is_one_line(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"schema_version": 9, "run_id": "r", "model": "m", "variants": []}))
    with pytest.raises(ConfigError, match=r"run.json: schema_version 9 is not supported \(this evalsuite reads 1 to 3\)"):
        RunDir(tmp_path).load_run()
    (tmp_path / "v").mkdir()
    (tmp_path / "v" / "result.json").write_text(json.dumps({**V1_SIMULATED, "variant": "v", "schema_version": 4}))
    with pytest.raises(ConfigError, match="result.json: schema_version 4 is not supported"):
        RunDir(tmp_path).load_result("v")


def test_the_published_v1_run_folders_read_through_the_migration(results_pages):
    """Every run.json and result.json of the fetched pages (the kept H200 runs among them) was written by
    schema 1; each reads, and reads as the migration makes it."""
    runs = sorted(results_pages.rglob("run.json"))
    results = sorted(results_pages.rglob("result.json"))
    assert len(runs) >= 3 and len(results) >= 10
    for path in runs:
        raw = json.loads(path.read_text())
        assert raw["schema_version"] == 1
        record = RunDir(path.parent).load_run()
        assert record == RunRecord.model_validate_json(json.dumps(upgraded(raw, "r", run=True)), strict=True)
        assert record.schema_version == 3 and migrate_v1(raw)["schema_version"] == 2
        for v in record.variants:
            _migrated(v, next(r for r in raw["variants"] if r["variant"] == v.variant))
    for path in results:
        _migrated(read_result(path), json.loads(path.read_text()))


def _migrated(v: VariantResult, raw: dict) -> None:
    assert not {"quantized", "simulated", "dense_engine"} & v.settings.model_dump().keys()
    assert (v.build is not None) == ("quantized" in raw["settings"] or "simulated" in raw["settings"])
    if raw.get("predicted"):
        assert v.predicted is not None and v.predicted.model_dump(exclude_none=True) == raw["predicted"]
    for m, r in zip(v.metrics, raw["metrics"], strict=True):
        assert m.name == r["name"] and m.value == pytest.approx(r["value"], nan_ok=True)
        if "kind" not in r:
            assert m.kind == meaning_of_name(m.name)["kind"]


# a version-2 run record of `run --parallel`: the scheduler's decisions in its env
V2_PACKED = {"schema_version": 2, "run_id": "r", "model": "m", "mode": "fake",
             "env": {"python": "3.12.3", "device": "cpu", "model_dir": "m",
                     "scheduler": {"kind": "local", "parallel": "auto", "limit": 2, "memory_gib": 31.2,
                                   "budget_gib": 28.1, "kv_pool": "throughput", "most_at_once": 2,
                                   "latency_pass": "pause"}},
             "variants": [{"schema_version": 2, "variant": "bf16", "status": "ok", "settings": {"dtype": "bfloat16"}}]}


def test_a_v2_run_records_scheduler_decisions_move_out_of_its_env(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps(V2_PACKED))
    rd = RunDir(tmp_path)
    record = rd.load_run()
    assert record.schema_version == 3 and record.variants[0].schema_version == 3
    assert record.scheduling is not None and record.scheduling.most_at_once == 2
    assert record.scheduling.latency_pass == "pause" and record.scheduling.kind == "local"
    assert record.env.device == "cpu" and "scheduler" not in record.env.model_dump()
    assert record.variants[0].task_versions == {}  # unknown in a record older than them
    rd.write_run(record)
    written = json.loads((tmp_path / "run.json").read_text())
    assert written["env"] == {"python": "3.12.3", "device": "cpu", "model_dir": "m"}  # as given, nothing added
    assert written["scheduling"] == V2_PACKED["env"]["scheduler"] and rd.load_run() == record


def test_a_run_without_a_scheduler_writes_no_scheduling(tmp_path):
    rd = RunDir(tmp_path)
    rd.write_run(RunRecord(run_id="r", model="m", env={"device": "cpu"}))
    assert "scheduling" not in json.loads((tmp_path / "run.json").read_text())
