"""Roofline floors, and how the issue's H200 figures (TTFT ~8.2 s, ITL ~6.9 ms) come about."""

from __future__ import annotations

import pytest

from evalsuite.memory.devices import DEVICES
from evalsuite.memory.planner import model_shape, param_counts
from evalsuite.memory.roofline import (
    active_linear_params,
    causal_pairs,
    pct_of_floor,
    prefill_flops,
    roofline,
)
from tests.shapes import LLAMA_8B

T = 130_000
H200 = DEVICES["H200"]


def test_attention_flops_follow_the_issue_formula():
    _, attention = prefill_flops(model_shape(LLAMA_8B), T)
    assert attention == pytest.approx(2 * 2 * 32 * 32 * 128 * T * T / 2)


def test_h200_bf16_floors():
    r = roofline(LLAMA_8B, prompt_tokens=T, gpu="H200", measured_ttft_s=10.31, measured_itl_ms=9.28)
    # 2 x 6.98e9 linear params x T + causal attention, at 989.4 TFLOP/s
    assert r.ttft_floor_s == pytest.approx(6.31, abs=0.02)
    # lm_head + blocks (15.0e9 B) + 130K x 128 KiB of KV (17.0e9 B) at 4.8 TB/s
    assert r.itl_floor_ms == pytest.approx(6.68, abs=0.02)
    assert r.ttft_pct_of_floor == pytest.approx(100 * 10.31 / r.ttft_floor_s, abs=0.1)
    assert r.itl_pct_of_floor > 100


def test_issue_figures_reproduced_under_their_assumptions():
    s = model_shape(LLAMA_8B)
    total = param_counts(s).total
    _, attention = prefill_flops(s, T)
    # ~8.2 s: every parameter (embeddings too) in 2*N*T, causal attention, at 80% of the dense peak
    ttft = (2 * total * T + attention) / (0.8 * H200.bf16_tflops * 1e12)
    assert ttft == pytest.approx(8.2, abs=0.05)
    # ~6.9 ms: the whole bf16 checkpoint (input embedding table included) plus the KV, at 4.8 TB/s
    itl_ms = (2 * total + T * 131072) / (H200.hbm_tbps * 1e12) * 1e3
    assert itl_ms == pytest.approx(6.9, abs=0.01)


def test_fp8_lowers_both_floors():
    bf16 = roofline(LLAMA_8B, prompt_tokens=T)
    fp8 = roofline(LLAMA_8B, prompt_tokens=T, quantization="fp8", kv_cache_dtype="fp8")
    assert fp8.ttft_floor_s < bf16.ttft_floor_s / 1.9
    assert fp8.itl_floor_ms < bf16.itl_floor_ms * 0.55
    # the measured fp8 + fp8 KV run (8.21 s, 6.85 ms) stays above its own floor
    assert fp8.itl_floor_ms < 6.85 and fp8.ttft_floor_s < 8.21


def test_no_fp8_tensor_cores_means_bf16_compute():
    a100 = roofline(LLAMA_8B, prompt_tokens=8192, gpu="A100-80GB", quantization="fp8")
    assert a100.linear_peak_tflops == DEVICES["A100-80GB"].bf16_tflops


def test_short_prompt_prefill_can_be_memory_bound():
    r = roofline(LLAMA_8B, prompt_tokens=1, gpu="H200")
    assert r.prefill_memory_s > r.prefill_compute_s
    assert r.ttft_floor_s == r.prefill_memory_s


def test_itl_grows_with_context():
    short = roofline(LLAMA_8B, prompt_tokens=T, context_tokens=1024)
    assert short.itl_floor_ms < roofline(LLAMA_8B, prompt_tokens=T).itl_floor_ms


def test_sliding_window_pairs_and_moe_active_params():
    assert causal_pairs(100) == 5000
    assert causal_pairs(100, window=10) == 50 + 90 * 10
    mixtral = {**LLAMA_8B, "model_type": "mixtral", "vocab_size": 32000, "num_local_experts": 8,
               "num_experts_per_tok": 2}
    s = model_shape(mixtral)
    assert active_linear_params(s) < param_counts(s).linear / 3


def test_pct_of_floor_edges():
    assert pct_of_floor(None, 1.0) is None
    assert pct_of_floor(2.0, 0.0) is None
    assert pct_of_floor(2.0, 1.0) == 200.0
