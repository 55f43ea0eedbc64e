"""The vLLM engine settings a variant, the memory planner, `evalsuite plan` and a claims file share,
each declared once: its vLLM engine-argument name, type and allowed values, the default a variant
leaves to vLLM, its help (the `evalsuite plan` option's), and whether it changes memory.

A variant (run/config.py) inherits these fields; the planner's inputs (memory/planner.py PlanSettings)
take the ones that change memory, and `evalsuite plan`'s options and a claim's `settings` are
PlanSettings' fields. A new allowed value is one line here (plus, where it changes memory, its entry
in the planner); a new setting is one field here, and the planner's arithmetic for it.

The allowed values are the suite's own lists, not vLLM's Literals (vllm.config.cache.CacheDType):
importing vLLM takes seconds (docs/benchmarks.md), too slow for `evalsuite --help`, and vLLM accepts values
(turboquant_*, nvfp4, ...) that the planner has no model of. tests/test_settings.py checks every name
and value here against vLLM's own `EngineArgs.add_cli_args`.
"""

from __future__ import annotations

import copy
from typing import Any, Literal, get_args

from pydantic import Field
from pydantic.fields import FieldInfo

from evalsuite.core.configfile import Strict

# vLLM's `dtype` values: bf16 and fp16 are refused by vLLM ("Unknown dtype"), so they are not offered.
DTYPES = ("auto", "bfloat16", "float16", "float32", "half", "float")  # half, float: aliases
Dtype = Literal[DTYPES]

# The vLLM `quantization` methods a variant may name: those the memory planner models. Others
# (bitsandbytes, ...) would run but leave the record without predicted memory, so they are refused.
QUANTIZATIONS = ("fp8", "awq", "awq_marlin", "gptq", "gptq_marlin", "compressed-tensors")
Quantization = Literal[QUANTIZATIONS]

# The `kv_cache_dtype` values a variant may name: those the planner models (memory.planner.kv_format).
# fp8/fp8_e4m3/fp8_e5m2 use one scale per tensor (1.0 unless the checkpoint carries calibrated k/v
# scales) and, on CUDA, make vLLM quantize the query to FP8 as well; the *_per_token_head ones compute
# a float32 scale per token and KV head, store it beside K and V, and leave the query in 16 bits.
KV_CACHE_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2",
                   "fp8_per_token_head", "int8_per_token_head", "int4_per_token_head")
KVCacheDtype = Literal[KV_CACHE_DTYPES]
PER_TENSOR_FP8_KV = ("fp8", "fp8_e4m3", "fp8_e5m2")
# the ones stored in fewer bits than the model's: what kv_cache_dtype_skip_layers keeps layers out of
QUANTIZED_KV = tuple(d for d in KV_CACHE_DTYPES if d not in ("auto", "bfloat16", "float16"))
# gpu_memory_utilization where a variant or plan leaves it out: vLLM 0.32's own default (older releases
# took 0.9). The engine gets it explicitly, so the planner's figures, the device
# watch's reservation and the engine agree whichever vLLM is installed.
GPU_MEMORY_UTILIZATION = 0.92


def setting(default: Any, help: str, *, metavar: str | None = None, memory: bool = True, **constraints: Any) -> Any:
    """A setting's field. `memory`: the planner models it, so a plan and a claim may set it;
    `metavar`: the value's name in `evalsuite plan --help` (none: an on/off flag)."""
    return Field(default, description=help, json_schema_extra={"memory": memory, "metavar": metavar}, **constraints)


class WeightSettings(Strict):
    """How the weights are held."""

    dtype: Dtype = setting("auto", "Weights and activations (auto: the checkpoint's; float32 runs in bfloat16).",
                           metavar="DTYPE")
    quantization: Quantization | None = setting(
        None, "Weight quantization (default: the checkpoint's quantization_config).", metavar="METHOD")


class CacheSettings(Strict):
    """The KV cache, the scheduler's batch and how the model is split over GPUs."""

    kv_cache_dtype: KVCacheDtype = setting("auto", "KV cache element type.", metavar="DTYPE")
    max_model_len: int | None = setting(None, "Context length (default: the model's).", metavar="TOKENS", gt=0)
    max_num_seqs: int | None = setting(None, "Requests in one batch (default: vLLM's for the device).", metavar="N",
                                       gt=0)
    max_num_batched_tokens: int | None = setting(None, "Tokens in one scheduler step (default: vLLM's for the device).",
                                                 metavar="TOKENS", gt=0)
    gpu_memory_utilization: float | None = setting(
        None, f"Share of device memory vLLM reserves (default {GPU_MEMORY_UTILIZATION}).", metavar="SHARE", gt=0, le=1)
    # any size, as vLLM's own type: the planner also takes the size an engine picked itself
    block_size: int | None = setting(None, "Tokens per KV block (default 16 on GPU, 128 on CPU).", metavar="TOKENS",
                                     gt=0)
    enable_prefix_caching: bool | None = setting(None, "Reuse the KV blocks of a prompt prefix seen before.",
                                                 memory=False)
    enforce_eager: bool | None = setting(None, "No CUDA graphs.")
    tensor_parallel_size: int = setting(1, "GPUs each layer is split over; memory is per GPU.", metavar="N", ge=1)
    pipeline_parallel_size: int = setting(1, "GPUs the layers are spread over, one run of layers each.",
                                          metavar="N", ge=1)


class EngineSettings(CacheSettings, WeightSettings):
    """Every engine setting, weights first."""


def extra(field: FieldInfo, key: str) -> Any:
    """What setting() noted about a field (`memory`, `metavar`); None for a field made otherwise."""
    return (field.json_schema_extra or {}).get(key)  # type: ignore[union-attr]


MEMORY_SETTINGS = tuple(k for k, f in EngineSettings.model_fields.items() if extra(f, "memory"))


def memory_fields() -> dict[str, tuple[Any, FieldInfo]]:
    """The memory settings' fields for pydantic.create_model, each a copy: a model owns its fields."""
    return {k: (f.annotation, copy.copy(f)) for k, f in EngineSettings.model_fields.items() if k in MEMORY_SETTINGS}


def allowed_values(annotation: Any) -> tuple:
    """A Literal's values (inside `X | None` too); () for any other type."""
    if getattr(annotation, "__origin__", None) is Literal:
        return get_args(annotation)
    return next((v for a in get_args(annotation) if (v := allowed_values(a))), ())
