"""Accelerators the planner and roofline know: memory as torch reports it, peak dense FLOP/s, bandwidth.

Memory is `torch.cuda.mem_get_info()[1]` in GiB, the total vLLM multiplies by
gpu_memory_utilization; it is below the marketing size (ECC, reserved regions). H200 is
measured (docs/results/h200-2026-11-29.md); the others are the usual torch totals and may be off by
~0.5%. TFLOP/s are dense (no 2:4 sparsity) tensor-core peaks from NVIDIA data sheets.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from evalsuite.core.errors import ConfigError


class Device(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    memory_gib: float | None  # None: host RAM, which the caller must supply
    bf16_tflops: float
    fp8_tflops: float | None  # None: no FP8 tensor cores (vLLM falls back to weight-only FP8)
    hbm_tbps: float  # memory bandwidth, TB/s (1e12 bytes/s)
    arch: str  # "sm90" picks Machete for int4 weights; others use Marlin
    kind: str = "cuda"  # "cuda" or "cpu": decides block size and memory accounting


DEVICES: dict[str, Device] = {
    "H200": Device(name="H200", memory_gib=139.8, bf16_tflops=989.4, fp8_tflops=1978.9, hbm_tbps=4.8, arch="sm90"),
    "H100-SXM": Device(name="H100-SXM", memory_gib=79.18, bf16_tflops=989.4, fp8_tflops=1978.9, hbm_tbps=3.35,
                       arch="sm90"),
    "H100-PCIE": Device(name="H100-PCIE", memory_gib=79.18, bf16_tflops=756.0, fp8_tflops=1513.0, hbm_tbps=2.0,
                        arch="sm90"),
    "A100-80GB": Device(name="A100-80GB", memory_gib=79.15, bf16_tflops=312.0, fp8_tflops=None, hbm_tbps=2.039,
                        arch="sm80"),
    "A100-40GB": Device(name="A100-40GB", memory_gib=39.39, bf16_tflops=312.0, fp8_tflops=None, hbm_tbps=1.555,
                        arch="sm80"),
    "L40S": Device(name="L40S", memory_gib=44.39, bf16_tflops=362.1, fp8_tflops=733.0, hbm_tbps=0.864, arch="sm89"),
    "L4": Device(name="L4", memory_gib=22.03, bf16_tflops=121.0, fp8_tflops=242.5, hbm_tbps=0.3, arch="sm89"),
    # A10G is the AWS part: lower clocks than the A10 (125 TFLOP/s), hence 70.
    "A10G": Device(name="A10G", memory_gib=21.99, bf16_tflops=70.0, fp8_tflops=None, hbm_tbps=0.6, arch="sm86"),
    # GeForce runs bf16 with FP32 accumulate at half the FP16-accumulate rate: 165, not 330.
    "RTX4090": Device(name="RTX4090", memory_gib=23.65, bf16_tflops=165.2, fp8_tflops=330.3, hbm_tbps=1.008,
                      arch="sm89"),
    # Roofline numbers for a CPU are placeholders: the planner uses it for memory only.
    "CPU": Device(name="CPU", memory_gib=None, bf16_tflops=1.0, fp8_tflops=None, hbm_tbps=0.1, arch="cpu",
                  kind="cpu"),
}

_ALIASES = {
    "H100": "H100-SXM", "H100-80GB": "H100-SXM", "H100SXM": "H100-SXM", "H100-SXM5": "H100-SXM",
    "H100PCIE": "H100-PCIE", "A100": "A100-80GB", "A100-80G": "A100-80GB", "A100-40G": "A100-40GB",
    "A100-SXM4-80GB": "A100-80GB", "A100-SXM4-40GB": "A100-40GB", "RTX-4090": "RTX4090", "4090": "RTX4090",
    "GEFORCE-RTX-4090": "RTX4090", "H200-141GB": "H200",
}


def get_device(name: str) -> Device:
    """Look a device up by name; spaces, underscores and case do not matter."""
    key = name.strip().upper().replace(" ", "-").replace("_", "-")
    key = _ALIASES.get(key, key)
    if key not in DEVICES:
        raise ConfigError(f"--gpu: unknown device {name!r} (allowed: {', '.join(DEVICES)})")
    return DEVICES[key]


# NVML names (nvidia-smi) -> table keys; the first pattern found in the name wins
_NVML_PATTERNS = [("H200", "H200"), ("H100 PCIE", "H100-PCIE"), ("H100", "H100-SXM"), ("A100-SXM4-40GB", "A100-40GB"),
                  ("A100-PCIE-40GB", "A100-40GB"), ("A100", "A100-80GB"), ("L40S", "L40S"), ("L4", "L4"),
                  ("A10G", "A10G"), ("4090", "RTX4090")]


def from_nvml_name(name: str) -> str | None:
    """The table key for a name as NVML reports it ('NVIDIA H200', 'NVIDIA H100 80GB HBM3'), if known."""
    upper = name.upper()
    return next((key for pattern, key in _NVML_PATTERNS if pattern in upper), None)


def vllm_batch_defaults(device: Device) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) that vLLM's offline `LLM` class picks on this device.

    Mirrors EngineArgs.get_batch_defaults (vLLM 0.26-0.32): >=70 GiB cards other than A100 get
    16384/1024, CPU 4096/256, everything else 8192/256.
    """
    if device.kind == "cpu":
        return 4096, 256
    mem = device.memory_gib or 0.0
    if mem >= 160:
        return 16384, 1024
    if mem >= 70 and not device.name.upper().startswith("A100"):
        return 16384, 1024
    return 8192, 256
