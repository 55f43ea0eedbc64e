"""One packed run (`run --parallel`): the plan of evalsuite.run.pools carried out, a thread per variant
whose engine (a child process) runs as Runner.run_variant runs it alone, with the plan's engine
arguments over the variant's own, quantized checkpoints built one at a time, the run's interrupt and
the latency pass's quiet (evalsuite.run.quiet). A variant whose engine ran out of memory beside others
runs again alone; with `timing: {quiet: restart}` the timed tasks run afterwards on an engine alone.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from evalsuite.core.errors import ConfigError
from evalsuite.core.rundir import RunDir
from evalsuite.core.types import (CardBudget, EarlyStop, EngineStats, Placement, Prediction, RunRecord, Sample,
                                  Scheduling, Score, TimingCondition, VariantResult)
from evalsuite.engine import Engine
from evalsuite.run import hostload
from evalsuite.run.config import RunConfig, Variant, parse_parallel
from evalsuite.run.footprint import planner_gpu
from evalsuite.run.items import in_config_order, left_to_run, put_result
from evalsuite.run.order import order_record, order_variants
from evalsuite.run.pools import (Packer, capacity, core_slices, engine_limit, gpu_env, measured, out_of_memory,
                                 plan_pools, shapes, utilization)
from evalsuite.run.progress import Progress, console
from evalsuite.run.quiet import Flight, Interrupt, Quiet, _Tracked, latency_pass
from evalsuite.run.runner import Runner
from evalsuite.run.stopping import Full
from evalsuite.tasks import Task, TaskContext


def parallel_flag(value: str) -> str | int:
    """`--parallel`'s value, or the one-line error that names the flag."""
    try:
        return parse_parallel(value)
    except ValueError as e:
        raise ConfigError(f"--parallel: {e}") from None


class _PackedRunner(Runner):
    """The runner, with engine arguments of the plan over the variant's own (the fixed KV pool and
    the utilization that lets vLLM start beside others), quantized checkpoints built one at a time,
    its engines ended by the run's interrupt, and its timed pass had with the device to itself."""

    build_lock = threading.Lock()

    def __init__(self, *args: Any, overrides: dict[str, Any], interrupt: Interrupt | None = None,
                 quiet: Quiet | None = None, gpu: str | None = None, stop: Full | None = None):
        super().__init__(*args, stop=stop)
        self.overrides = overrides
        self.interrupt = interrupt or Interrupt()
        self.stopping = self.interrupt.event
        self.quiet, self.gpu = quiet, gpu  # quiet: the latency pass runs here, its neighbours paused
        self.paused: list[str] = []
        self.flight = Flight()

    def _start(self, name: str, engine: Engine) -> EngineStats:
        if self.quiet is None:
            return super()._start(name, engine)
        with self.quiet.starting(name, engine, self.gpu, self.flight):
            return super()._start(name, engine)

    def answer_task(self, engine: Engine, variant: str, task: Task,
                    samples: list[Sample]) -> tuple[list[Score], EarlyStop | None]:
        self.flight.task = task.name
        return super().answer_task(_Tracked(engine, self.flight), variant, task, samples)  # type: ignore[arg-type]

    @contextlib.contextmanager
    def _to_itself(self, name: str) -> Iterator[TimingCondition]:
        """Its neighbours on the device paused (Quiet), then the device checked idle: a stopped
        engine's queued GPU work runs on after SIGSTOP. Without a Quiet (Ray's shares of a card),
        the idle check alone says whether others worked there."""
        if self.quiet is None:
            with super()._to_itself(name) as found:
                yield found
            return
        with self.quiet.alone(name, self.gpu) as held:
            self.paused = held.names
            if held.running:
                yield TimingCondition(neighbours="running")
                return
            found = hostload.verify_idle(self.cfg, self.device, self.gpu, held.procs)
            yield found.model_copy(update={"neighbours": "paused" if held.names else "none",
                                           "paused": held.in_flight})

    def _engine(self, name: str, variant: Variant, model_dir: str) -> Engine:
        engine = super()._engine(name, variant, model_dir)
        self.interrupt.register(engine)
        return engine

    def _closing(self, name: str) -> None:
        if self.quiet is not None:  # a closing engine is no neighbour to pause, but a pass waits out its close
            self.quiet.closing(name, self.gpu)

    def _closed(self, name: str) -> None:
        if self.quiet is not None:
            self.quiet.gone(name)

    def _engine_variant(self, variant: Variant) -> Variant:
        v = super()._engine_variant(variant)
        return v.model_copy(update={"engine_args": {**v.engine_args, **self.overrides}})

    def _quantized(self, *args: Any) -> str | None:
        with self.build_lock:  # a build takes the device's memory and cores: two at once would starve both
            return super()._quantized(*args)


def packed_runner(cfg: RunConfig, run_dir: RunDir, model_dir: str, ctx: TaskContext, progress: Any,
                  overrides: dict[str, Any], stop: Full | None = None) -> Runner:
    """A runner whose engines take `overrides` over the variant's own arguments (none: the plain runner)."""
    if not overrides:
        return Runner(cfg, run_dir, model_dir, ctx, progress, stop)
    return _PackedRunner(cfg, run_dir, model_dir, ctx, progress, overrides=overrides, stop=stop)


@dataclass
class _Slot:
    name: str
    overrides: dict[str, Any]
    env: dict[str, str]
    beside: list[str]
    cores: str | None = None
    gpu: str | None = None  # the GPU's index, where the run spreads its engines over several
    paused: list[str] = field(default_factory=list)  # the neighbours stopped while it timed its latency pass


class PackedRun:
    """One `evalsuite run --parallel`: the plan, then a pool of threads, each running one variant's
    engine (itself a child process) as Runner.run_variant does alone."""

    def __init__(self, cfg: RunConfig, run_dir: RunDir, record: RunRecord, model_dir: str, ctx: TaskContext,
                 progress: Progress, stop: Full | None = None):
        self.cfg, self.run_dir, self.record, self.model_dir, self.stop = cfg, run_dir, record, model_dir, stop
        self.ctx, self.progress = ctx, progress
        self.cpu = planner_gpu(record.env.device) == "cpu"
        self.cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
        self.devices = capacity(self.cpu, cfg.scheduler.margin, pinned="CUDA_VISIBLE_DEVICES" in cfg.engine.env)
        _, self.total_gib, self.budget_gib = self.devices[0]  # the planner's card: a host's GPUs taken as alike
        self.predicted: dict[str, Prediction] = {}
        self.interrupt = Interrupt()
        self.quiet: Quiet | None = None  # set where the latency pass runs in place (execute_packed)
        self.most = 0  # the most engines that ran at once

    def plan(self, todo: dict[str, Variant], tasks: list[Task], samples: dict[str, list[Sample]]) -> Packer:
        bands = shapes(tasks, samples, self.cfg.engine.batch_size, self.cfg.engine.batch_tokens)
        self.predicted = plan_pools(self.model_dir, todo, self.record.env.device or "", self.total_gib, bands,
                                    getattr(self.ctx, "cache_dir", None), self.cfg.scheduler.kv_pool)
        needs: dict[str, float | None] = {name: p.footprint_gib for name, p in self.predicted.items()}
        limit = engine_limit(self.cfg.scheduler.parallel, self.cpu, len(self.cores))
        multi = {n for n, v in todo.items() if v.tensor_parallel_size * v.pipeline_parallel_size > 1}
        self.slices = core_slices(self.cores, limit) if self.cpu else []
        sched = scheduling(self.record)
        sched.kind, sched.parallel, sched.limit, sched.kv_pool = "local", self.cfg.scheduler.parallel, limit, \
            self.cfg.scheduler.kv_pool
        sched.memory_gib, sched.budget_gib = round(self.total_gib, 3), round(self.budget_gib, 3)
        if len(self.devices) > 1:
            sched.gpus = [CardBudget(gpu=i, memory_gib=round(t, 3), budget_gib=round(b, 3)) for i, t, b in self.devices]
        return Packer(needs, [b for _, _, b in self.devices], limit, alone=multi)

    def _slot(self, name: str, packer: Packer) -> _Slot:
        p, alone = self.predicted.get(name, Prediction()), name in packer.alone
        index, total_gib, _ = self.devices[packer.device.get(name, 0)]
        overrides: dict[str, Any] = {}
        if p.kv_cache_memory_bytes and not alone:
            overrides["kv_cache_memory_bytes"] = p.kv_cache_memory_bytes
            if not self.cpu:
                overrides["gpu_memory_utilization"] = utilization(p.footprint_gib, total_gib)
        slot = _Slot(name, overrides, dict(self.cfg.engine.env), packer.beside(name))
        if index is not None and not alone:
            slot.gpu, slot.env = index, gpu_env(slot.env, index)
        if self.cpu and "VLLM_CPU_OMP_THREADS_BIND" not in slot.env and self.slices and not alone:
            slot.cores = self.slices.pop(0)
            slot.env["VLLM_CPU_OMP_THREADS_BIND"] = slot.cores
        return slot

    def _run_slot(self, slot: _Slot, tasks: list[Task], samples: dict[str, list[Sample]]) -> VariantResult:
        cfg = self.cfg.model_copy(update={"engine": self.cfg.engine.model_copy(update={"env": slot.env})})
        runner = _PackedRunner(cfg, self.run_dir, self.model_dir, self.ctx, self.progress, overrides=slot.overrides,
                               interrupt=self.interrupt, quiet=self.quiet, gpu=slot.gpu, stop=self.stop)
        try:
            return runner.run_variant(slot.name, self.cfg.variants[slot.name], tasks, samples)
        finally:
            slot.paused = runner.paused

    def _placed(self, result: VariantResult, slot: _Slot, ran_with: set[str]) -> VariantResult:
        """The plan beside what the engine measured, and whom it shared the device with."""
        result.placement = Placement(parallel=self.cfg.scheduler.parallel, alone=not ran_with, ran_with=sorted(ran_with),
                                     predicted=self.predicted.get(slot.name, Prediction()), measured=measured(result),
                                     engine_args=slot.overrides, cpu_cores=slot.cores, gpu=slot.gpu)
        if self.quiet is not None and self.quiet.pause and any(t.timed_alone for t in self.tasks):
            # timed on this engine with the device to itself: the figures are this engine's, its pool the plan's
            result.placement.latency, result.placement.paused_for_latency = "pause", slot.paused
            result.placement.engine_alone = False
        self.run_dir.write_result(result)
        return result

    def run(self, todo: dict[str, Variant], tasks: list[Task], samples: dict[str, list[Sample]]) -> dict[str, VariantResult]:
        self.tasks = tasks
        works = order_variants(todo, tasks, samples, self.model_dir, self.record.env.device or "", self.total_gib,
                               getattr(self.ctx, "cache_dir", None), self.cfg.engine.mode)
        self.record.scheduling = Scheduling.model_validate({**scheduling(self.record).model_dump(), **order_record(works)})
        packer = self.plan({w.variant: todo[w.variant] for w in works}, tasks, samples)
        results: dict[str, VariantResult] = {}
        with ThreadPoolExecutor(max_workers=packer.limit, thread_name_prefix="evalsuite-variant") as pool:
            try:
                self._drive(pool, packer, tasks, samples, results)
            except KeyboardInterrupt:  # leaving the pool waits for its threads: end their engines first
                console.print("interrupted: ending the running engines; rerun with --resume")
                self.interrupt.now()
                raise
        return results

    def _drive(self, pool: ThreadPoolExecutor, packer: Packer, tasks: list[Task], samples: dict[str, list[Sample]],
               results: dict[str, VariantResult]) -> None:
        """Start variants while the plan lets them, record each as it ends, until none is left."""
        live: dict[Future, _Slot] = {}
        neighbours: dict[str, set[str]] = {}
        while packer.pending or live:
            for name in packer.start():
                slot = self._slot(name, packer)
                neighbours[name] = set(slot.beside)
                for other in slot.beside:
                    neighbours.setdefault(other, set()).add(name)
                live[pool.submit(self._run_slot, slot, tasks, samples)] = slot
            if len(live) > self.most:  # what the summary says ran together, not only what was allowed
                self.most = len(live)
                scheduling(self.record).most_at_once = self.most
                self.run_dir.write_run(self.record)
            finished, _ = wait(list(live), return_when=FIRST_COMPLETED)
            for fut in finished:
                slot = live.pop(fut)
                packer.done(slot.name)
                if slot.cores:
                    self.slices.append(slot.cores)
                result = self._placed(fut.result(), slot, neighbours.get(slot.name, set()))
                if neighbours.get(slot.name) and out_of_memory(result) and packer.retry_alone(slot.name):
                    console.print(f"{slot.name}: engine ran out of memory beside others; retrying it alone")
                    neighbours[slot.name] = set()
                    continue
                results[slot.name] = result
                put_result(self.record, result)
                self.run_dir.write_run(self.record)


def split_alone(cfg: RunConfig, tasks: list[Task], mode: str = "restart") -> tuple[list[Task], list[Task]]:
    """(tasks run packed, tasks run afterwards with each engine alone)."""
    if mode != "restart":
        return tasks, []
    return [t for t in tasks if not t.timed_alone], [t for t in tasks if t.timed_alone]


def scheduling(record: RunRecord) -> Scheduling:
    """The record's account of what the packing decided, begun where it has none."""
    if record.scheduling is None:
        record.scheduling = Scheduling()
    return record.scheduling


def merged(packed: VariantResult, alone: VariantResult, alone_tasks: list[Task]) -> VariantResult:
    """One variant's record of both passes: the packed tasks' metrics with the alone pass's, whose
    engine (alone on the device) gives the memory figures. An alone pass that failed costs the
    variant only its own metrics: it is `partial`, the packed engine's figures stand, and the
    reason names the pass and why it failed."""
    ok = alone.status == "ok"
    out = (alone if ok else packed).model_copy(deep=True)
    out.metrics = packed.metrics + alone.metrics
    out.primary_metrics = packed.primary_metrics + [m for m in alone.primary_metrics if m not in packed.primary_metrics]
    out.chance = {**packed.chance, **alone.chance}
    out.task_versions = {**packed.task_versions, **alone.task_versions}
    out.started_at = packed.started_at
    out.duration_s = (packed.duration_s or 0.0) + (alone.duration_s or 0.0)
    out.placement = (packed.placement or Placement()).model_copy(
        update={"engine_alone": ok, **({"packed_engine": packed.engine.model_copy()} if ok else {})})
    if not ok:
        names = ", ".join(t.name for t in alone_tasks)
        out.status = "partial"
        out.reason = f"{names} pass {alone.status}, the other tasks complete: {alone.reason or 'no reason given'}"
        out.engine_error = alone.engine_error
    return out


def execute_packed(cfg: RunConfig, run_dir: RunDir, record: RunRecord, model_dir: str, ctx: TaskContext,
                   progress: Progress, resume: bool, stop: Full | None = None) -> RunRecord:
    """The local path's execute(), with engines packed on the device, then the alone passes."""
    tasks, samples, todo = left_to_run(cfg, ctx, run_dir, record, resume, stop)
    run = PackedRun(cfg, run_dir, record, model_dir, ctx, progress, stop)
    mode = latency_pass(cfg, run.cpu)
    if mode == "pause" and cfg.engine.kind.vllm and not cfg.engine.kind.pauses:
        raise ConfigError(f"timing.quiet: pause stops the neighbours' processes, which engine.mode "
                          f"{cfg.engine.mode}'s engines do not survive (their clients would time out); allowed with "
                          f"engine.mode {cfg.engine.mode}: restart, auto")
    scheduling(record).latency_pass = mode
    run.quiet = Quiet(run_dir, cfg.engine.kind, pause=mode == "pause") if mode != "restart" else None
    packed_tasks, alone_tasks = split_alone(cfg, tasks, mode)
    results = run.run(todo, packed_tasks or tasks, samples)
    runner = Runner(cfg, run_dir, model_dir, ctx, progress, stop)
    for name in todo:
        first = results.get(name)
        if not alone_tasks or not packed_tasks or first is None or first.status != "ok" or cfg.variants[name].simulate:
            continue
        result = merged(first, runner.run_variant(name, cfg.variants[name], alone_tasks, samples), alone_tasks)
        run_dir.write_result(result)
        put_result(record, result)
        run_dir.write_run(record)
    in_config_order(record, cfg)
    run_dir.write_run(record)
    return record
