"""Runs a config: for each variant, start an engine, run every task, record, close.

The checkpoint a `quantize:` variant runs on is evalsuite.models.build's; the engine figures and the
planner's beside them are evalsuite.run.footprint's; the host's load over a timed pass is
evalsuite.run.hostload's; each task's items are answered and recorded by evalsuite.run.answering.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

from evalsuite.core import env as envmod
from evalsuite.core.errors import EvalsuiteError, UnsupportedVariant
from evalsuite.core.rundir import RunDir
from evalsuite.core.types import (Build, EarlyStop, EngineStats, Metric, MetricKind, RunRecord, Sample, Score, TimingCondition,
                                  VariantResult)
from evalsuite.engine import Engine, EngineFailed
from evalsuite.engine.factory import make_engine
from evalsuite.memory.sharing import DeviceWatch
from evalsuite.models.variants import checkpoint_for
from evalsuite.run import hostload
from evalsuite.run.config import RunConfig, Variant
from evalsuite.run.engine_args import engine_args
from evalsuite.run.footprint import floor_metrics, record_figures
from evalsuite.run.answering import Answering
from evalsuite.run.items import in_config_order, left_to_run, put_result, task_chance
from evalsuite.run.progress import Progress, start_key
from evalsuite.run.stopping import Full, fix_intervals
from evalsuite.run.support import unsupported_reason
from evalsuite.stats.metrics import interval_metrics
from evalsuite.tasks import Task, TaskContext


class EngineCut(EngineFailed):
    """The engine failed `where` (in a task, or asked for its figures after the last) once the
    tasks in `complete` had run to their end; `metrics` are theirs, as their run scored them."""

    def __init__(self, error: EngineFailed, where: str, complete: list[str], metrics: list[Metric]):
        super().__init__(str(error))
        self.where, self.complete, self.metrics = where, complete, metrics

    @property
    def reason(self) -> str:
        return f"engine failed {self.where}: {self}; {', '.join(self.complete)} complete"


class Runner(Answering):
    """Runs each variant: its checkpoint built, its engine started, every task answered on it
    (Answering), its figures recorded, the engine closed; an engine that fails ends the variant."""

    def __init__(self, cfg: RunConfig, run_dir: RunDir, model_dir: str, ctx: TaskContext, progress: Progress,
                 stop: Full | None = None):
        super().__init__(cfg, run_dir, ctx, progress, stop)
        self.model_dir = model_dir
        self.device = envmod.device_name()
        self.engine_defaults: dict[str, Any] = {}  # engine arguments a scheduler adds under the variant's own
        # Set from another thread when the whole run is interrupted and that thread ends this runner's
        # engine: what the engine raises then is the interrupt's, not the variant's failure.
        self.stopping = threading.Event()

    def _quantized(self, name: str, variant: Variant, result: VariantResult) -> str | None:
        """The checkpoint folder of a `quantize:` variant (the dense copy when `simulate`), or None
        when the variant ends here: skipped if the quantization tool is missing (like an
        unsupported platform), failed otherwise."""
        what = "simulating INT4 rounding" if variant.simulate else "quantizing"
        try:
            with self.progress.status(f"{name}: {what} ({variant.quantize}; cached after the first build)"), \
                    self.run_dir.phase("build", name, method=variant.quantize) as span:
                path, result.build = checkpoint_for(variant.quantize, variant.simulate, self.model_dir, self.ctx.cache_dir)
                span["cached"] = result.build.cached
            return path
        except EvalsuiteError as e:
            result.status = "skipped" if isinstance(e, UnsupportedVariant) else "failed"
            result.reason = str(e)
            self.run_dir.write_result(result)
            return None

    def _engine_variant(self, variant: Variant) -> Variant:
        """The variant with the engine arguments a scheduler adds under its own."""
        if not self.engine_defaults:
            return variant
        return variant.model_copy(update={"engine_args": {**self.engine_defaults, **variant.engine_args}})

    def _engine(self, name: str, variant: Variant, model_dir: str) -> Engine:
        """The variant's engine, not yet started."""
        model, kwargs = engine_args(self.cfg, self._engine_variant(variant), model_dir)
        sched = self.cfg.scheduler  # inside a Ray task, vLLM joins the task's cluster and starts none
        return make_engine(self.cfg.engine, model, kwargs, self.run_dir.engine_log(name), self.ctx.cache_dir,
                           ray_loopback=not sched.unsafe_listen and sched.kind != "ray")

    def _opened(self, name: str, variant: Variant) -> VariantResult:
        """The variant's result as it starts: `running`, or `skipped` where this platform cannot run it."""
        earlier = self.run_dir.load_result(name)  # a resumed variant's: the load its timed items saw
        result = VariantResult(variant=name, status="running", settings=variant.model_dump(exclude_defaults=True),
                               started_at=datetime.now(timezone.utc), host_load=earlier.host_load if earlier else None,
                               timing=earlier.timing if earlier else None)
        if variant.simulate:  # the label, whatever becomes of the run
            result.build = Build(method=variant.quantize, simulated=True)
        reason = unsupported_reason(variant) if self.cfg.engine.kind.vllm else None
        if reason:
            result.status, result.reason = "skipped", reason
        self.run_dir.write_result(result)
        return result

    def run_variant(self, name: str, variant: Variant, tasks: list[Task], samples: dict[str, list[Sample]]) -> VariantResult:
        """Start the variant's engine, run every task on it, record; an engine that fails is recorded
        with its reason, the tasks it completed kept (_engine_failed)."""
        result = self._opened(name, variant)
        if result.status == "skipped":
            return result
        model_dir = self.model_dir
        if variant.quantize:  # run on the variant's cached W4A16 checkpoint, or its dense simulation
            model_dir = self._quantized(name, variant, result)
            if model_dir is None:
                return result
        if variant.simulate:  # 16-bit kernels run it: a timing pass would time the baseline, not INT4
            tasks = [t for t in tasks if t.runs_simulated]
        result.primary_metrics = [t.primary_metric for t in tasks]
        result.chance = task_chance(tasks)
        result.task_versions = {t.name: t.version for t in tasks}
        t0 = time.perf_counter()
        engine = self._engine(name, variant, model_dir)
        interrupted = False
        with DeviceWatch(variant.gpu_memory_utilization, root=lambda: engine.pid) as device:
            try:
                self._run_on(engine, device, name, variant, model_dir, tasks, samples, result)
            except KeyboardInterrupt:
                interrupted = True
                raise
            except Exception as e:
                if self.stopping.is_set():
                    interrupted = True
                    raise KeyboardInterrupt from e
                if not isinstance(e, EngineFailed):
                    raise
                self._engine_failed(e, variant, model_dir, result)
            finally:
                self._closing(name)
                try:
                    with self.run_dir.phase("engine_close", name):
                        engine.close(wait=not interrupted)
                finally:
                    self._closed(name)
                if interrupted:  # keeps start()'s figures with the planner's; run_config scores the recorded samples
                    self.run_dir.write_result(result)
        result.engine = device.ended(result.engine)
        result.duration_s = time.perf_counter() - t0
        self.run_dir.write_result(result)
        return result

    def _run_on(self, engine: Engine, device: DeviceWatch, name: str, variant: Variant, model_dir: str,
                tasks: list[Task], samples: dict[str, list[Sample]], result: VariantResult) -> None:
        """Start the engine, run the tasks, and fill `result` with their metrics and its figures."""
        with self.progress.engine_start(name, start_key(self.cfg.engine.mode, variant.model or model_dir)), \
                self.run_dir.phase("engine_start", name):
            result.engine = device.started(self._start(name, engine))
        if not variant.simulate:
            # the planner's figures from the start on: a variant cut mid-run keeps its KV bytes
            # per token and prediction, which the gate's memory checks need
            record_figures(result, result.engine, variant, model_dir, self.device)
        self.run_dir.write_result(result)  # also for a run killed outright, which `finish` scores
        metrics = self._run_tasks(engine, name, tasks, samples, result)
        try:
            stats = engine.stats()
        except EngineFailed as e:  # every task's results are in: the figures of its start stand in
            raise EngineCut(e, "after its tasks, asked for its figures", [t.name for t in tasks], metrics) from e
        record_figures(result, stats, variant, model_dir, self.device)
        if not variant.simulate:
            metrics += floor_metrics(model_dir, variant, metrics, self.device)
        result.metrics, result.status = metrics, "ok"

    def _closing(self, name: str) -> None:
        """Called as the variant's engine is about to close."""

    def _closed(self, name: str) -> None:
        """Called once the variant's engine has closed."""

    def _start(self, name: str, engine: Engine) -> EngineStats:
        """The engine's start (a packed run's waits while a neighbour times its latency pass)."""
        return engine.start()

    @contextlib.contextmanager
    def _to_itself(self, name: str) -> Iterator[TimingCondition]:
        """The device to this engine for a timed pass, checked idle (hostload.verify_idle); a packed
        run's also pauses the engines beside it first."""
        yield hostload.verify_idle(self.cfg, self.device, None, [])

    def _engine_failed(self, e: EngineFailed, variant: Variant, model_dir: str, result: VariantResult) -> None:
        """`failed` where the engine completed no task. Otherwise `partial`: minutes of finished
        tasks are worth their record (compare and gate read them, --resume asks only for the rest),
        the engine's figures those of its start, since a dead engine has no others to give."""
        result.engine_error = str(e)
        if not isinstance(e, EngineCut) or not e.complete:
            result.status, result.reason = "failed", str(e)
            return
        result.metrics = e.metrics
        record_figures(result, result.engine, variant, model_dir, self.device)
        result.status, result.reason = "partial", e.reason

    def _run_tasks(self, engine: Engine, name: str, tasks: list[Task], samples: dict[str, list[Sample]],
                   result: VariantResult) -> list[Metric]:
        metrics: list[Metric] = []
        for i, task in enumerate(tasks):
            t_task = time.perf_counter()
            # the latency pass's load; a timed harness (the capacity pass) records each level's itself
            timed = task.timed_alone and not task.harness
            if timed:
                timed = hostload.fresh_pass(self.run_dir, name, task.name, len(samples[task.name]))
                hostload.pass_started(self.cfg, self.run_dir, self.device, result, task.name, len(samples[task.name]))
            try:
                with self.run_dir.phase("task", name, task=task.name, items=len(samples[task.name])):
                    scores, stopped = self._timed(engine, name, task, samples[task.name], result) if timed else \
                        self.answer_task(engine, name, task, samples[task.name])
            except EngineFailed as e:
                raise EngineCut(e, f"in {task.name}", [t.name for t in tasks[:i]],
                                metrics + interval_metrics(metrics)) from e
            if timed:
                hostload.pass_ended(result)
            made = task.metrics(scores)
            if stopped is not None:  # said in the record at once: a later cut keeps it
                result.stopped[task.name] = stopped
                self.run_dir.write_result(result)
                fix_intervals(self.run_dir, self.cfg.baseline, name, made, stopped)
            metrics += made
            metrics.append(Metric(name=f"{task.name}/wall_s", value=time.perf_counter() - t_task,
                                  kind=MetricKind.timing, unit="s", direction="lower"))
        return metrics + interval_metrics(metrics)

    def _timed(self, engine: Engine, name: str, task: Task, samples: list[Sample],
               result: VariantResult) -> tuple[list[Score], EarlyStop | None]:
        """A timed pass with the device to itself, its condition on disk before the first request."""
        with self._to_itself(name) as found:
            result.timing = hostload.condition(self.cfg, found, result, self.device, task.warmup, task.repeats)
            self.run_dir.write_result(result)
            return self.answer_task(engine, name, task, samples)


def execute(cfg: RunConfig, run_dir: RunDir, record: RunRecord, model_dir: str, ctx: TaskContext,
            progress: Progress, resume: bool, stop: Full | None = None) -> RunRecord:
    """Every variant left to run, one after another; each result goes into run.json as it ends."""
    tasks, samples, todo = left_to_run(cfg, ctx, run_dir, record, resume, stop)
    runner = Runner(cfg, run_dir, model_dir, ctx, progress, stop)
    progress.expect(sum(not cfg.engine.kind.vllm or not unsupported_reason(v) for v in todo.values()),
                    start_key(cfg.engine.mode, model_dir))
    for name, variant in todo.items():
        put_result(record, runner.run_variant(name, variant, tasks, samples))
        run_dir.write_run(record)
    in_config_order(record, cfg)
    run_dir.write_run(record)
    return record
