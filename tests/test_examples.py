"""The shipped example configs for real models (configs/examples/) and `evalsuite plan` on a Hugging
Face id or an evalsuite config: checked against the models' config.json shapes (configs/models/),
placed in a local Hugging Face cache as a download would leave them, without any weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalsuite.cli.main import app
from evalsuite.run import needs
from evalsuite.run.config import load_config

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((REPO / "evalsuite" / "configs" / "examples").glob("*.yaml"))
SHAPES = REPO / "configs" / "models"
AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}
GPTQ = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True}
# Every model id the examples name, with the shape (and quantization_config) of its config.json.
REPOS = {
    "meta-llama/Llama-3.1-8B-Instruct": ("llama-3.1-8b.json", None),
    "hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4": ("llama-3.1-8b.json", AWQ),
    "hugging-quants/Meta-Llama-3.1-8B-Instruct-GPTQ-INT4": ("llama-3.1-8b.json", GPTQ),
    "Qwen/Qwen2.5-7B-Instruct": ("qwen2.5-7b.json", None),
    "Qwen/Qwen2.5-7B-Instruct-AWQ": ("qwen2.5-7b.json", AWQ),
    "Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4": ("qwen2.5-7b.json", GPTQ),
}


def cache_repo(cache: Path, repo_id: str, config: dict, commit: str = "0" * 40) -> Path:
    """A Hugging Face hub cache entry as `hf download` leaves it: refs/main -> snapshots/<commit>."""
    root = cache / f"models--{repo_id.replace('/', '--')}"
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text(commit)
    snap = root / "snapshots" / commit
    snap.mkdir(parents=True, exist_ok=True)
    (snap / "config.json").write_text(json.dumps(config))
    return snap / "config.json"


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    for repo_id, (shape, quant) in REPOS.items():
        config = json.loads((SHAPES / shape).read_text())
        cache_repo(cache, repo_id, {**config, "quantization_config": quant} if quant else config)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(cache))
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", "http://127.0.0.1:9")  # no hub: what the cache holds
    needs.hub_problem.cache_clear()
    yield cache
    needs.hub_problem.cache_clear()


def cli(*args: str):
    return CliRunner().invoke(app, list(args))


def test_the_examples_cover_both_models_at_32k_and_128k():
    names = {p.stem for p in EXAMPLES}
    assert names == {"llama-3.1-8b-instruct", "llama-3.1-8b-instruct-128k", "qwen2.5-7b-instruct",
                     "qwen2.5-7b-instruct-128k", "qwen2.5-7b-instruct-capacity"}
    assert (REPO / "configs" / "examples").resolve() == EXAMPLES[0].parent  # the repo's view of the package's


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_each_example_names_the_mission_variants_on_a_hf_model(path):
    cfg = load_config(path)
    assert cfg.model.hf in {r for r in REPOS} and cfg.model.revision
    kinds = {(v.quantization, v.kv_cache_dtype, bool(v.model), tuple(v.engine_args.get("kv_cache_dtype_skip_layers", ())))
             for v in cfg.variants.values()}
    assert {(None, "auto", False, ()), ("fp8", "auto", False, ()), (None, "fp8", False, ()), ("fp8", "fp8", False, ()),
            (None, "fp8", False, ("0", "1")), (None, "int8_per_token_head", False, ())} <= kinds
    assert {v.model for v in cfg.variants.values() if v.model} <= set(REPOS)
    assert max(v.max_model_len for v in cfg.variants.values()) == (131072 if path.stem.endswith("128k") else 32768)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_variant_of_every_example_fits_an_h200(path, hf_cache):
    """vLLM would start each: max_model_len within the model's limit (Qwen's 128K through YaRN), and one
    request at it in the KV cache. The INT4 checkpoints' weights are a third of bf16's."""
    res = cli("plan", str(path), "--gpu", "H200", "--format", "json")
    assert res.exit_code == 0, res.output
    plans = json.loads(res.output)
    assert set(plans) == set(load_config(path).variants)
    for name, p in plans.items():
        assert p["fits"] and p["max_len_limit"] >= p["max_model_len"], (name, p)
    assert plans["awq_int4"]["weights_gib"] < plans["bf16"]["weights_gib"] * 0.45
    assert plans["kv_fp8"]["kv_bytes_per_token"] * 2 == plans["bf16"]["kv_bytes_per_token"]
    skip = plans["kv_fp8_skip_layers_0_1"]["kv_bytes_per_token"]
    assert plans["kv_fp8"]["kv_bytes_per_token"] < skip < plans["bf16"]["kv_bytes_per_token"]


def test_every_variant_of_the_gpu_starter_fits_a_24_gb_card(hf_cache):
    """`init --device gpu`'s starter on the smallest cards it names (L4, A10G: 22 GiB as torch sees them)."""
    starter = REPO / "evalsuite" / "configs" / "starter-gpu.yaml"
    for gpu in ("L4", "A10G"):
        res = cli("plan", str(starter), "--gpu", gpu, "--format", "json")
        assert res.exit_code == 0, res.output
        plans = json.loads(res.output)
        assert set(plans) == set(load_config(starter).variants)
        for name, p in plans.items():
            assert p["fits"] and p["max_len_limit"] >= p["max_model_len"] == 16384, (gpu, name, p)
    kinds = {t.type: t for t in load_config(starter).tasks}
    assert {"mmlu", "legal", "needle", "ruler"} <= set(kinds)  # a sample of every kind a stranger will meet
    assert max(kinds["ruler"].lengths) <= 16384 and len(kinds["ruler"].tasks) == 11  # all eleven


def test_plan_reads_a_hf_id_from_the_local_cache(hf_cache):
    res = cli("plan", "Qwen/Qwen2.5-7B-Instruct", "--max-model-len", "32768", "--format", "json")
    assert res.exit_code == 0, res.output
    p = json.loads(res.output)
    assert p["kv_bytes_per_token"] == 28 * 4 * 128 * 2 * 2 and p["max_len_limit"] == 32768 and p["fits"]


def test_plan_of_a_hf_id_absent_from_the_cache_is_one_line_and_exit_2(hf_cache):
    res = cli("plan", "nobody/absent-model")
    assert res.exit_code == 2
    assert res.output.count("\n") == 1 and ("nobody/absent-model: no such file or folder here, and no config.json "
                                            "for it in the local Hugging Face cache") in res.output


def test_plan_fits_agrees_with_vllms_length_check():
    """Llama-2-7B is a 4K model: at 128K vLLM refuses to start whatever the memory, and plan says so once
    (and exits 1, as vLLM would refuse)."""
    res = cli("plan", str(SHAPES / "llama-2-7b.json"), "--max-model-len", "131072")
    assert res.exit_code == 1, res.output
    fits = next(line for line in res.output.splitlines() if line.startswith("fits"))
    assert "does not fit: max_model_len 131,072 is above the model's 4,096" in fits
    assert json.loads(cli("plan", str(SHAPES / "llama-2-7b.json"), "--max-model-len", "131072", "--format", "json").output)["fits"] is False
    assert "fits                      yes" in cli("plan", str(SHAPES / "llama-2-7b.json"), "--max-model-len", "4096").output


def test_plan_of_a_config_prints_one_row_per_variant(hf_cache):
    res = CliRunner().invoke(app, ["plan", "examples/qwen2.5-7b-instruct", "-V", "bf16", "-V", "kv_fp8"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    rows = [line for line in res.output.splitlines() if line.startswith("│")]
    assert [r.split("│")[1].strip() for r in rows] == ["bf16", "kv_fp8"] and all("yes" in r for r in rows)


def test_plan_predicts_the_users_a_kv_pool_holds_for_the_capacity_example(hf_cache):
    """The users whose 32,000 + 256 tokens the predicted pool holds whole: FP8 KV about twice bf16's."""
    res = cli("plan", "examples/qwen2.5-7b-instruct-capacity", "-V", "bf16", "-V", "kv_fp8", "--gpu", "H100",
              "--format", "json")
    assert res.exit_code == 0, res.output
    plans = json.loads(res.output)
    bf16, fp8 = (plans[v]["capacity_kv_users"] for v in ("bf16", "kv_fp8"))
    p = plans["bf16"]
    assert bf16["32000"] == p["kv_capacity_tokens"] // (-(-32256 // p["block_size"]) * p["block_size"])
    assert 1.9 <= fp8["32000"] / bf16["32000"] <= 2.1 and bf16["1024"] > bf16["32000"]
    table = CliRunner().invoke(app, ["plan", "examples/qwen2.5-7b-instruct-capacity", "-V", "bf16", "--gpu", "H100"],
                               env={"COLUMNS": "250"})
    assert "users @32,000 (KV)" in table.output and f"{bf16['32000']:,}" in table.output


def _config(tmp_path: Path, model: str, variants: str = "{bf16: {}, awq: {model: org/m-awq}}") -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(f"model: {model}\nvariants: {variants}\nengine: {{mode: fake}}\n")
    return p


def test_a_hf_model_with_a_revision_reaches_the_engine_for_its_own_variants_only(tmp_path):
    from evalsuite.run.engine_args import engine_args
    from evalsuite.run.session import resolve_model

    cfg = load_config(_config(tmp_path, "{hf: org/m, revision: abc123}"))
    assert resolve_model(cfg, tmp_path, tmp_path) == "org/m" and cfg.model.source == "org/m"
    _, base = engine_args(cfg, cfg.variants["bf16"], "org/m")
    assert base["revision"] == base["tokenizer_revision"] == "abc123"
    assert "revision" not in engine_args(cfg, cfg.variants["awq"], "org/m")[1]  # its own repo


@pytest.mark.parametrize("model, message", [
    ("{hf: org/m, path: /x}", "give exactly one of path, gguf, pypi, hf"),
    ("{path: /x, revision: abc}", "revision: applies to a Hugging Face id (hf), not to path"),
])
def test_bad_model_sources_are_one_line(tmp_path, model, message):
    res = cli("validate", str(_config(tmp_path, model)))
    assert res.exit_code == 2 and message in res.output and res.output.count("\n") == 1, res.output


def test_the_install_line_of_the_readme_carries_what_the_examples_run():
    """`pip install ".[gpu]"` (and `.[cpu]`) then `evalsuite run examples/NAME`: the examples' RULER
    task needs lm-eval's RULER code, so both extras carry it, at the version its items are checked
    against (tests/test_ruler.py)."""
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    types = {t.type for path in EXAMPLES for t in load_config(path).tasks}
    assert "ruler" in types
    for extra in ("gpu", "cpu"):
        assert "lm-eval[ruler]==0.4.13" in extras[extra], extra
    assert 'pip install ".[gpu]"' in (REPO / "README.md").read_text()
