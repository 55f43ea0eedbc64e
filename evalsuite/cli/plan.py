"""`evalsuite plan`: what a model will take on a device, before any engine starts.

The model is a folder or config.json, a Hugging Face id whose config.json is in the local HF cache
(read offline), or an evalsuite config (one row per variant, from the variant's own settings).
Mounted by evalsuite.cli.main as `app.command("plan")(friendly(plan_command))`.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from evalsuite.core.errors import ConfigError
from evalsuite.core.units import GIB, KV_CACHE_DTYPES
from evalsuite.memory.devices import get_device
from evalsuite.cli.plan_config import model_config, plan_config, verdict, with_file
from evalsuite.memory.planner import Plan, plan
from evalsuite.memory.roofline import Roofline, roofline


def _host_memory_gib() -> float:
    import psutil

    return psutil.virtual_memory().total / GIB


def _rows(p: Plan, r: Roofline | None) -> list[tuple[str, str]]:
    rows = [
        ("device", f"{p.device} ({p.device_memory_gib:.2f} GiB, utilization {p.gpu_memory_utilization})"),
    ]
    if p.gpu_count > 1:
        rows.append(("GPUs", f"{p.gpu_count} (tensor parallel {p.tensor_parallel_size} x pipeline parallel "
                             f"{p.pipeline_parallel_size}); memory below is per GPU, weights "
                             f"{p.weights_gib_total:.2f} GiB over all"))
    rows += [
        ("requested", f"{p.requested_gib:.2f} GiB"),
        ("dtype / kv cache / quant", f"{p.dtype} / {p.kv_cache_dtype} / {p.quantization or 'none'}"),
        ("weights", f"{p.weights_gib:.2f} GiB ({p.params / 1e9:.2f}B params)"),
        ("peak activation", f"{p.activation_gib:.2f} GiB (max_num_batched_tokens {p.max_num_batched_tokens}, "
                            f"max_num_seqs {p.max_num_seqs})"),
        ("non-torch", f"{p.non_torch_gib:.2f} GiB"),
        ("CUDA graphs", f"{p.cuda_graph_gib:.2f} GiB (outside the KV budget)"),
        ("KV cache", f"{p.kv_cache_gib:.2f} GiB, {p.kv_bytes_per_token:,} bytes/token"),
        ("KV capacity", f"{p.kv_capacity_tokens:,} tokens in {p.kv_cache_blocks:,} blocks of {p.block_size}"),
        ("max concurrency", f"{p.max_concurrency:.2f}x at max_model_len {p.max_model_len:,}"),
        ("fits", verdict(p)),
        ("largest max_model_len", f"{p.max_model_len_fit:,}"),
        ("largest max_num_seqs", f"{p.max_num_seqs_fit:,} at full length"),
        ("required (1 request)", f"{p.required_gib:.2f} GiB (needs gpu_memory_utilization >= "
                                 f"{p.min_gpu_memory_utilization:.3f})"),
    ]
    if r is not None:
        tp = p.tensor_parallel_size  # TP splits each step's work; all-reduce time is not counted
        per = f", 1/{tp} of one GPU's" if tp > 1 else ""
        rows.append(("TTFT floor", f"{r.ttft_floor_s / tp:.2f} s for a {r.prompt_tokens:,}-token prompt{per}"))
        rows.append(("ITL floor", f"{r.itl_floor_ms / tp:.2f} ms at {r.context_tokens:,} tokens of context{per}"))
    rows.extend(("note", n) for n in p.notes)
    return rows


SOURCE_HELP = ("A model folder or its config.json, a Hugging Face id (org/name, config.json from the local "
               "HF cache), or an evalsuite config (.yaml: one row per variant, from its own settings).")


def plan_command(
    source: str = typer.Argument(..., metavar="MODEL", help=SOURCE_HELP),
    max_model_len: int | None = typer.Option(None, "--max-model-len", metavar="TOKENS",
                                             help="Context length (default: the model's)."),
    kv_cache_dtype: str = typer.Option("auto", "--kv-cache-dtype", metavar="DTYPE",
                                       help=", ".join(KV_CACHE_DTYPES) + "."),
    quantization: str | None = typer.Option(None, "--quantization", metavar="METHOD",
                                            help="fp8, awq, gptq (default: from config.json)."),
    gpu: str = typer.Option("H200", "--gpu", metavar="DEVICE",
                            help="H200, H100-SXM, H100-PCIE, A100-80GB, A100-40GB, L40S, L4, A10G, RTX4090, CPU."),
    gpu_memory_utilization: float = typer.Option(0.9, "--gpu-memory-utilization", metavar="SHARE",
                                                 help="Share of device memory vLLM reserves."),
    block_size: int | None = typer.Option(None, "--block-size", metavar="TOKENS",
                                          help="Tokens per KV block (default 16 on GPU, 128 on CPU)."),
    dtype: str | None = typer.Option(None, "--dtype", metavar="DTYPE", help="auto, bfloat16, float16, float32."),
    device_memory_gib: float | None = typer.Option(None, "--device-memory-gib", metavar="GIB",
                                                   help="Override the device's memory (CPU: host RAM)."),
    max_num_batched_tokens: int | None = typer.Option(None, "--max-num-batched-tokens", metavar="TOKENS",
                                                      help="Default: vLLM's for the device."),
    max_num_seqs: int | None = typer.Option(None, "--max-num-seqs", metavar="N", help="Default: vLLM's for the device."),
    enforce_eager: bool = typer.Option(False, "--enforce-eager", help="No CUDA graphs."),
    tensor_parallel_size: int = typer.Option(1, "--tensor-parallel-size", metavar="N",
                                             help="GPUs each layer is split over; memory is shown per GPU."),
    pipeline_parallel_size: int = typer.Option(1, "--pipeline-parallel-size", metavar="N",
                                               help="GPUs the layers are spread over, one run of layers each."),
    kv_skip_layers: list[str] = typer.Option([], "--kv-cache-dtype-skip-layers", metavar="LAYER",
                                             help="Layers whose KV cache keeps the model's dtype (repeatable): "
                                                  "an index, or sliding_window."),
    revision: str | None = typer.Option(None, "--revision", metavar="REV", help="With a Hugging Face id: branch, tag or commit."),
    variant: list[str] = typer.Option([], "--variant", "-V", metavar="NAME",
                                      help="With an evalsuite config: only these variants (repeatable)."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
) -> None:
    """Predict weights, KV capacity and concurrency for a model on a device, from its config.json alone."""
    if get_device(gpu).kind == "cpu" and device_memory_gib is None:
        device_memory_gib = _host_memory_gib()
    if source.endswith((".yaml", ".yml")):
        plan_config(Path(source), variant, gpu, device_memory_gib, as_json)
        return
    for flag, value in (("--max-model-len", max_model_len), ("--max-num-seqs", max_num_seqs),
                        ("--max-num-batched-tokens", max_num_batched_tokens), ("--block-size", block_size),
                        ("--device-memory-gib", device_memory_gib), ("--gpu-memory-utilization", gpu_memory_utilization)):
        if value is not None and value <= 0:  # 0 would silently mean "the default" further on
            raise ConfigError(f"{flag}: must be above 0, got {value}")
    cfg_file, config = model_config(source, revision)
    try:
        p = plan(config, max_model_len=max_model_len, kv_cache_dtype=kv_cache_dtype, quantization=quantization,
                 gpu=gpu, gpu_memory_utilization=gpu_memory_utilization, block_size=block_size, dtype=dtype,
                 device_memory_gib=device_memory_gib, max_num_batched_tokens=max_num_batched_tokens,
                 max_num_seqs=max_num_seqs, enforce_eager=enforce_eager,
                 tensor_parallel_size=tensor_parallel_size, pipeline_parallel_size=pipeline_parallel_size,
                 kv_cache_dtype_skip_layers=kv_skip_layers)
        r = None if p.device == "CPU" else roofline(
            config, prompt_tokens=p.max_model_len, gpu=gpu, quantization=quantization,
            kv_cache_dtype=kv_cache_dtype, dtype=dtype, kv_cache_dtype_skip_layers=kv_skip_layers)
    except ConfigError as e:
        raise with_file(e, cfg_file) from None
    if as_json:
        payload = p.model_dump()
        payload["roofline"] = r.model_dump() if r else None
        typer.echo(json.dumps(payload, indent=2))
        return
    rows = _rows(p, r)
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        typer.echo(f"{key:<{width}}  {value}")
