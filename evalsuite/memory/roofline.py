"""Latency floors from the hardware's peaks: how far a measured TTFT or ITL is from the best possible.

Prefill is compute-bound: FLOPs = 2 x active linear params x T (every token through every
matmul; logits only for the last token) + causal attention 2 x 2 x layers x heads x head_dim x T^2/2
(QK^T and PV, 2 FLOPs per multiply-add, half the score matrix). Decode is bandwidth-bound: each
new token reads every weight it uses once plus the KV cache of its context.

A floor is a lower bound, not a forecast: measured latencies sit well above it (docs/benchmarks.md,
"Measurements behind constants in code").
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from evalsuite.memory.devices import get_device
from evalsuite.memory.planner import (
    KVFormat,
    ModelShape,
    dtype_bytes,
    kv_bytes_per_layer_token,
    kv_format,
    layer_kv_formats,
    model_shape,
    param_counts,
    per_layer,
    quant_scheme,
    resolve_dtype,
)


class Roofline(BaseModel):
    model_config = ConfigDict(extra="forbid")

    device: str
    prompt_tokens: int
    context_tokens: int
    linear_flops: float
    attention_flops: float
    linear_peak_tflops: float
    attention_peak_tflops: float
    prefill_compute_s: float
    prefill_memory_s: float  # weights read once + KV written once
    ttft_floor_s: float
    decode_bytes_per_token: float
    itl_floor_ms: float
    measured_ttft_s: float | None = None
    measured_itl_ms: float | None = None
    ttft_pct_of_floor: float | None = None  # measured / floor x 100: 100 is the roofline, higher is slower
    itl_pct_of_floor: float | None = None


def causal_pairs(tokens: int, window: int | None = None) -> float:
    """Query-key pairs a causal (optionally sliding-window) attention computes over `tokens`."""
    if window is None or tokens <= window:
        return tokens * tokens / 2
    return window * window / 2 + (tokens - window) * window


def active_linear_params(s: ModelShape) -> int:
    """Linear weights one token passes through: MoE layers count only the routed top-k and shared experts."""
    total = param_counts(s).linear
    if not s.num_experts:
        return total
    moe_layers = s.num_layers - s.dense_layers
    idle = s.num_experts - s.experts_per_token
    return total - moe_layers * 3 * s.hidden * idle * s.moe_intermediate


def prefill_flops(s: ModelShape, tokens: int) -> tuple[float, float]:
    """(linear, attention) FLOPs of prefilling `tokens` in one go."""
    linear = 2.0 * active_linear_params(s) * tokens + 2.0 * s.vocab * s.hidden  # logits of the last token
    if s.kv_lora_rank:  # MLA scores over nope+rope dims, values over v_head_dim
        dims = s.heads * (s.qk_nope_head_dim + s.qk_rope_head_dim + s.v_head_dim)
    else:
        dims = s.heads * 2 * s.head_dim
    attention = 0.0
    for kind in s.layer_kinds:
        if kind != "none":
            window = s.sliding_window if kind == "sliding" else None
            attention += 2.0 * dims * causal_pairs(tokens, window)
    return linear, attention


def decode_bytes_per_token(s: ModelShape, weight_bytes_per_param: float, dtype_bytes: int,
                           kv: KVFormat | tuple[KVFormat, ...], context: int) -> float:
    """Bytes one decode step reads at batch 1: the weights it uses (an untied input embedding is a
    gather of one row, not a read of the table) and the KV cache of `context` tokens (kv: one format,
    or one per layer)."""
    counts = param_counts(s)
    head = (counts.lm_head or counts.embed) * dtype_bytes
    weights = active_linear_params(s) * weight_bytes_per_param + head + counts.other * dtype_bytes
    total = 0.0
    for kind, fmt in zip(s.layer_kinds, per_layer(s, kv), strict=True):
        if kind != "none":
            seen = min(context, s.sliding_window) if kind == "sliding" and s.sliding_window else context
            total += kv_bytes_per_layer_token(s, fmt) * seen
    return weights + total


def pct_of_floor(measured: float | None, floor: float) -> float | None:
    return None if measured is None or floor <= 0 else round(100.0 * measured / floor, 1)


def roofline(config: dict, *, prompt_tokens: int, context_tokens: int | None = None, gpu: str = "H200",
             quantization: str | None = None, kv_cache_dtype: str = "auto", dtype: str | None = None,
             measured_ttft_s: float | None = None, measured_itl_ms: float | None = None,
             compute_efficiency: float = 1.0, bandwidth_efficiency: float = 1.0,
             kv_cache_dtype_skip_layers: Sequence[str] = ()) -> Roofline:
    """Floors for TTFT of a `prompt_tokens` prefill and ITL at `context_tokens` (default: the prompt).

    Efficiencies below 1 turn the floor into a "realistic best" (e.g. 0.8 of the dense peak)."""
    s = model_shape(config)
    device = get_device(gpu)
    model_dtype = resolve_dtype(s, dtype)
    act = dtype_bytes(model_dtype)
    kv = kv_format(kv_cache_dtype, model_dtype, cpu=device.kind == "cpu")
    scheme = quant_scheme(config, quantization, device, act)
    fp8 = device.fp8_tflops or device.bf16_tflops
    lin_peak = (fp8 if scheme.fp8_compute else device.bf16_tflops) * compute_efficiency
    att_peak = (fp8 if kv.fp8_attention else device.bf16_tflops) * compute_efficiency
    linear, attention = prefill_flops(s, prompt_tokens)
    compute_s = linear / (lin_peak * 1e12) + attention / (att_peak * 1e12)
    bw = device.hbm_tbps * 1e12 * bandwidth_efficiency
    layers_kv = layer_kv_formats(s, kv, model_dtype, kv_cache_dtype_skip_layers)  # with "auto" every layer is 16-bit anyway
    once = decode_bytes_per_token(s, scheme.bytes_per_param(), act, layers_kv, prompt_tokens)  # weights + whole KV once
    memory_s = once / bw
    ctx = context_tokens if context_tokens is not None else prompt_tokens
    step = decode_bytes_per_token(s, scheme.bytes_per_param(), act, layers_kv, ctx)
    ttft, itl = max(compute_s, memory_s), step / bw * 1e3
    return Roofline(
        device=device.name, prompt_tokens=prompt_tokens, context_tokens=ctx, linear_flops=linear,
        attention_flops=attention, linear_peak_tflops=lin_peak, attention_peak_tflops=att_peak,
        prefill_compute_s=round(compute_s, 4), prefill_memory_s=round(memory_s, 4), ttft_floor_s=round(ttft, 4),
        decode_bytes_per_token=step, itl_floor_ms=round(itl, 4), measured_ttft_s=measured_ttft_s,
        measured_itl_ms=measured_itl_ms, ttft_pct_of_floor=pct_of_floor(measured_ttft_s, ttft),
        itl_pct_of_floor=pct_of_floor(measured_itl_ms, itl),
    )
