"""Units and vLLM setting names that several packages share, each defined once."""

from __future__ import annotations

from typing import Literal

GIB = 1024**3

# The vLLM `quantization` methods a variant may name: those the memory planner models. Others
# (bitsandbytes, ...) would run but leave the record without predicted memory, so they are refused.
QUANTIZATIONS = ("fp8", "awq", "awq_marlin", "gptq", "gptq_marlin", "compressed-tensors")
Quantization = Literal[QUANTIZATIONS]

# vLLM 0.26's `kv_cache_dtype` values a variant may name. fp8/fp8_e4m3/fp8_e5m2 use one scale per
# tensor (1.0 unless the checkpoint carries calibrated k/v scales) and, on CUDA, make vLLM quantize
# the query to FP8 as well; the *_per_token_head ones compute a float32 scale per token and KV head,
# store it beside K and V, and leave the query in 16 bits.
KV_CACHE_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2",
                   "fp8_per_token_head", "int8_per_token_head", "int4_per_token_head")
KVCacheDtype = Literal[KV_CACHE_DTYPES]
PER_TENSOR_FP8_KV = ("fp8", "fp8_e4m3", "fp8_e5m2")
