"""Read EngineStats fields out of vLLM's own log when the API does not expose them.

Formats are copied from the vLLM source: 0.26 (gpu_worker "Actual usage is X GiB for weight,
..."), 0.32 ("... for consumed memory (weights + non-torch) ...", "CPU KV cache size"), and the
CPU worker's "Auto set (X/Y) GiB for KV cache". vLLM's format_gib rounds to 0.01 GiB, so sums of
logged GiB values have that rounding.
"""

from __future__ import annotations

import re
from typing import Any

from evalsuite.core.types import EngineStats

_NUM = r"([0-9][0-9,]*(?:\.[0-9]+)?)"

# vLLM's load figure: the record's weights where the API gives none, and always its own field
_LOADING = re.compile(r"(?:Model loading took|Loading model weights took) " + _NUM + r" G(?:i)?B")
# field name -> pattern; the first group is the value. Later lines win (the last engine started).
_SIMPLE: dict[str, re.Pattern[str]] = {
    "weights_gib": _LOADING,
    "weights_loaded_gib": _LOADING,
    "kv_cache_gib": re.compile(
        r"(?:Available KV cache memory: |Current kv cache memory in use is |"
        r"(?:Auto|Explicitly) set \()" + _NUM + r"(?: GiB|/)"),
    "kv_cache_tokens": re.compile(r"\b[A-Z]+(?: \+ host)? KV cache size: " + _NUM + r" tokens"),
    "cuda_graph_gib": re.compile(r"(?:Graph capturing finished in [0-9.]+ secs?, took |"
                                 r"GiB for peak activation, and |GiB for non-torch memory, and )" + _NUM + r" GiB"),
    "reserved_gib": re.compile(r"(?:Desired GPU memory utilization is \([0-9.]+, |GiB for KV cache on node \d+, with )"
                               + _NUM + r" GiB"),
    "kv_cache_blocks": re.compile(r"# GPU blocks: " + _NUM),  # v0 engine; "# CPU blocks" there is swap
    "block_size": re.compile(r"Setting attention block size to " + _NUM + r" tokens"),
    "vllm_version": re.compile(r"(?:LLM engine \(v|vLLM API server version )([0-9][^\s)]*)"),
}
_CONCURRENCY = re.compile(r"Maximum concurrency for " + _NUM + r" tokens per request: " + _NUM + r"x")
_MAX_SEQ_LEN = re.compile(r"\bmax_seq_len=(\d+)")
_USAGE_026 = re.compile(r"Actual usage is " + _NUM + r" GiB for weight, " + _NUM + r" GiB for peak activation, "
                        + _NUM + r" GiB for non-torch memory")
_USAGE_032 = re.compile(r"Actual usage is " + _NUM + r" GiB for consumed memory \(weights \+ non-torch\), "
                        + _NUM + r" GiB for peak activation")
_KV_USAGE = re.compile(r"\b[A-Z]+ KV cache usage: " + _NUM + r"%")
_PREEMPTIONS = re.compile(r"\bPreemptions: " + _NUM)
_ENGINE_START = re.compile(r"Initializing a V1 LLM engine")
_INT_FIELDS = {"kv_cache_tokens", "kv_cache_blocks", "block_size", "max_model_len"}


def _number(text: str, as_int: bool) -> float | int:
    value = float(text.replace(",", ""))
    return int(value) if as_int else value


def _last(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    matches = list(pattern.finditer(text))
    return matches[-1] if matches else None


def _last_engine(text: str) -> str:
    """Only the last engine's lines: a log that saw several starts would otherwise mix them."""
    starts = [m.start() for m in _ENGINE_START.finditer(text)]
    if len(starts) < 2:
        return text
    line_start = text.rfind("\n", 0, starts[-1]) + 1
    return text[line_start:]


def _memory_split(text: str, weights: float | None) -> dict[str, float]:
    """Weights, activation and non-torch from whichever 'Actual usage' line this version writes."""
    out: dict[str, float] = {}
    m = _last(_USAGE_026, text)
    if m:
        out["weights_gib"] = _number(m.group(1), False)
        out["peak_activation_gib"] = _number(m.group(2), False)
        out["non_torch_gib"] = _number(m.group(3), False)
        return out
    m = _last(_USAGE_032, text)
    if m:
        out["peak_activation_gib"] = _number(m.group(2), False)
        if weights is not None:  # 0.32 logs weights + non-torch as one number
            out["non_torch_gib"] = round(max(_number(m.group(1), False) - weights, 0.0), 2)
    return out


def _runtime_stats(text: str) -> dict[str, Any]:
    """Peak KV usage (%) and preemptions summed over the periodic stats lines (per-interval counts)."""
    out: dict[str, Any] = {}
    usage = [float(m.group(1)) for m in _KV_USAGE.finditer(text)]
    if usage:
        out["kv_used_peak_pct"] = max(usage)
    preempt = [int(m.group(1).replace(",", "")) for m in _PREEMPTIONS.finditer(text)]
    if preempt:
        out["num_preemptions"] = sum(preempt)
    return out


def parse_engine_log(text: str) -> dict[str, Any]:
    """EngineStats fields found in a vLLM log (keys absent when the log does not say)."""
    text = _last_engine(text)
    found: dict[str, Any] = {}
    for field, pattern in _SIMPLE.items():
        m = _last(pattern, text)
        if m:
            found[field] = m.group(1) if field == "vllm_version" else _number(m.group(1), field in _INT_FIELDS)
    found.update(_memory_split(text, found.get("weights_gib")))
    m = _last(_CONCURRENCY, text)
    if m:
        found["max_model_len"] = _number(m.group(1), True)
        found["max_concurrency"] = _number(m.group(2), False)
    elif (m := _last(_MAX_SEQ_LEN, text)) is not None:
        found["max_model_len"] = int(m.group(1))
    runtime = _runtime_stats(text)
    if "num_preemptions" in runtime:
        found["num_preemptions"] = runtime["num_preemptions"]
    peak_pct = runtime.get("kv_used_peak_pct")
    blocks = found.get("kv_cache_blocks")
    if blocks is None and found.get("kv_cache_tokens") and found.get("block_size"):
        blocks = found["kv_cache_tokens"] // found["block_size"]
    if peak_pct is not None and blocks:
        found["kv_used_peak_blocks"] = round(peak_pct / 100 * blocks)
    if peak_pct is not None and found.get("kv_cache_gib"):
        found["kv_used_peak_gib"] = round(peak_pct / 100 * found["kv_cache_gib"], 3)
    return found


def required_gib(stats: EngineStats) -> float | None:
    """Memory the variant needs: weights + activation + CUDA graphs + non-torch + KV used at peak.

    Not NVML 'used', which is the constant reservation. None when a part is unknown."""
    kv = stats.kv_used_peak_gib
    if kv is None and stats.kv_used_peak_blocks is not None and stats.kv_cache_blocks and stats.kv_cache_gib:
        kv = stats.kv_used_peak_blocks / stats.kv_cache_blocks * stats.kv_cache_gib
    parts = [stats.weights_gib, stats.peak_activation_gib, stats.non_torch_gib, kv]
    if any(p is None for p in parts):
        return None
    return round(sum(parts) + (stats.cuda_graph_gib or 0.0), 3)


def with_derived(stats: EngineStats) -> EngineStats:
    """A copy with the fields that follow from others filled in and marked "computed"."""
    s = stats.model_copy(deep=True)
    if s.kv_cache_blocks is None and s.kv_cache_tokens and s.block_size:
        s.kv_cache_blocks = s.kv_cache_tokens // s.block_size
        s.source["kv_cache_blocks"] = "computed"
    if s.kv_used_peak_gib is None and s.kv_used_peak_blocks is not None and s.kv_cache_blocks and s.kv_cache_gib:
        s.kv_used_peak_gib = round(s.kv_used_peak_blocks / s.kv_cache_blocks * s.kv_cache_gib, 3)
        s.source["kv_used_peak_gib"] = "computed"
    if s.required_gib is None and (req := required_gib(s)) is not None:
        s.required_gib = req
        s.source["required_gib"] = "computed"
    return s


def engine_stats_from_log(text: str) -> EngineStats:
    """EngineStats built only from the log, every field it sets marked "log"."""
    found = parse_engine_log(text)
    return with_derived(EngineStats(**found, source={k: "log" for k in found}))
