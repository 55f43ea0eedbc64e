"""A serving workload: N requests of random tokens sent to the engine at once, optionally sharing a prefix.

The latency pass sends one request at a time; this sends all N together, as concurrent users do,
so the scheduler has to share the KV pool: over capacity (N x tokens > KV cache) it preempts and
recomputes, and with a shared prefix (a fixed system prompt) prefix caching can reuse its blocks.
Measured per task from the engine's own per-request numbers (vLLM's num_cached_tokens,
arrival-to-token timestamps), so other tasks of the variant do not mix in:
  {name}/prefix_hit_rate      prompt tokens served from the prefix cache / prompt tokens
  {name}/prefix_hit_rate_max  the same if every request after the first found the whole shared prefix
  {name}/demand_tokens        KV tokens all requests need at once (shared prefix counted once)
  {name}/ttft_ms_*, {name}/itl_ms_*, {name}/e2e_ms_*   per-request latency under this load
  {name}/output_tok_per_s     generated tokens / the slowest request's end-to-end time
Preemptions are counted by the engine for the whole variant (engine/num_preemptions), so a run
config that measures them runs this task alone.
"""

from __future__ import annotations

import random
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from evalsuite.stats.metrics import latency_summary
from evalsuite.tasks.base import Task, TaskContext
from evalsuite.tasks.planning import Planned
from evalsuite.tasks.registry import register_task_type
from evalsuite.tasks.latency import timing_score
from evalsuite.core.types import REQUEST_TIMINGS, Completion, Metric, MetricKind, Request, Sample, Score


@register_task_type
class WorkloadConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["workload"] = "workload"
    name: str = "workload"
    requests: int = Field(gt=0)
    prompt_tokens: int = Field(gt=0)  # per request, shared prefix included
    shared_prefix_tokens: int = Field(default=0, ge=0)  # the same leading tokens in every request
    output_tokens: int = Field(default=128, gt=0)

    @model_validator(mode="after")
    def _prefix_inside(self):
        if self.shared_prefix_tokens >= self.prompt_tokens:
            raise ValueError(f"shared_prefix_tokens {self.shared_prefix_tokens} must be below prompt_tokens "
                             f"{self.prompt_tokens}")
        return self

    @property
    def lengths(self) -> list[int]:
        """What each request needs of max_model_len (config validation checks it against every variant)."""
        return [self.prompt_tokens + self.output_tokens]

    def build(self, ctx: TaskContext) -> Task:
        return WorkloadTask(self, ctx)

    def planned(self, limit: int | None) -> list[Planned]:
        return []  # throughput and timings: no accuracy a gate rule's limit is sized for

    def narrow(self, limit: int) -> None:
        """The runner's spread thins its requests for `--limit`: nothing to narrow here."""


class WorkloadTask(Task):
    def __init__(self, cfg: WorkloadConfig, ctx: TaskContext):
        self.cfg, self.ctx = cfg, ctx
        self.name = cfg.name
        self.primary_metric = f"{cfg.name}/output_tok_per_s"
        self.batch_size = cfg.requests  # one engine call: every request is in flight together

    def _pool(self) -> list[int]:
        tok = self.ctx.tokenizer
        special = set(getattr(tok, "all_special_ids", []) or [])
        size = len(tok) if tok is not None else 32000
        return [i for i in range(min(size, 32000)) if i not in special]

    def samples(self) -> list[Sample]:
        # seeded by task name too: two workloads of one run must not share prompts (nor cache hits)
        rng, pool, c = random.Random(f"{self.ctx.seed}-{self.name}"), self._pool(), self.cfg
        prefix = [rng.choice(pool) for _ in range(c.shared_prefix_tokens)]
        out = []
        for i in range(c.requests):
            ids = prefix + [rng.choice(pool) for _ in range(c.prompt_tokens - c.shared_prefix_tokens)]
            req = Request(prompt_token_ids=ids, max_tokens=c.output_tokens, ignore_eos=True)
            out.append(Sample(id=f"r{i}", task=self.name, request=req, target="", group=str(c.prompt_tokens)))
        return out

    def warmup_request(self) -> Request:
        return Request(prompt_token_ids=self._pool()[-16:], max_tokens=4, ignore_eos=True)

    def score(self, sample: Sample, completion: Completion) -> Score:
        return timing_score(self.name, sample, completion)

    def metrics(self, scores: list[Score]) -> list[Metric]:
        c, name, n = self.cfg, self.name, len(scores)
        out = []
        known = [s.extra for s in scores if s.extra.get("cached_prompt_tokens") is not None]
        if known:
            prompt = sum(e["prompt_tokens"] for e in known)
            out.append(Metric(name=f"{name}/prefix_hit_rate", n=len(known), kind=MetricKind.quantity, direction="higher",
                              value=sum(e["cached_prompt_tokens"] for e in known) / prompt if prompt else 0.0))
        ideal = (c.requests - 1) * c.shared_prefix_tokens / (c.requests * c.prompt_tokens)
        out.append(Metric(name=f"{name}/prefix_hit_rate_max", value=ideal, n=n, kind=MetricKind.quantity))
        demand = c.shared_prefix_tokens + c.requests * (c.prompt_tokens - c.shared_prefix_tokens + c.output_tokens)
        out.append(Metric(name=f"{name}/demand_tokens", value=float(demand), n=n, kind=MetricKind.quantity, unit="tokens"))
        for key in REQUEST_TIMINGS:
            out += latency_summary([s.extra.get(key) for s in scores], f"{name}/{key}")
        ends = [s.extra["e2e_ms"] for s in scores if s.extra.get("e2e_ms")]
        if ends:
            generated = sum(s.extra.get("output_tokens") or 0 for s in scores)
            out.append(Metric(name=f"{name}/output_tok_per_s", value=generated / (max(ends) / 1000), n=n,
                              kind=MetricKind.quantity, unit="/s", direction="higher"))
        return out
