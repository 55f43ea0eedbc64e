"""Scores what an interrupted run recorded, without an engine: its variants become `partial`.

A run killed at a time limit (a rented GPU's reservation ending, a CI job's timeout) keeps every
finished batch of samples. `evalsuite run --resume` completes such a run; when the engine is no
longer at hand, `evalsuite finish` turns the recorded samples into metrics now, so that compare
and gate can read them. Every metric carries its n, the reason lists how many samples each task
recorded, and gate pairs items by id, so a partial variant is never mistaken for a whole one.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from evalsuite.capacity.task import CapacityTask
from evalsuite.core.errors import ConfigError
from evalsuite.core.rundir import ENGINE_LOG, RunDir
from evalsuite.core.types import EngineStats, Metric, RunRecord, Score, VariantResult
from evalsuite.memory.logparse import engine_stats_from_log
from evalsuite.run.config import RunConfig
from evalsuite.run.stopping import fix_intervals
from evalsuite.stats.metrics import interval_metrics
from evalsuite.tasks import TaskContext
from evalsuite.tasks.latency import LatencyTask

INTERRUPTED = ("running",)
# `pending`: a variant the run was asked for and never reached; nothing of it to score
NOT_STARTED = "not started; `evalsuite run --resume` runs it"


class _ScoringOnly:
    """Stands in for the model's tokenizer: long-context tasks refuse to build without one (they size
    prompts with it), but their metrics read only the recorded scores, and the model may be gone."""

    chat_template = None


def _config(run_dir: RunDir) -> RunConfig:
    from pydantic import ValidationError

    from evalsuite.core.configfile import format_validation_error

    path = run_dir.config_path
    if not path.exists() and not path.is_symlink():
        raise ConfigError(f"{run_dir.root}: not a run directory (no config.yaml)")
    try:
        return RunConfig.model_validate(run_dir.read_config())
    except ValidationError as e:
        raise ConfigError(f"{path}: {format_validation_error(e, RunConfig)}") from None


def _score(run_dir: RunDir, cfg: RunConfig, record: RunRecord, result: VariantResult, cache_dir: Path) -> VariantResult:
    base = Path(record.config_path).resolve().parent if record.config_path else run_dir.root
    ctx = TaskContext(base_dir=base, cache_dir=cache_dir, seed=cfg.seed, tokenizer=_ScoringOnly())
    metrics: list[Metric] = []
    counts = []
    for name, task_cfg in _scorers(cfg):
        rows = run_dir.load_samples(result.variant, name)
        if not rows:
            continue
        scores = [Score.model_validate(r["score"]) for r in rows]
        task = task_cfg.build(ctx)
        made = task.metrics(scores)
        if name in result.stopped:  # a task --stop decided ended early keeps its sequence's intervals
            fix_intervals(run_dir, cfg.baseline, result.variant, made, result.stopped[name])
        metrics += made
        if task.primary_metric not in result.primary_metrics:
            result.primary_metrics.append(task.primary_metric)
        if task.chance is not None:
            result.chance.setdefault(task.primary_metric, task.chance)
        result.task_versions.setdefault(task.name, task.version)
        counts.append(f"{name} {len(scores)}")
    result.metrics = metrics + interval_metrics(metrics)
    if result.engine == EngineStats():
        result.engine = _engine_from_log(run_dir, result.variant)
    result.status = "partial"
    result.reason = "interrupted; scored from the samples it recorded: " + (", ".join(counts) or "none")
    return result


def _scorers(cfg: RunConfig):
    """(task name, its config) for every task the run records samples of, the latency and capacity
    passes included: a pass cut at a time limit still holds the lengths (levels) it finished, each with
    its own n. Built only where samples exist: building some tasks reads their data."""
    out = [(t.name, t) for t in cfg.tasks]
    out += [(LatencyTask.name, cfg.latency)] if cfg.latency is not None else []
    return out + [(CapacityTask.name, cfg.capacity)] if cfg.capacity is not None else out


def _engine_from_log(run_dir: RunDir, variant: str) -> EngineStats:
    """An interrupted variant never asked the engine for its memory figures, but vLLM wrote them to
    its log at start (weights, KV capacity, graphs): take those, each marked "log"."""
    log = run_dir.root / variant / ENGINE_LOG
    return engine_stats_from_log(log.read_text(errors="replace")) if log.is_file() else EngineStats()


def finish_run(root: Path, cache_dir: Path, selected: Iterable[str] = ()) -> RunRecord:
    """Mark every interrupted variant of the run folder `partial`, with metrics over its samples.
    Of `selected` (the variants the run was asked for), those that never started are recorded
    `pending`, so the record, and the table printed from it, names every one."""
    run_dir = RunDir(root)
    run_dir.load_run()  # a folder that is no run folder is refused before a lock file is made in it
    with run_dir.held():
        return _finished(run_dir, cache_dir, selected)


def _finished(run_dir: RunDir, cache_dir: Path, selected: Iterable[str]) -> RunRecord:
    record = run_dir.load_run()  # as the last process to hold the folder left it
    cfg = _config(run_dir)
    done = {v.variant: v for v in record.variants}
    for name in cfg.variants:
        # The variant's own result.json first: the runner rewrites it at every status change, while
        # run.json learns of a variant only when it ends. A resumed variant cut again therefore reads
        # `running` there but still shows its earlier `partial` in run.json, scored on fewer samples.
        result = run_dir.load_result(name) or done.get(name)
        if result is None and name in selected:
            result = VariantResult(variant=name, status="pending", reason=NOT_STARTED)
        if result is None:
            continue
        if result.status in INTERRUPTED:
            result = _score(run_dir, cfg, record, result, cache_dir)
            run_dir.write_result(result)
        done[name] = result
    record.variants = [done[n] for n in cfg.variants if n in done]
    run_dir.write_run(record)
    return record
