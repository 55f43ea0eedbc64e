"""How close the planner comes to what vLLM reported: weights GiB and KV capacity in tokens.

Reference (a): the H200 runs in shared/gpu/README.md, "Measured on 2026-11-29 (H200, vLLM 0.26.0,
Llama-3.1-8B shape, dummy weights)" and its "Seed claims" table; device 139.8 GiB, utilization
0.92, model config shared/gpu/examples/llama31_8b_config.json (copied below so the bench needs
no shared/ folder).
Reference (b), optional: a CPU measurement, `--cpu-results FILE`, either an evalsuite run record
(run.json: model folder + variants[].settings + variants[].engine) or a list of
{"config": PATH_OR_DICT, "settings": {...plan kwargs}, "engine": {...EngineStats fields}}.
CPU KV memory is util x RAM - worker RSS, which the planner does not model; for CPU cases the
measured KV GiB is given to the planner and the bench checks weights and the tokens it derives.

Usage: python bench/memory_prediction.py [--cpu-results FILE]
Last line: RESULT bench=memory_prediction cases=N max_kv_capacity_err_pct=F max_weights_err_pct=F
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from evalsuite.memory.planner import PlanSettings, plan, read_config

LLAMA_31_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
    "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "hidden_act": "silu",
}
# The AWQ run put an AWQ quantization_config into the same config (4-bit, group 128, zero points).
LLAMA_31_8B_AWQ = {**LLAMA_31_8B, "quantization_config": {
    "quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}}

H200 = {"gpu": "H200", "gpu_memory_utilization": 0.92, "max_model_len": 131072}

# (name, config, plan kwargs, measured weights GiB or None, measured KV capacity tokens)
H200_ROWS: list[tuple[str, dict, dict[str, Any], float | None, int]] = [
    ("bf16", LLAMA_31_8B, {}, 15.0, 914_304),
    ("fp8 weights", LLAMA_31_8B, {"quantization": "fp8"}, 8.54, 967_200),
    ("fp8 KV cache", LLAMA_31_8B, {"kv_cache_dtype": "fp8"}, 15.04, 1_828_096),
    ("fp8 weights + fp8 KV", LLAMA_31_8B, {"quantization": "fp8", "kv_cache_dtype": "fp8"}, 8.54, 1_934_400),
    ("AWQ int4 (Machete)", LLAMA_31_8B_AWQ, {}, 5.49, 992_512),
    ("bf16, block_size 32", LLAMA_31_8B, {"block_size": 32}, 15.0, 914_304),
    ("max_num_batched_tokens 2048", LLAMA_31_8B, {"max_num_batched_tokens": 2048}, None, 920_592),
    ("max_num_batched_tokens 65536", LLAMA_31_8B, {"max_num_batched_tokens": 65536}, None, 872_832),
    ("enforce_eager", LLAMA_31_8B, {"enforce_eager": True}, None, 914_784),
]

_PLAN_KWARGS = set(PlanSettings.model_fields)


class Case(BaseModel):
    name: str
    pred_weights_gib: float
    meas_weights_gib: float | None
    pred_kv_tokens: int
    meas_kv_tokens: int | None

    def weights_err_pct(self) -> float | None:
        if self.meas_weights_gib is None:
            return None
        return 100 * abs(self.pred_weights_gib - self.meas_weights_gib) / self.meas_weights_gib

    def kv_err_pct(self) -> float | None:
        if not self.meas_kv_tokens:
            return None
        return 100 * abs(self.pred_kv_tokens - self.meas_kv_tokens) / self.meas_kv_tokens


def h200_cases() -> list[Case]:
    cases = []
    for name, cfg, kwargs, weights, tokens in H200_ROWS:
        p = plan(cfg, **H200, **kwargs)
        cases.append(Case(name=f"H200 {name}", pred_weights_gib=p.weights_gib, meas_weights_gib=weights,
                          pred_kv_tokens=p.kv_capacity_tokens, meas_kv_tokens=tokens))
    return cases


def _cpu_entries(data: Any) -> list[dict[str, Any]]:
    """Normalise a run record or a plain list into {config, settings, engine, name} entries."""
    if isinstance(data, dict) and "variants" in data:
        return [{"config": data["model"], "settings": v.get("settings", {}), "engine": v.get("engine", {}),
                 "name": v.get("variant", "?")} for v in data["variants"] if v.get("status", "ok") == "ok"]
    if isinstance(data, dict) and "cases" in data:
        data = data["cases"]
    if not isinstance(data, list):
        raise SystemExit("--cpu-results: expected a run record (with 'variants') or a list of cases")
    return data


def cpu_cases(path: Path) -> list[Case]:
    cases = []
    for i, entry in enumerate(_cpu_entries(json.loads(path.read_text()))):
        cfg = entry["config"] if isinstance(entry["config"], dict) else read_config(entry["config"])
        engine = entry.get("engine") or {}
        kwargs = {k: v for k, v in (entry.get("settings") or {}).items() if k in _PLAN_KWARGS and v is not None}
        kwargs.setdefault("gpu", "CPU")
        kwargs.setdefault("device_memory_gib", 1.0)  # unused once the KV memory is given
        if engine.get("kv_cache_gib") is not None:
            kwargs["kv_cache_memory_gib"] = engine["kv_cache_gib"]
        if engine.get("block_size"):
            kwargs.setdefault("block_size", engine["block_size"])
        if engine.get("max_model_len"):
            kwargs.setdefault("max_model_len", engine["max_model_len"])
        p = plan(cfg, **kwargs)
        cases.append(Case(name=f"CPU {entry.get('name', i)}", pred_weights_gib=p.weights_gib,
                          meas_weights_gib=engine.get("weights_gib"), pred_kv_tokens=p.kv_capacity_tokens,
                          meas_kv_tokens=engine.get("kv_cache_tokens")))
    return cases


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def report(cases: list[Case]) -> str:
    lines = [f"{'case':<38} {'weights pred':>12} {'meas':>6} {'err%':>6} {'KV tokens pred':>15} "
             f"{'meas':>10} {'err%':>6}"]
    for c in cases:
        lines.append(f"{c.name:<38} {c.pred_weights_gib:>12.2f} {_fmt(c.meas_weights_gib, '.2f'):>6} "
                     f"{_fmt(c.weights_err_pct(), '.2f'):>6} {c.pred_kv_tokens:>15,} "
                     f"{_fmt(c.meas_kv_tokens, ','):>10} {_fmt(c.kv_err_pct(), '.3f'):>6}")
    kv = [e for c in cases if (e := c.kv_err_pct()) is not None]
    w = [e for c in cases if (e := c.weights_err_pct()) is not None]
    lines.append(f"RESULT bench=memory_prediction cases={len(cases)} "
                 f"max_kv_capacity_err_pct={max(kv, default=0.0):.3f} max_weights_err_pct={max(w, default=0.0):.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cpu-results", type=Path, help="CPU measurement: run record or list of cases (JSON)")
    args = ap.parse_args(argv)
    cases = h200_cases()
    if args.cpu_results:
        cases += cpu_cases(args.cpu_results)
    print(report(cases))
    return 0


if __name__ == "__main__":
    sys.exit(main())
