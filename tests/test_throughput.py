"""A packed engine's KV pool sized for throughput (evalsuite.memory.throughput), checked against
throughput curves measured on real engines: tests/data/throughput/*.json, each with its source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalsuite.memory.planner import plan
from evalsuite.memory.throughput import (FLAT, Curve, Shape, _costs, busy_concurrency, estimate, load_curves, nearest,
                                         saturation, wave_rate)
from evalsuite.run.config import Variant
from evalsuite.run.pools import busy_pool

DATA = Path(__file__).parent / "data" / "throughput"
ROOT = Path(__file__).parent.parent
LLAMA8B = json.loads((ROOT / "configs" / "models" / "llama-3.1-8b.json").read_text())


def curve(name: str) -> Curve:
    return Curve.model_validate(json.loads((DATA / name).read_text()))


def rate_at(c: Curve, concurrency: int) -> float:
    return max(p.requests_per_s for p in c.points if p.concurrency == concurrency)


def test_the_h200_curve_at_64k_is_flat_from_four_requests():
    c = curve("h200-llama8b-65536x128.json")
    assert saturation(c) == 4  # four at once serve as fast as eight, within 5%
    assert rate_at(c, 4) / rate_at(c, 8) == pytest.approx(0.982, abs=0.002)


def test_the_roofline_estimate_agrees_with_the_measured_h200_curve():
    """The estimate for the measured shape asks for no more requests than the curve needs to flatten,
    and its throughput at 4 against 8 requests is the measured one within 2 points."""
    c = curve("h200-llama8b-65536x128.json")
    est = estimate(LLAMA8B, c.shape, "H200", 16384, most=8)
    assert est is not None and est <= saturation(c)
    costs = _costs(LLAMA8B, c.shape, "H200", {})
    modelled = wave_rate(costs, c.shape, 4, 16384) / wave_rate(costs, c.shape, 8, 16384)
    assert modelled == pytest.approx(rate_at(c, 4) / rate_at(c, 8), abs=0.02)


def test_a_pool_from_the_measured_curve_holds_the_flat_concurrency_not_the_batch():
    """A task of eight 64K requests a batch: the batch's sizing holds all eight; from the curve, the
    pool holds four, half the memory, for at least FLAT of the best measured throughput."""
    c = curve("h200-llama8b-65536x128.json")
    p = plan(LLAMA8B, gpu="H200", max_model_len=131072)
    request = c.prompt_tokens + c.output_tokens
    bands = [("overcap", c.shape, 8, 8 * request)]
    tokens, how = busy_pool(LLAMA8B, p, Variant(), "H200", bands, [c])
    assert tokens == 4 * request and how["overcap@65536"]["source"] == "measured"
    assert rate_at(c, tokens // request) >= FLAT * max(pt.requests_per_s for pt in c.points)
    # without the curve the roofline sizes it, never above the batch
    tokens, how = busy_pool(LLAMA8B, p, Variant(), "H200", bands, [])
    assert tokens <= 4 * request and how["overcap@65536"]["source"] == "roofline"


def test_short_prompts_need_many_at_once_long_ones_few_long_answers_more():
    """On the H200's 16,384-token steps, MMLU-sized prompts need dozens at once to fill the steps in
    flight, 32K prompts with short answers a handful; decoding 128 tokens each asks for more at once
    (a decode step reads the weights once for the whole batch); FP8 weights prefill faster, so as many
    or more."""
    short = estimate(LLAMA8B, Shape(700, 1), "H200", 16384, most=1024)
    long = estimate(LLAMA8B, Shape(32768, 16), "H200", 16384, most=1024)
    assert short == 47 and long <= 4  # 2 x 16,384 tokens in flight over 700-token prompts
    assert estimate(LLAMA8B, Shape(32768, 128), "H200", 16384, most=1024) > 2 * long
    fp8 = estimate(LLAMA8B, Shape(32768, 16), "H200", 16384, most=1024, settings={"quantization": "fp8"})
    assert fp8 >= long


def test_a_cpu_has_no_roofline_estimate_but_uses_a_curve_by_tokens(tmp_path):
    assert estimate(LLAMA8B, Shape(512, 8), "cpu", 512, most=64) is None
    measured = Curve(model="m", device="cpu", prompt_tokens=512, output_tokens=8, source="test",
                     points=[{"concurrency": 1, "requests_per_s": 1.0}, {"concurrency": 2, "requests_per_s": 1.9},
                             {"concurrency": 4, "requests_per_s": 2.0}])
    assert busy_concurrency(LLAMA8B, Shape(512, 8), "cpu", 512, 64, [measured]) == (2, "measured")
    # a quarter of the prompt: four times the requests for the same tokens in flight
    assert busy_concurrency(LLAMA8B, Shape(128, 2), "cpu", 512, 64, [measured]) == (8, "measured, by tokens")
    assert busy_concurrency(LLAMA8B, Shape(128, 2), "cpu", 512, 64, []) == (None, "no curve, and no roofline on this device")


def test_curves_are_found_by_model_and_device_and_a_bad_file_is_passed_over(tmp_path):
    folder = tmp_path / "throughput"
    folder.mkdir()
    c = curve("h200-llama8b-65536x128.json")
    (folder / "good.json").write_text(c.model_dump_json())
    (folder / "bad.json").write_text("{not json")
    (folder / "other.json").write_text(c.model_copy(update={"device": "H100-SXM"}).model_dump_json())
    found = load_curves(tmp_path, "llama-3.1-8b-shape", "h200")
    assert [x.device for x in found] == ["H200"]
    assert load_curves(None, "llama-3.1-8b-shape", "H200") == []
    assert nearest(found, Shape(32768, 16)) == c


def test_a_packed_engine_gets_the_throughput_pool_unless_the_config_asks_for_the_batch(tmp_path):
    from evalsuite.run.pools import predict_need

    (tmp_path / "config.json").write_text(json.dumps(LLAMA8B))  # the planner reads the shape alone
    v = Variant(max_model_len=32768, dtype="bfloat16")
    bands = [("needle", Shape(32768, 16), 256, 256 * 32784)]
    busy = predict_need(str(tmp_path), v, "NVIDIA H200", 139.8, bands)
    batch = predict_need(str(tmp_path), v, "NVIDIA H200", 139.8, bands, sizing="batch")
    assert busy.pool["needle@32768"] == {"requests": 2, "of": 256, "tokens": 2 * 32784, "source": "roofline"}
    assert busy.kv_cache_memory_bytes == pytest.approx(2 * 32784 * 131072, rel=0.01)  # 128 KiB a token
    assert batch.kv_cache_memory_bytes == pytest.approx(128 * busy.kv_cache_memory_bytes, rel=0.01)
    assert "pool" not in batch


def test_a_task_of_mixed_lengths_is_sized_band_by_band():
    """RULER's 4K items need many at once and its 32K items few: each band of prompt lengths
    (2^(k-1), 2^k] gets its own shape (its longest prompt and answer, the mean answer expected:
    the target's characters and two, or every token of a request that ignores EOS) and batch need."""
    from evalsuite.core.types import Request, Sample
    from evalsuite.run.pools import shapes

    task = type("T", (), {"name": "ruler", "batch_size": None})()
    items = [(4000, 128, "5233394", False), (4096, 30, "a b c", False), (32000, 50, "x", True), (32768, 128, "", False)]
    samples = {"ruler": [Sample(id=str(i), task="ruler", target=target,
                                request=Request(prompt_token_ids=[1] * n, max_tokens=out, ignore_eos=forced))
                         for i, (n, out, target, forced) in enumerate(items)]}
    bands = shapes([task], samples, batch_size=16, batch_tokens=100_000)
    assert bands == [("ruler", Shape(4096, 128, 8), 16, 16 * 4224),  # (9 + 7) / 2
                     ("ruler", Shape(32768, 128, 26), 16, 100_000 + 16 * 128)]  # (50 + 2) / 2


def test_every_packed_pool_holds_the_tokens_the_neediest_variant_asks(tmp_path):
    """FP8 KV attends at FP8's peak and reads half the bytes a decode step, so its own estimate
    differs from bf16's; the plan gives every pool the most any variant needs, so that the engines
    hold alike many requests and their KV capacity figures compare (each keeps its own estimate)."""
    from evalsuite.run.pools import plan_pools

    (tmp_path / "config.json").write_text(json.dumps(LLAMA8B))
    todo = {"bf16": Variant(max_model_len=32768), "kv_fp8": Variant(max_model_len=32768, kv_cache_dtype="fp8")}
    bands = [("ruler", Shape(4096, 128, 64), 1024, 1024 * 4224)]
    plans = plan_pools(str(tmp_path), todo, "NVIDIA H200", 139.8, bands, None, "throughput")
    own = {n: p.pool_tokens_own or p.pool_tokens for n, p in plans.items()}
    assert own["kv_fp8"] != own["bf16"]
    assert plans["kv_fp8"].pool_tokens == plans["bf16"].pool_tokens == max(own.values())
    assert plans["kv_fp8"].kv_cache_memory_bytes == pytest.approx(plans["bf16"].kv_cache_memory_bytes / 2, rel=0.01)


def test_on_the_demos_cpu_the_curve_rises_through_eight_so_the_pool_keeps_them():
    """Measured on a 2-core CPU (the demo's model): 64-token prompts gain 5.4x from 1 to 8 at once,
    512-token ones 1.2x; neither is flat before 8, so the pool sized from them holds all 8, the CPU's
    cores being what a batch of requests shares there."""
    short, long = curve("cpu-gemma3-270m-64x8.json"), curve("cpu-gemma3-270m-512x8.json")
    assert saturation(short) == saturation(long) == 8
    assert rate_at(short, 8) / rate_at(short, 1) > 5
    assert busy_concurrency(LLAMA8B, Shape(512, 8), "cpu", 512, 64, [short, long]) == (8, "measured")


QWEN_15B = {"model_type": "qwen2", "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
            "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936,
            "max_position_embeddings": 32768, "tie_word_embeddings": True, "torch_dtype": "bfloat16"}


def test_on_an_h100_the_1_5b_pool_holds_where_each_measured_shape_flattens():
    """Qwen2.5-Coder-1.5B on one H100 (docs/results/h100-2026-12-06-qwen2.5-coder-1.5b-decision.md):
    MMLU-sized prompts flatten from 256 at once, RULER's 4K from 64, 32K prompts from 2. The pool
    holds each band's flat concurrency, the 4K band's the largest, for at least FLAT of each curve's
    best: a 1,024-request batch's pool would be hundreds of times larger. The roofline alone asks
    for 47 MMLU-sized prompts where 256 were measured (its steps fill before the GPU's compute does),
    and for 3 long prompts where 2 do: the measured curve is what sizes the pool."""
    c700, c4k, c32k = (curve(f"h100-qwen2.5-coder-1.5b-{s}.json") for s in ("700x1", "4096x41", "32000x16"))
    assert [saturation(c) for c in (c700, c4k, c32k)] == [256, 64, 2]
    p = plan(QWEN_15B, gpu="H100-SXM", max_model_len=32768)
    bands = [(name, c.shape, 1024, 1024 * (c.prompt_tokens + c.output_tokens))
             for name, c in (("mmlu", c700), ("ruler", c4k), ("needle", c32k))]
    tokens, how = busy_pool(QWEN_15B, p, Variant(), "H100-SXM", bands, [c700, c4k, c32k])
    assert tokens == 64 * (4096 + 41)
    for c in (c700, c4k, c32k):
        band = next(b for k, b in how.items() if k.endswith(f"@{c.prompt_tokens}"))
        assert band["source"] == "measured" and band["requests"] == saturation(c)
        assert rate_at(c, band["requests"]) >= FLAT * max(pt.requests_per_s for pt in c.points)
    assert max(need for *_, need in bands) > 100 * tokens
    step = p.max_num_batched_tokens
    assert estimate(QWEN_15B, c700.shape, "H100-SXM", step, most=256) == 47
    assert estimate(QWEN_15B, c32k.shape, "H100-SXM", step, most=16) == 3
