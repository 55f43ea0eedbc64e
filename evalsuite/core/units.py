"""Units that several packages share, each defined once (vLLM's setting names and values: core/settings.py)."""

from __future__ import annotations

GIB = 1024**3
# Bytes per element of each dtype, by safetensors' name for it (its headers give names, not sizes)
DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I16": 2, "U16": 2,
               "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
