"""Units and vLLM setting names that several packages share, each defined once."""

from __future__ import annotations

from typing import Literal

GIB = 1024**3

# The vLLM `quantization` methods a variant may name: those the memory planner models. Others
# (bitsandbytes, ...) would run but leave the record without predicted memory, so they are refused.
QUANTIZATIONS = ("fp8", "awq", "awq_marlin", "gptq", "gptq_marlin", "compressed-tensors")
Quantization = Literal[QUANTIZATIONS]
