"""The engine settings declared once (core/settings.py): vLLM's own names and values, and every place
that takes them (a variant, the planner, `evalsuite plan`, a claim) derived from that one declaration."""

from __future__ import annotations

import inspect
import json
from typing import get_args

import pytest
import yaml
from typer.testing import CliRunner

from evalsuite.check.schema import load_claims
from evalsuite.cli.main import app
from evalsuite.cli.plan import plan_command
from evalsuite.core.errors import ConfigError
from evalsuite.core.settings import GPU_MEMORY_UTILIZATION, KV_CACHE_DTYPES, MEMORY_SETTINGS, QUANTIZATIONS, EngineSettings, allowed_values
from evalsuite.memory import planner
from evalsuite.memory.planner import PlanSettings, kv_format, plan
from evalsuite.run.config import Variant
from evalsuite.run.footprint import plan_inputs
from tests.test_planner import LLAMA_8B

SAMPLE = {int: "16", float: "0.5"}  # a value of each plain type, as a command line gives it


def test_every_setting_is_a_vllm_engine_argument_with_vllms_values():
    """As vLLM's benchmarks take their options: EngineArgs.add_cli_args. Each flag exists and accepts
    each value the suite allows (argparse refuses a value outside vLLM's choices)."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
    for name, field in EngineSettings.model_fields.items():
        flag = "--" + name.replace("_", "-")
        if field.annotation == bool | None:
            assert getattr(parser.parse_args([flag]), name) is True, flag
            continue
        values = allowed_values(field.annotation) or [SAMPLE[t] for t in SAMPLE if t in (field.annotation, *get_args(field.annotation))]
        assert values, name
        for value in values:
            assert str(getattr(parser.parse_args([flag, str(value)]), name)) == str(value), (flag, value)
    assert set(QUANTIZATIONS) <= set(QUANTIZATION_METHODS)


@pytest.mark.parametrize("kv_cache_dtype", KV_CACHE_DTYPES)
def test_every_kv_cache_dtype_has_a_planner_entry(kv_cache_dtype):
    for cpu in (False, True):
        assert kv_format(kv_cache_dtype, "bfloat16", cpu=cpu).elem_bytes > 0


def test_a_kv_cache_dtype_allowed_without_a_planner_entry_is_said_so(monkeypatch):
    monkeypatch.setattr(planner, "KV_CACHE_DTYPES", (*KV_CACHE_DTYPES, "fp8_inc"))
    with pytest.raises(ConfigError, match="allowed but not modelled; give it an entry in evalsuite/memory/planner.py"):
        kv_format("fp8_inc", "bfloat16")


def test_variant_planner_cli_and_claims_take_the_same_settings():
    params = inspect.signature(plan_command).parameters
    for name in MEMORY_SETTINGS:
        assert name in Variant.model_fields and name in PlanSettings.model_fields and name in params, name
        declared = allowed_values(EngineSettings.model_fields[name].annotation)
        assert allowed_values(Variant.model_fields[name].annotation) == declared
        assert allowed_values(PlanSettings.model_fields[name].annotation) == declared
    assert "enable_prefix_caching" in Variant.model_fields and "enable_prefix_caching" not in PlanSettings.model_fields
    help_text = CliRunner().invoke(app, ["plan", "--help"], env={"COLUMNS": "400"}).output
    assert all(value in help_text for value in KV_CACHE_DTYPES)


def test_variant_fields_keep_the_recorded_order():
    """config.yaml and result.json record a variant in this order."""
    assert list(Variant.model_fields) == [
        "model", "dtype", "quantization", "quantize", "simulate", "kv_cache_dtype", "max_model_len", "max_num_seqs",
        "max_num_batched_tokens", "gpu_memory_utilization", "block_size", "enable_prefix_caching", "enforce_eager",
        "tensor_parallel_size", "pipeline_parallel_size", "engine_args"]


def test_a_variant_reaches_the_planner_with_every_memory_setting():
    v = Variant(dtype="float16", kv_cache_dtype="fp8", max_num_seqs=8, max_num_batched_tokens=4096,
                gpu_memory_utilization=0.5, block_size=32, enforce_eager=True, tensor_parallel_size=2,
                engine_args={"max_model_len": 8192, "kv_cache_dtype_skip_layers": [0, "1"]})
    inputs = plan_inputs(v)
    assert set(MEMORY_SETTINGS) <= set(inputs) and inputs["kv_cache_dtype_skip_layers"] == ("0", "1")
    p = plan(LLAMA_8B, **inputs)
    assert (p.dtype, p.kv_cache_dtype, p.max_num_seqs, p.max_num_batched_tokens, p.gpu_memory_utilization,
            p.block_size, p.cuda_graph_gib, p.tensor_parallel_size, p.max_model_len) == (
        "float16", "fp8", 8, 4096, 0.5, 32, 0.0, 2, 8192)
    assert plan(LLAMA_8B, **plan_inputs(Variant())).gpu_memory_utilization == GPU_MEMORY_UTILIZATION


def test_an_unset_gpu_memory_utilization_is_the_planners_and_reaches_the_engine_as_such():
    """The planner, the device watch and the engine read one share, whatever vLLM's own default."""
    import dataclasses

    from vllm.engine.arg_utils import EngineArgs

    from evalsuite.memory.sharing import DeviceWatch
    from evalsuite.run.config import RunConfig
    from evalsuite.run.engine_args import engine_args

    cfg = RunConfig.model_validate({"model": {"path": "/m"}, "variants": {"bf16": {}, "half": {
        "gpu_memory_utilization": 0.5}}})
    assert engine_args(cfg, cfg.variants["bf16"], "/m")[1]["gpu_memory_utilization"] == GPU_MEMORY_UTILIZATION
    assert engine_args(cfg, cfg.variants["half"], "/m")[1]["gpu_memory_utilization"] == 0.5
    assert DeviceWatch(None).gpu_memory_utilization == GPU_MEMORY_UTILIZATION
    vllms = {f.name: f.default for f in dataclasses.fields(EngineArgs)}["gpu_memory_utilization"]
    assert vllms == GPU_MEMORY_UTILIZATION  # the installed vLLM's: a user's `vllm serve` reserves the same


def test_dtypes_vllm_refuses_are_refused_before_the_engine():
    with pytest.raises(ValueError, match="dtype"):
        Variant(dtype="bf16")


def claims(settings: dict) -> dict:
    return {"claims": [{"id": "1", "text": "t", "where": "w", "checks": [
        {"what": "KV per token", "source": "planner", "model": "config.json", "metric": "kv_bytes_per_token",
         "settings": settings, "effect": {"kind": "value", "equals": 1}}]}]}


def test_a_claims_bad_setting_is_one_line_with_the_allowed_values(tmp_path):
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump(claims({"kv_cache_dtype": "fp9"})))
    with pytest.raises(ConfigError) as e:
        load_claims(path)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg and "checks.0.settings.kv_cache_dtype" in msg and "'fp9'" in msg
    assert all(v in msg for v in KV_CACHE_DTYPES)
    path.write_text(yaml.safe_dump(claims({"tensor_parallel_size": 2, "kv_cache_dtype_skip_layers": ["0"]})))
    assert load_claims(path).claims[0].checks[0].settings.model_dump(exclude_unset=True) == {
        "tensor_parallel_size": 2, "kv_cache_dtype_skip_layers": ("0",)}


def test_plan_cli_bad_value_is_one_line_exit_2(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_8B))
    res = CliRunner().invoke(app, ["plan", str(tmp_path), "--block-size", "0"])
    assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
    # the command line's value: the flag, the value and what is allowed, not the model file it did not come from
    assert res.output == "evalsuite: error: --block-size: 0; allowed: above 0\n"
