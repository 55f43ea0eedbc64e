"""A config's items, built before any engine starts (so that bad input costs nothing) and once per run,
the batches the runner asks an engine for, and the run record's variants as results come in."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from evalsuite.core.errors import ConfigError
from evalsuite.core.rundir import RunDir
from evalsuite.core.types import RunRecord, Sample, VariantResult
from evalsuite.run.config import RunConfig, Variant
from evalsuite.run.resume import to_run
from evalsuite.run.stopping import Full
from evalsuite.tasks import Task, TaskContext


def build_tasks(cfg: RunConfig, ctx: TaskContext) -> list[Task]:
    tasks: list[Task] = [t.build(ctx) for t in cfg.tasks]
    if cfg.latency is not None:
        tasks.append(cfg.latency.build(ctx))
    if cfg.capacity is not None:
        tasks.append(cfg.capacity.build(ctx))
    return tasks


def spread(samples: list[Sample], limit: int | None) -> list[Sample]:
    """At most `limit` samples, evenly spaced over all of them, so that a quick try still touches
    every subject, length or depth a task orders its items by."""
    if not limit or len(samples) <= limit:
        return samples
    return [samples[i * len(samples) // limit] for i in range(limit)]


def task_chance(tasks: list[Task]) -> dict[str, float]:
    """Headline metric -> its value for answers that ignore the item, for the tasks that have one."""
    return {t.primary_metric: t.chance for t in tasks if t.chance is not None}


def preflight(cfg: RunConfig, ctx: TaskContext, stop: Full | None = None) -> tuple[list[Task], dict[str, list[Sample]]]:
    """Build every task's samples before any engine starts, so bad input costs nothing; in the order
    the stop policy asks them."""
    tasks, stop = build_tasks(cfg, ctx), stop or Full()
    samples = {t.name: stop.order(t, spread(t.samples(), cfg.limit if t.limited else None)) for t in tasks}
    for t in tasks:
        if not samples[t.name]:
            raise ConfigError(f"tasks: task {t.name!r} produced no samples (check its data and filters)")
    return tasks, samples


Built = tuple[list[Task], dict[str, list[Sample]]]
# A run's items by the task definitions they were built from, while `built_once` holds: a run in parts
# (--stop decided: the baseline, then the candidates) builds them for its first part only, not again
# with the GPU idle (tens of seconds of tokenizing on a full decision). Held by the run, not the
# TaskContext, which Ray ships to every worker beside the items themselves.
_BUILT: ContextVar[dict[str, Built] | None] = ContextVar("evalsuite_built_items", default=None)


@contextmanager
def built_once() -> Iterator[dict[str, Built]]:
    """Within the block, left_to_run builds each task definition's items once."""
    memo: dict[str, Built] = {}
    token = _BUILT.set(memo)
    try:
        yield memo
    finally:
        _BUILT.reset(token)


def definition_key(cfg: RunConfig) -> str:
    """What a config's items are built from: its tasks, passes, limit, seed and order (stop)."""
    fields = cfg.model_dump(mode="json", include={"tasks", "latency", "capacity", "limit", "seed", "stop"})
    return json.dumps(fields, sort_keys=True, default=str)


def built_items(cfg: RunConfig, ctx: TaskContext, run_dir: RunDir, stop: Full | None = None) -> Built:
    """The config's tasks and items: built (a span of phases.jsonl), or those this run built already."""
    memo, key = _BUILT.get(), definition_key(cfg)
    if memo is not None and key in memo:
        return memo[key]
    with run_dir.phase("items") as span:
        found = preflight(cfg, ctx, stop)
        span["items"] = sum(len(s) for s in found[1].values())
    if memo is not None:
        memo[key] = found
    return found


def left_to_run(cfg: RunConfig, ctx: TaskContext, run_dir: RunDir, record: RunRecord,
                resume: bool, stop: Full | None = None) -> tuple[list[Task], dict[str, list[Sample]], dict[str, Variant]]:
    """The tasks, their samples and the variants left to run; the results --resume leaves as
    recorded go into `record`."""
    tasks, samples = built_items(cfg, ctx, run_dir, stop)
    todo, kept = to_run(cfg, run_dir, tasks, samples, resume)
    for prev in kept:
        put_result(record, prev)
    return tasks, samples, todo


def prompt_tokens(request) -> int:
    """Token count of a request's prompt; text is estimated at 3 characters a token (English runs
    nearer 4), so a text batch errs towards being smaller."""
    if request.prompt_token_ids is not None:
        return len(request.prompt_token_ids)
    return len(request.prompt or "") // 3 + 1


def batches(samples: list[Sample], size: int, max_tokens: int):
    """Consecutive runs of at most `size` samples and `max_tokens` prompt tokens (never empty: a
    single longer sample is a batch of its own)."""
    batch, tokens = [], 0
    for s in samples:
        n = prompt_tokens(s.request)
        if batch and (len(batch) == size or tokens + n > max_tokens):
            yield batch
            batch, tokens = [], 0
        batch.append(s)
        tokens += n
    if batch:
        yield batch


def put_result(record: RunRecord, result: VariantResult) -> None:
    """`result` in the record, in place of the variant's earlier one."""
    record.variants = [v for v in record.variants if v.variant != result.variant] + [result]


def in_config_order(record: RunRecord, cfg: RunConfig) -> None:
    """The record's variants as the config lists them, whatever order they were run or left in."""
    order = list(cfg.variants)
    record.variants.sort(key=lambda v: order.index(v.variant) if v.variant in order else -1)
