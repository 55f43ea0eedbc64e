"""`evalsuite plan`: what a model will take on a device, before any engine starts.

The model is a folder or config.json, a Hugging Face id whose config.json is in the local HF cache
(read offline), or an evalsuite config (one row per variant, from the variant's own settings).
Mounted by evalsuite.cli.main as `app.command("plan")(friendly(plan_command))`.
"""

from __future__ import annotations

import inspect
import json
from enum import StrEnum
from pathlib import Path
from typing import Any, get_origin

import typer
from pydantic.fields import FieldInfo

from evalsuite.core.errors import ConfigError
from evalsuite.core.settings import QUANTIZED_KV, allowed_values, extra
from evalsuite.core.units import GIB
from evalsuite.memory.devices import get_device
from evalsuite.cli.plan_config import DoesNotFit, fits, host_memory_gib, model_config, plan_config, verdict, with_file
from evalsuite.memory.planner import Plan, PlanSettings, plan, plan_settings
from evalsuite.memory.roofline import Roofline, roofline


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


SOURCE_HELP = ("An evalsuite config (.yaml: one row per variant, from its own settings, on this machine's GPU or "
               "CPU unless --gpu; default ./evalsuite.yaml), a model folder or its config.json, a .gguf file, or a "
               "Hugging Face id (org/name: config.json from the local HF cache, else from the hub, no weights).")


Format = StrEnum("Format", ["table", "json"])


CONFIG_OPTIONS = ("gpu", "device_memory_gib", "variant", "fmt")  # what plan takes with an evalsuite config


def plan_command(ctx: typer.Context, source: str | None, revision: str | None, variant: list[str], fmt: Format,
                 **settings: Any) -> None:
    """Predict weights, KV capacity and concurrency for a model on a device, from its config.json alone
    (no weights are downloaded). Exit 1 where it does not fit (vLLM would refuse to start), 2 on bad input.

    Examples:
      evalsuite plan
      evalsuite plan examples/qwen2.5-7b-instruct --gpu H100
      evalsuite plan Qwen/Qwen2.5-7B-Instruct --kv-cache-dtype fp8"""
    from evalsuite.cli.shipped import config_path, default_config

    as_json = fmt == Format.json
    given = {k: v for k, v in settings.items() if v is not None}  # left out: the planner's default, as vLLM's
    typed = [p for p in ctx.command.params if ctx.get_parameter_source(p.name).name == "COMMANDLINE"]
    source = source or str(default_config(None, "plan", "MODEL"))
    if source.endswith((".yaml", ".yml")) or (source.startswith("examples/") and not Path(source).exists()):
        _refuse(typed, CONFIG_OPTIONS + ("source",), "with an evalsuite config: each variant is planned with its "
                "own settings; set it in the config, or plan the model folder")
        chosen = "gpu" in {p.name for p in typed}
        plan_config(config_path(Path(source)), variant, given["gpu"] if chosen else None,
                    given.get("device_memory_gib"), as_json)
        return
    if get_device(given["gpu"]).kind == "cpu" and "device_memory_gib" not in given:
        given["device_memory_gib"] = host_memory_gib()
    _refuse(typed, [n for n in ctx.params if n != "variant"], "with a model: it picks variants of an evalsuite config (.yaml)")
    plan_settings(given)  # a bad option is the command line's, not the model file's
    cfg_file, config = model_config(source, revision)
    try:
        p = plan(config, **given)
        shared = inspect.signature(roofline).parameters  # the settings the roofline also takes
        r = None if p.device == "CPU" else roofline(
            config, prompt_tokens=p.max_model_len, **{k: v for k, v in given.items() if k in shared})
    except ConfigError as e:
        raise with_file(e, cfg_file) from None
    if given.get("kv_cache_dtype_skip_layers") and p.kv_cache_dtype not in QUANTIZED_KV:
        raise ConfigError(f"--kv-cache-dtype-skip-layers: keeps layers out of a quantized KV cache, and the cache is "
                          f"{p.kv_cache_dtype}; give --kv-cache-dtype (allowed: {', '.join(QUANTIZED_KV)})")
    if as_json:
        payload = p.model_dump()
        payload["roofline"] = r.model_dump() if r else None
        typer.echo(json.dumps(payload, indent=2))
    else:
        rows = _rows(p, r)
        width = max(len(k) for k, _ in rows)
        for key, value in rows:
            typer.echo(f"{key:<{width}}  {value}")
    if not fits(p):
        raise DoesNotFit()


def _refuse(typed: list, allowed, why: str) -> None:
    """An option given on the command line that this kind of MODEL does not use: refused, never dropped."""
    unused = [max(p.opts, key=len) for p in typed if p.name not in allowed]
    if unused:
        raise ConfigError(f"{unused[0]}: not taken {why}")


def _setting_option(name: str, field: FieldInfo) -> inspect.Parameter:
    """A planner setting as an option: its vLLM flag, the setting's help and allowed values, its default."""
    allowed = allowed_values(field.annotation)
    help_text = (field.description or "") + (f" Allowed: {', '.join(map(str, allowed))}." if allowed else "")
    kind, default = field.annotation, field.default
    if allowed:  # typer has no Literal; PlanSettings checks the value and names what is allowed
        kind = type(allowed[0]) | None
    elif get_origin(kind) is tuple:
        kind, default = list[str], []
    elif kind == bool | None:  # an on/off flag: off is what vLLM does unless told
        kind, default = bool, False
    option = typer.Option(default, "--" + name.replace("_", "-"), metavar=extra(field, "metavar"), help=help_text,
                          show_default=default not in (None, [], False))
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=kind)


def _signature() -> inspect.Signature:
    """plan_command's options: the planner's settings (PlanSettings, the ones a value can be given for
    on a command line), between the model and the options of this command alone."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    own = [
        inspect.Parameter("revision", keyword, annotation=str | None, default=typer.Option(
            None, "--revision", metavar="REV", help="With a Hugging Face id: branch, tag or commit.")),
        inspect.Parameter("variant", keyword, annotation=list[str], default=typer.Option(
            [], "--variant", "-V", metavar="NAME", help="With an evalsuite config: only these variants (repeatable).")),
        inspect.Parameter("fmt", keyword, annotation=Format, default=typer.Option(
            Format.table, "--format", metavar="FORMAT", help="What to print: table or json.")),
    ]
    settings = [_setting_option(k, f) for k, f in PlanSettings.model_fields.items()
                if extra(f, "metavar") or f.annotation == bool | None]
    source = inspect.Parameter("source", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=str | None,
                               default=typer.Argument(None, metavar="MODEL", help=SOURCE_HELP, show_default=False))
    ctx = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)
    return inspect.Signature([ctx, source, *settings, *own])


plan_command.__signature__ = _signature()  # type: ignore[attr-defined]
