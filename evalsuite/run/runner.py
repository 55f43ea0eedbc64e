"""Runs a config: for each variant, start an engine, run every task, record, close.

Every sample's result is appended to disk as soon as its batch returns (scored and written while
the engine answers the next batch), so a killed run resumes where it stopped and final metrics are
always recomputed from the records.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from datetime import datetime, timezone
from typing import Any

from evalsuite.core import env as envmod
from evalsuite.core.errors import ConfigError, EvalsuiteError, UnsupportedVariant
from evalsuite.core.records import RunDir
from evalsuite.core.types import (Completion, EarlyStop, EngineStats, HostLoad, Metric, MetricKind, RunRecord, Sample,
                                  Score, VariantResult)
from evalsuite.engine import Engine, EngineFailed, answers
from evalsuite.engine.factory import make_engine
from evalsuite.memory.sharing import DeviceWatch
from evalsuite.models.checkpoint import is_gguf
from evalsuite.run.config import RunConfig, Variant
from evalsuite.run.engine_args import engine_args
from evalsuite.run.progress import Progress
from evalsuite.run.resume import to_run
from evalsuite.run.stopping import Stopper, Watch, ordered, stopping
from evalsuite.run.support import unsupported_reason
from evalsuite.stats.metrics import interval_metrics
from evalsuite.tasks import Task, TaskContext
from evalsuite.tasks.threshold import calibration_name


def _described_by(variant: Variant, model_dir: str) -> str:
    """The folder whose config.json describes what the variant loads: a `.gguf` file borrows the
    imported folder's config (`hf_config_path`), any other model of its own is its own folder."""
    return model_dir if is_gguf(variant.model) else variant.model or model_dir


def build_tasks(cfg: RunConfig, ctx: TaskContext) -> list[Task]:
    tasks: list[Task] = [t.build(ctx) for t in cfg.tasks]
    if cfg.latency is not None:
        tasks.append(cfg.latency.build(ctx))
    if cfg.capacity is not None:
        tasks.append(cfg.capacity.build(ctx))
    return tasks


def _row(sample: Sample, completion: Completion, score: Score) -> dict[str, Any]:
    return {"sample": sample.model_dump(), "completion": completion.model_dump(), "score": score.model_dump()}


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


class EngineCut(EngineFailed):
    """The engine failed `where` (in a task, or asked for its figures after the last) once the
    tasks in `complete` had run to their end; `metrics` are theirs, as their run scored them."""

    def __init__(self, error: EngineFailed, where: str, complete: list[str], metrics: list[Metric]):
        super().__init__(str(error))
        self.where, self.complete, self.metrics = where, complete, metrics

    @property
    def reason(self) -> str:
        return f"engine failed {self.where}: {self}; {', '.join(self.complete)} complete"


def engine_error(result: VariantResult) -> str:
    """What the engine said where it failed the variant; '' where none failed. Records written
    before `engine_error` was kept hold it in a failed variant's reason."""
    return result.engine_error or (result.reason or "" if result.status == "failed" else "")


class Runner:
    def __init__(self, cfg: RunConfig, run_dir: RunDir, model_dir: str, ctx: TaskContext, progress: Progress):
        self.cfg, self.run_dir, self.model_dir, self.ctx, self.progress = cfg, run_dir, model_dir, ctx, progress
        self.device = envmod.device_name()
        self.engine_defaults: dict[str, Any] = {}  # engine arguments a scheduler adds under the variant's own
        # Set from another thread when the whole run is interrupted and that thread ends this runner's
        # engine: what the engine raises then is the interrupt's, not the variant's failure.
        self.stopping = threading.Event()
        self.stopper = Stopper(cfg, run_dir) if stopping(cfg) else None  # --stop decided
        self.stops: dict[tuple[str, str], EarlyStop] = {}  # (variant, task): the tasks it ended early

    def run_task(self, engine: Engine, variant: str, task: Task, samples: list[Sample]) -> list[Score]:
        if task.harness:
            return self._evaluate(engine, variant, task)
        # --limit caps the calibration items as it caps the test items: a quick try stays quick
        calibration = spread(task.calibration_samples(), self.cfg.limit if task.limited else None)
        if calibration:  # items whose scores fit the test items' scoring (evalsuite.tasks.threshold): first
            task.calibrate(self._answer(engine, variant, calibration_name(task.name), task, calibration))
        watch = self.stopper.watch(variant, task, len(samples)) if self.stopper else None
        scores = self._answer(engine, variant, task.name, task, samples, watch)
        if watch is not None and watch.result is not None:
            self.stops[(variant, task.name)] = watch.result
        return scores

    def _answer(self, engine: Engine, variant: str, name: str, task: Task, samples: list[Sample],
                watch: Watch | None = None) -> list[Score]:
        """Scores of `samples`, those recorded in samples/<name>.jsonl read back, the others asked; with
        a `watch`, only until it says every check is decided (the items recorded so far may already)."""
        done = {r["sample"]["id"]: Score.model_validate(r["score"]) for r in self.run_dir.load_samples(variant, name)}
        todo = [s for s in samples if s.id not in done]
        if watch is not None and done and watch.decided(len(done)):
            todo = []
        bar = self.progress.add(f"{variant} · {name}", total=len(samples), completed=len(samples) - len(todo))
        size = task.batch_size or self.cfg.engine.batch_size
        size = watch.batch_size(size) if watch is not None else size
        warmup = task.warmup_request() if todo else None
        if warmup is not None:
            engine.generate([warmup])  # first-request overheads are not latency
        # A batch is scored and written (fsync included) on a thread while the engine answers the
        # next one: done in line, that work left the engine idle, a few % of a GPU run of many short
        # items. One thread keeps the records in order; leaving the pool waits for the batch in hand,
        # so an interrupted run still writes every answer it received.
        # Progress stays on this thread: under Ray it is a call to the driver, and that call is how a
        # worker whose driver died learns it.
        # The engine gets the next batch before this one is recorded (engine.answers), so it never
        # waits for the pipe either.
        chunks = list(batches(todo, size, self.cfg.engine.batch_tokens))
        stream = answers(engine, ([s.request for s in b] for b in chunks))
        # closed at once on a scoring error: the answer to the batch sent ahead is then not taken for a later call's
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="evalsuite-record") as pool, closing(stream):
            recording = None
            for batch, completions in zip(chunks, stream, strict=True):
                if recording is not None:
                    self.progress.advance(bar, recording.result())  # a scoring error surfaces here
                    if watch is not None and watch.decided(len(done)):
                        # decided on what is on disk: the batch in hand is kept, the one sent ahead dropped
                        recording = pool.submit(self._record, variant, name, task, batch, completions, done)
                        break
                recording = pool.submit(self._record, variant, name, task, batch, completions, done)
            if recording is not None:
                self.progress.advance(bar, recording.result())
        if watch is not None:
            watch.finish(len(done))
        return [done[s.id] for s in samples if s.id in done]

    def _record(self, variant: str, name: str, task: Task, batch: list[Sample], completions: list[Completion],
                done: dict[str, Score]) -> int:
        rows, scores = [], []
        for s, c in zip(batch, completions, strict=True):
            sc = task.score(s, c)
            scores.append(sc)
            rows.append(_row(s, c, sc))
        self.run_dir.append_samples(variant, name, rows)
        done.update({sc.sample_id: sc for sc in scores})
        return len(batch)

    def _evaluate(self, engine: Engine, variant: str, task: Task) -> list[Score]:
        recorded = self.run_dir.load_samples(variant, task.name)
        if recorded and task.resume(recorded):  # finished before an interruption: its rows hold every item
            return [Score.model_validate(r["score"]) for r in recorded]
        with self.progress.status(f"{variant}: {task.name}"):
            return task.evaluate(engine, self.ctx.tokenizer,
                                 lambda rows: self.run_dir.write_samples(variant, task.name, rows))

    def _measured(self, stats: EngineStats, variant: Variant, result: VariantResult, model_dir: str) -> EngineStats:
        from evalsuite.run.footprint import complete, predict

        stats.device = stats.device or self.device
        stats.gpu_count = variant.tensor_parallel_size * variant.pipeline_parallel_size  # memory is per GPU
        if not result.predicted:  # once per engine: at its start; the end only completes its figures
            try:
                result.predicted = predict(model_dir, variant, stats, stats.device)
            except Exception as e:  # noqa: BLE001 - a planner gap must not cost the measured run
                result.predicted = {"error": f"{type(e).__name__}: {e}"}
        return complete(stats, result.predicted)

    def _quantized(self, name: str, variant: Variant, result: VariantResult) -> str | None:
        """The checkpoint folder of a `quantize:` variant (the dense copy when `simulate`), or None
        when the variant ends here: skipped if the quantization tool is missing (like an
        unsupported platform), failed otherwise."""
        if variant.simulate:
            from evalsuite.models.simulate import checkpoint_for_variant
        else:
            from evalsuite.models.quantize import checkpoint_for_variant

        what = "simulating INT4 rounding" if variant.simulate else "quantizing"
        try:
            with self.progress.status(f"{name}: {what} ({variant.quantize}; cached after the first build)"), \
                    self.run_dir.phase("build", name, method=variant.quantize) as span:
                path, result.settings["quantized"] = checkpoint_for_variant(variant.quantize, self.model_dir,
                                                                            self.ctx.cache_dir)
                span["cached"] = result.settings["quantized"].get("cached")
            return path
        except EvalsuiteError as e:
            result.status = "skipped" if isinstance(e, UnsupportedVariant) else "failed"
            result.reason = str(e)
            self.run_dir.write_result(result)
            return None

    def _simulated(self, stats: EngineStats, variant: Variant, result: VariantResult, model_dir: str) -> EngineStats:
        """Memory of the INT4 checkpoint the dense copy stands for, as the planner predicts it; the
        dense engine's own numbers are kept in the settings, apart from the record's memory."""
        from evalsuite.run.footprint import predict, simulated_stats

        stats.device = stats.device or self.device
        result.settings["dense_engine"] = {k: getattr(stats, k) for k in ("weights_gib", "kv_cache_tokens")}
        try:
            result.predicted = predict(model_dir, variant, stats, stats.device,
                                       quantization_config=result.settings["quantized"]["quantization_config"])
        except Exception as e:  # noqa: BLE001 - a planner gap leaves memory empty, not the run failed
            result.predicted = {"error": f"{type(e).__name__}: {e}"}
        return simulated_stats(stats, result.predicted)

    def _roofline(self, model_dir: str, variant: Variant, metrics: list[Metric]) -> list[Metric]:
        from evalsuite.run.footprint import roofline_metrics

        try:
            return roofline_metrics(model_dir, variant, metrics, self.device)
        except Exception:  # noqa: BLE001 - an unknown architecture has no floor; the run stands
            return []

    def _engine_variant(self, variant: Variant) -> Variant:
        """The variant with the engine arguments a scheduler adds under its own."""
        if not self.engine_defaults:
            return variant
        return variant.model_copy(update={"engine_args": {**self.engine_defaults, **variant.engine_args}})

    def _engine(self, name: str, variant: Variant, model_dir: str) -> Engine:
        """The variant's engine, not yet started."""
        model, kwargs = engine_args(self.cfg, self._engine_variant(variant), model_dir)
        return make_engine(self.cfg.engine, model, kwargs, self.run_dir.engine_log(name), self.ctx.cache_dir)

    def _opened(self, name: str, variant: Variant) -> VariantResult:
        """The variant's result as it starts: `running`, or `skipped` where this platform cannot run it."""
        earlier = self.run_dir.load_result(name)  # a resumed variant's: the load its timed items saw
        result = VariantResult(variant=name, status="running", settings=variant.model_dump(exclude_defaults=True),
                               started_at=datetime.now(timezone.utc), host_load=earlier.host_load if earlier else None)
        if variant.simulate:  # the label, whatever becomes of the run
            result.settings["simulated"] = True
        reason = None if self.cfg.engine.mode == "fake" else unsupported_reason(variant)
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
                with self.run_dir.phase("engine_close", name):
                    engine.close(wait=not interrupted)
                if interrupted:  # keeps start()'s figures with the planner's; run_config scores the recorded samples
                    self.run_dir.write_result(result)
        result.engine = device.ended(result.engine)
        result.duration_s = time.perf_counter() - t0
        self.run_dir.write_result(result)
        return result

    def _run_on(self, engine: Engine, device: DeviceWatch, name: str, variant: Variant, model_dir: str,
                tasks: list[Task], samples: dict[str, list[Sample]], result: VariantResult) -> None:
        """Start the engine, run the tasks, and fill `result` with their metrics and its figures."""
        with self.progress.status(f"{name}: starting engine"), self.run_dir.phase("engine_start", name):
            result.engine = device.started(self._start(name, engine))
        if not variant.simulate:
            # the planner's figures from the start on: a variant cut mid-run keeps its KV bytes
            # per token and prediction, which the gate's memory checks need
            result.engine = self._measured(result.engine, variant, result, _described_by(variant, model_dir))
        self.run_dir.write_result(result)  # also for a run killed outright, which `finish` scores
        metrics = self._run_tasks(engine, name, tasks, samples, result)
        try:
            stats = engine.stats()
        except EngineFailed as e:  # every task's results are in: the figures of its start stand in
            raise EngineCut(e, "after its tasks, asked for its figures", [t.name for t in tasks], metrics) from e
        result.engine = self._figures(stats, variant, result, model_dir)
        if not variant.simulate:
            metrics += self._roofline(variant.model or model_dir, variant, metrics)  # none for GGUF: no model of its weights
        result.metrics, result.status = metrics, "ok"

    def _closing(self, name: str) -> None:
        """Called as the variant's engine is about to close."""

    def _start(self, name: str, engine: Engine) -> EngineStats:
        """The engine's start (a packed run's waits while a neighbour times its latency pass)."""
        return engine.start()

    def _figures(self, stats: EngineStats, variant: Variant, result: VariantResult, model_dir: str) -> EngineStats:
        """The record's engine figures from the engine's: measured, or for a simulated variant the
        memory the planner predicts for the INT4 checkpoint."""
        if variant.simulate:
            return self._simulated(stats, variant, result, model_dir)
        return self._measured(stats, variant, result, _described_by(variant, model_dir))

    def _engine_failed(self, e: EngineFailed, variant: Variant, model_dir: str, result: VariantResult) -> None:
        """`failed` where the engine completed no task. Otherwise `partial`: minutes of finished
        tasks are worth their record (compare and gate read them, --resume asks only for the rest),
        the engine's figures those of its start, since a dead engine has no others to give."""
        result.engine_error = str(e)
        if not isinstance(e, EngineCut) or not e.complete:
            result.status, result.reason = "failed", str(e)
            return
        result.metrics = e.metrics
        result.engine = self._figures(result.engine, variant, result, model_dir)
        result.status, result.reason = "partial", e.reason

    def _run_tasks(self, engine: Engine, name: str, tasks: list[Task], samples: dict[str, list[Sample]],
                   result: VariantResult) -> list[Metric]:
        metrics: list[Metric] = []
        for i, task in enumerate(tasks):
            t_task = time.perf_counter()
            # the latency pass's load; a timed harness (the capacity pass) records each level's itself
            timed = task.timed_alone and not task.harness
            if timed:
                self._host_load(result, ending=False, task=task.name, items=len(samples[task.name]))
            try:
                with self.run_dir.phase("task", name, task=task.name, items=len(samples[task.name])):
                    scores = self.run_task(engine, name, task, samples[task.name])
            except EngineFailed as e:
                raise EngineCut(e, f"in {task.name}", [t.name for t in tasks[:i]],
                                metrics + interval_metrics(metrics)) from e
            if timed:
                self._host_load(result, ending=True)
            if (name, task.name) in self.stops:  # said in the record at once: a later cut keeps it
                result.stopped[task.name] = self.stops[(name, task.name)]
                self.run_dir.write_result(result)
            metrics += task.metrics(scores)
            metrics.append(Metric(name=f"{task.name}/wall_s", value=time.perf_counter() - t_task,
                                  kind=MetricKind.timing, unit="s", direction="lower"))
        return metrics + interval_metrics(metrics)

    def _host_load(self, result: VariantResult, ending: bool, task: str = "", items: int = 0) -> None:
        """The host's load beside the timing pass's figures, which a loaded host slows. Written as the
        pass starts, so that a run killed inside it (then scored by `finish`) still says. A resumed
        pass keeps the load its recorded items were timed under when it times none now, or when that
        load was the one that marks them."""
        now = envmod.load_average()
        if now is None:
            return
        if ending:
            if result.host_load is not None and result.host_load.end is None:
                result.host_load.end = now
            return
        recorded = len(self.run_dir.load_samples(result.variant, task))
        prior = result.host_load if recorded else None  # as _opened carried it from the earlier record
        if recorded >= items or (prior is not None and prior.loaded):
            result.host_load = prior
            return
        cpus = os.cpu_count() or 1
        result.host_load = HostLoad(cpus=cpus, start=now, engine_threads=self._engine_threads(cpus))
        self.run_dir.write_result(result)

    def _engine_threads(self, cpus: int) -> int:
        """The engine's compute threads (core.env.engine_threads); the fake engine's are none."""
        if self.cfg.engine.mode == "fake":
            return 0
        return envmod.engine_threads(self.device, self.cfg.engine.env.get("VLLM_CPU_OMP_THREADS_BIND"), cpus)


def spread(samples: list[Sample], limit: int | None) -> list[Sample]:
    """At most `limit` samples, evenly spaced over all of them, so that a quick try still touches
    every subject, length or depth a task orders its items by."""
    if not limit or len(samples) <= limit:
        return samples
    return [samples[i * len(samples) // limit] for i in range(limit)]


def task_chance(tasks: list[Task]) -> dict[str, float]:
    """Headline metric -> its value for answers that ignore the item, for the tasks that have one."""
    return {t.primary_metric: t.chance for t in tasks if t.chance is not None}


def preflight(cfg: RunConfig, ctx: TaskContext) -> tuple[list[Task], dict[str, list[Sample]]]:
    """Build every task's samples before any engine starts, so bad input costs nothing."""
    tasks = build_tasks(cfg, ctx)
    samples = {t.name: ordered(cfg, t, spread(t.samples(), cfg.limit if t.limited else None)) for t in tasks}
    for t in tasks:
        if not samples[t.name]:
            raise ConfigError(f"tasks: task {t.name!r} produced no samples (check its data and filters)")
    return tasks, samples


def left_to_run(cfg: RunConfig, ctx: TaskContext, run_dir: RunDir, record: RunRecord,
                resume: bool) -> tuple[list[Task], dict[str, list[Sample]], dict[str, Variant]]:
    """The tasks, their samples and the variants left to run; the results --resume leaves as
    recorded go into `record`."""
    with run_dir.phase("items") as span:
        tasks, samples = preflight(cfg, ctx)
        span["items"] = sum(len(s) for s in samples.values())
    todo, kept = to_run(cfg, run_dir, tasks, samples, resume)
    for prev in kept:
        put_result(record, prev)
    return tasks, samples, todo


def execute(cfg: RunConfig, run_dir: RunDir, record: RunRecord, model_dir: str, ctx: TaskContext,
            progress: Progress, resume: bool) -> RunRecord:
    """Every variant left to run, one after another; each result goes into run.json as it ends."""
    tasks, samples, todo = left_to_run(cfg, ctx, run_dir, record, resume)
    runner = Runner(cfg, run_dir, model_dir, ctx, progress)
    for name, variant in todo.items():
        put_result(record, runner.run_variant(name, variant, tasks, samples))
        run_dir.write_run(record)
    in_config_order(record, cfg)
    run_dir.write_run(record)
    return record


def put_result(record: RunRecord, result: VariantResult) -> None:
    """`result` in the record, in place of the variant's earlier one."""
    record.variants = [v for v in record.variants if v.variant != result.variant] + [result]


def in_config_order(record: RunRecord, cfg: RunConfig) -> None:
    """The record's variants as the config lists them, whatever order they were run or left in."""
    order = list(cfg.variants)
    record.variants.sort(key=lambda v: order.index(v.variant) if v.variant in order else -1)
