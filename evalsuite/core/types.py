"""The nouns of evalsuite. Every other module speaks in these types.

Records written to disk hold SCHEMA_VERSION so that a reader can refuse or migrate
files written by another version.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1


class _Model(BaseModel):
    # NaN (an accuracy over no items) must survive a JSON round trip, not become null
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")


class Request(_Model):
    """One engine request: a prompt (text or token ids) and how to sample from it."""

    prompt: str | None = None
    prompt_token_ids: list[int] | None = None
    max_tokens: int = 1
    logprobs: int | None = None  # top-k log-probabilities per generated token
    prompt_logprobs: int | None = None  # ask for each prompt token's log-probability and rank (log-likelihoods)
    stop: list[str] = Field(default_factory=list)
    temperature: float = 0.0
    ignore_eos: bool = False
    seed: int | None = None


class Sample(_Model):
    """One item of a task: what is asked and what is correct."""

    id: str
    task: str
    request: Request
    target: str
    choices: list[str] | None = None
    group: str | None = None  # subject, clause type, or a length/depth cell
    meta: dict[str, Any] = Field(default_factory=dict)


class Completion(_Model):
    """What the engine answered to one request, with its timing."""

    text: str
    top_logprobs: list[dict[str, float]] = Field(default_factory=list)
    # per prompt token, when asked: its log-probability and its rank (1: greedy); None for the first token
    prompt_logprobs: list[float | None] = Field(default_factory=list)
    prompt_ranks: list[int | None] = Field(default_factory=list)
    prompt_tokens: int = 0
    output_tokens: int = 0
    cached_prompt_tokens: int | None = None
    finish_reason: str | None = None
    ttft_ms: float | None = None
    itl_ms: float | None = None  # mean inter-token latency over the decode phase
    e2e_ms: float | None = None


class Score(_Model):
    """The verdict on one sample. `value` is 1.0 for correct, 0.0 for wrong."""

    sample_id: str
    task: str
    value: float
    pred: str
    target: str
    group: str | None = None
    extra: dict[str, Any] = Field(default_factory=dict)


class Metric(_Model):
    """One number. `name` follows task/metric[/group]; units are suffixes (`_ms`, `_gib`)."""

    name: str
    value: float
    stderr: float | None = None
    n: int | None = None


class EngineStats(_Model):
    """Memory and capacity as the engine reports them (never NVML 'used', which is constant)."""

    vllm_version: str | None = None
    device: str | None = None
    startup_s: float | None = None
    weights_gib: float | None = None  # the loaded parameters and buffers, as stored
    # vLLM's own "Model loading took" (device memory the load left allocated): above weights_gib
    # where a loader keeps tensors outside the parameters (a GGUF model: +0.46 GiB on the 1.5B)
    weights_loaded_gib: float | None = None
    peak_activation_gib: float | None = None
    cuda_graph_gib: float | None = None
    non_torch_gib: float | None = None
    kv_cache_gib: float | None = None
    kv_cache_blocks: int | None = None
    kv_cache_tokens: int | None = None
    block_size: int | None = None
    kv_bytes_per_token: int | None = None
    max_model_len: int | None = None
    max_concurrency: float | None = None
    kv_used_peak_blocks: int | None = None
    kv_used_peak_gib: float | None = None
    num_preemptions: int | None = None
    prefix_cache_hit_rate: float | None = None
    required_gib: float | None = None
    nvml_peak_gib: float | None = None
    reserved_gib: float | None = None
    gpu_count: int | None = None  # tensor x pipeline parallel; the memory fields are per GPU
    # processes outside this engine seen on its GPU at once (NVML): 0, it had the device to itself;
    # more, its latency was shared and vLLM's free-memory deltas are withheld (source "withheld")
    other_processes: int | None = None
    source: dict[str, str] = Field(default_factory=dict)  # field -> "api" | "log" | "computed" | "withheld"


# partial: interrupted, and scored from the samples it recorded (`evalsuite finish`)
Status = Literal["ok", "partial", "failed", "skipped", "running", "pending"]


class VariantResult(_Model):
    variant: str
    status: Status = "pending"
    reason: str | None = None
    settings: dict[str, Any] = Field(default_factory=dict)
    metrics: list[Metric] = Field(default_factory=list)
    # per task, the metric that answers "how did it do", as the task defines it; reports read it here
    primary_metrics: list[str] = Field(default_factory=list)
    # headline metric -> its value for answers that ignore the item (1/k for k choices), where the
    # task has one: a baseline near it says the task cannot tell variants apart
    chance: dict[str, float] = Field(default_factory=dict)
    engine: EngineStats = Field(default_factory=EngineStats)
    predicted: dict[str, Any] = Field(default_factory=dict)
    # `run --parallel`: the packing plan's footprint beside the engine's measured one, the variants that
    # shared the device, and whether the engine figures were measured alone (evalsuite.run.packing)
    placement: dict[str, Any] = Field(default_factory=dict)
    started_at: datetime | None = None
    duration_s: float | None = None

    def metric(self, name: str) -> Metric | None:
        return next((m for m in self.metrics if m.name == name), None)


class RunRecord(_Model):
    schema_version: int = SCHEMA_VERSION
    run_id: str
    created_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))
    config_path: str | None = None
    model: str
    mode: Literal["offline", "server", "fake"] = "offline"
    env: dict[str, Any] = Field(default_factory=dict)
    variants: list[VariantResult] = Field(default_factory=list)
    mlflow_run_id: str | None = None

    def variant(self, name: str) -> VariantResult | None:
        return next((v for v in self.variants if v.variant == name), None)
