"""Predicted next to measured: the planner's view of a variant beside what the engine said, the
record's engine figures made from both (a simulated variant's memory is the planner's), and the
roofline's floor under the measured latency."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psutil

from evalsuite.core.settings import MEMORY_SETTINGS
from evalsuite.core.types import ITL_P50, TTFT_P50, EngineStats, Metric, Prediction, VariantResult
from evalsuite.core.units import GIB
from evalsuite.memory.logparse import with_derived
from evalsuite.models.checkpoint import is_gguf
from evalsuite.run.config import Variant, variant_max_len

PREDICTED_KEYS = ("weights_gib", "kv_bytes_per_token", "kv_bytes_per_block", "kv_capacity_tokens", "kv_cache_blocks",
                  "kv_cache_gib",
                  "max_concurrency", "activation_gib", "cuda_graph_gib", "non_torch_gib", "required_gib",
                  "block_size", "max_model_len", "max_num_seqs", "device", "gpu_count")

# A GGUF variant: what depends on the architecture alone (its `hf_config_path` is the imported folder),
# and, where the KV pool is fixed in bytes, the capacity; the rest would be a bf16 model's figures.
GGUF_KEYS = ("kv_bytes_per_token", "kv_bytes_per_block", "block_size", "max_model_len", "device", "gpu_count")
GGUF_POOL_KEYS = ("kv_capacity_tokens", "kv_cache_blocks", "kv_cache_gib", "max_concurrency")


def planner_gpu(device: str | None) -> str:
    """The planner's device key: the GPU's name, or cpu when the engine runs on the CPU."""
    from evalsuite.memory.devices import from_nvml_name

    if not device or device.startswith("CPU"):
        return "cpu"
    return from_nvml_name(device) or device


def plan_inputs(variant: Variant) -> dict[str, Any]:
    """The planner's settings for a variant: its memory settings (unset ones the planner fills as vLLM
    does), with max_model_len and the KV layers kept in the model's dtype also where engine_args holds them."""
    skip = variant.vllm_kwargs().get("kv_cache_dtype_skip_layers") or ()
    return {**variant.model_dump(include=set(MEMORY_SETTINGS)), "max_model_len": variant_max_len(variant),
            "kv_cache_dtype_skip_layers": tuple(str(layer) for layer in skip)}


def with_overrides(config: dict[str, Any], *overrides: dict[str, Any]) -> dict[str, Any]:
    """config.json as vLLM reads it after hf_overrides, which replace top-level keys (the model's
    first, a variant's engine_args over them)."""
    out = dict(config)
    for o in overrides:
        out.update(o or {})
    return out


def predict(model_dir: str, variant: Variant, stats: EngineStats, device: str | None,
            quantization_config: dict[str, Any] | None = None) -> Prediction | None:
    """The planner's numbers for this variant, with the engine's own KV budget where it was fixed.

    `quantization_config` stands in for the checkpoint's own: a simulated variant's dense copy
    has none, and its memory is predicted for the INT4 checkpoint it stands for. `model_dir` is the
    folder whose config.json describes the model: for a `.gguf` variant, the imported folder."""
    from evalsuite.memory.planner import plan

    path = Path(model_dir) / "config.json"
    if not path.exists():
        return None
    config = json.loads(path.read_text())
    gguf = is_gguf(variant.model)
    if quantization_config is not None:
        config["quantization_config"] = quantization_config
    kv_bytes = variant.vllm_kwargs().get("kv_cache_memory_bytes")
    gpu = planner_gpu(device)
    mem = psutil.virtual_memory().total / GIB if gpu == "cpu" else None  # vLLM-CPU budgets against host RAM
    inputs = {**plan_inputs(variant), "max_model_len": stats.max_model_len or variant.max_model_len,
              "block_size": stats.block_size or variant.block_size}
    p = plan(config, **inputs, gpu=gpu, device_memory_gib=mem, kv_cache_memory_gib=kv_bytes / GIB if kv_bytes else None)
    keys = PREDICTED_KEYS
    if gguf:  # the folder's config gives the KV layout, but the planner has no model of GGUF weights
        keys = GGUF_KEYS + (GGUF_POOL_KEYS if kv_bytes else ())
    return Prediction(**{k: getattr(p, k) for k in keys if hasattr(p, k)})


def complete(stats: EngineStats, predicted: Prediction | None) -> EngineStats:
    """Fill what follows from measured numbers; the KV bytes per token and per block are exact from the
    model shape. KV GiB is whole blocks times the bytes of one block: for a hybrid (sliding-window)
    model vLLM's token capacity exceeds blocks x block size, so tokens x bytes per token would not be."""
    s = stats.model_copy(deep=True)
    predicted = predicted or Prediction()
    if s.kv_bytes_per_token is None and predicted.kv_bytes_per_token:
        s.kv_bytes_per_token = int(predicted.kv_bytes_per_token)
        s.source["kv_bytes_per_token"] = "computed"
    blocks, per_block = s.kv_cache_blocks, predicted.kv_bytes_per_block
    if not (blocks and per_block) or s.source.get("kv_cache_blocks") == "computed":
        # no block count from the engine: whole blocks of the token capacity (a full-attention model)
        blocks = s.kv_cache_tokens // s.block_size if s.kv_cache_tokens and s.block_size else None
        per_block = (s.kv_bytes_per_token or 0) * (s.block_size or 0)
    if blocks and per_block and s.source.get("kv_cache_gib") != "api":
        s.kv_cache_gib = blocks * per_block / GIB  # exact, where the log rounds to 0.01
        s.source["kv_cache_gib"] = "computed"
    if s.kv_used_peak_blocks is not None and per_block:
        s.kv_used_peak_gib = s.kv_used_peak_blocks * per_block / GIB
        s.source["kv_used_peak_gib"] = "computed"
    return with_derived(s)


# EngineStats field <- planner key, for a simulated variant
SIMULATED_FIELDS = {"weights_gib": "weights_gib", "kv_cache_tokens": "kv_capacity_tokens",
                    "kv_cache_blocks": "kv_cache_blocks", "kv_cache_gib": "kv_cache_gib",
                    "max_concurrency": "max_concurrency", "peak_activation_gib": "activation_gib",
                    "cuda_graph_gib": "cuda_graph_gib", "non_torch_gib": "non_torch_gib", "required_gib": "required_gib"}
# What the dense engine measures that does not depend on how the weights are stored
SIMULATION_KEEPS = ("vllm_version", "device", "startup_s", "block_size", "max_model_len", "kv_bytes_per_token",
                    "num_preemptions", "prefix_cache_hit_rate")


def simulated_stats(measured: EngineStats, predicted: Prediction | None) -> EngineStats:
    """A simulated variant's engine record: memory is the planner's prediction for the INT4
    kernels (`source: predicted`), never the dense engine's, which holds 16-bit weights."""
    s = EngineStats(**{k: getattr(measured, k) for k in SIMULATION_KEEPS},
                    source={k: v for k, v in measured.source.items() if k in SIMULATION_KEEPS})
    for field, key in SIMULATED_FIELDS.items():
        if predicted is not None and getattr(predicted, key) is not None:
            setattr(s, field, getattr(predicted, key))
            s.source[field] = "predicted"
    return s


def described_by(variant: Variant, model_dir: str) -> str:
    """The folder whose config.json describes what the variant loads: a `.gguf` file borrows the
    imported folder's config (`hf_config_path`), any other model of its own is its own folder."""
    return model_dir if is_gguf(variant.model) else variant.model or model_dir


def _planned(model_dir: str, variant: Variant, stats: EngineStats, quantization_config: dict | None = None) -> Prediction | None:
    try:
        return predict(model_dir, variant, stats, stats.device, quantization_config=quantization_config)
    except Exception as e:  # noqa: BLE001 - a planner gap must not cost the measured run
        return Prediction(error=f"{type(e).__name__}: {e}")


def record_figures(result: VariantResult, stats: EngineStats, variant: Variant, model_dir: str, device: str) -> None:
    """The record's engine figures from the engine's (`stats`), with the planner's prediction beside them,
    made once at the engine's start (the end only completes its figures). A simulated variant's memory is
    the planner's for the INT4 checkpoint its dense copy stands for; the dense engine's own figures are
    kept in its build, apart from the record's memory."""
    stats.device = stats.device or device
    if result.simulated and result.build is not None:
        result.build.dense_engine = {k: getattr(stats, k) for k in ("weights_gib", "kv_cache_tokens")}
        result.predicted = _planned(model_dir, variant, stats, result.build.quantization_config)
        result.engine = simulated_stats(stats, result.predicted)
        return
    stats.gpu_count = variant.tensor_parallel_size * variant.pipeline_parallel_size  # memory is per GPU
    if result.predicted is None:
        result.predicted = _planned(described_by(variant, model_dir), variant, stats)
    result.engine = complete(stats, result.predicted)


def floor_metrics(model_dir: str, variant: Variant, metrics: list[Metric], device: str | None) -> list[Metric]:
    """roofline_metrics, or none where the roofline has no model of the architecture (the run stands);
    none for a GGUF variant either, whose weights it has no model of."""
    try:
        return roofline_metrics(variant.model or model_dir, variant, metrics, device)
    except Exception:  # noqa: BLE001 - an unknown architecture has no floor; the run stands
        return []


def roofline_metrics(model_dir: str, variant: Variant, metrics: list, device: str | None) -> list:
    """Measured TTFT/ITL per context length as % of the device's floor (GPU runs only)."""
    from evalsuite.core.types import Metric, MetricKind
    from evalsuite.memory.devices import from_nvml_name
    from evalsuite.memory.roofline import roofline

    gpu = from_nvml_name(device or "")
    path = Path(model_dir) / "config.json"
    if gpu is None or not path.exists():
        return []
    config = json.loads(path.read_text())
    at_length = {(m.base, m.length): m.value for m in metrics if m.length is not None and m.depth is None}
    out = []
    for (base, ctx), ttft_ms in at_length.items():
        if base != TTFT_P50:
            continue
        itl_ms = at_length.get((ITL_P50, ctx))
        r = roofline(config, prompt_tokens=ctx, gpu=gpu, quantization=variant.quantization,
                     kv_cache_dtype=variant.kv_cache_dtype, measured_ttft_s=ttft_ms / 1000, measured_itl_ms=itl_ms)
        floor = {"kind": MetricKind.timing, "unit": "ms", "length": ctx}
        share = {"kind": MetricKind.quantity, "unit": "%", "direction": "lower", "length": ctx}
        out += [Metric(name=f"roofline/ttft_floor_ms/ctx{ctx}", value=r.ttft_floor_s * 1000, **floor),
                Metric(name=f"roofline/itl_floor_ms/ctx{ctx}", value=r.itl_floor_ms, **floor),
                Metric(name=f"roofline/ttft_pct_of_floor/ctx{ctx}", value=ttft_ms / (r.ttft_floor_s * 1000) * 100, **share)]
        if itl_ms:
            out.append(Metric(name=f"roofline/itl_pct_of_floor/ctx{ctx}", value=itl_ms / r.itl_floor_ms * 100, **share))
    return out
