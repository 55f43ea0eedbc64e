"""Longest first: the order a packed run starts its variants in, so that the one with the most GPU
work does not start last and finish alone.

A variant's predicted work is its engine's start (this machine's past starts of the model,
run/progress.StartTimes) and its items' GPU seconds: per task and band of prompt lengths, the
roofline's seconds a request (evalsuite.memory.throughput) at the requests at once that keep the
engine busy (a measured curve where one is kept, else the roofline), times the band's items. A
variant that builds an INT4 checkpoint goes before all others: its build runs beside their starts.
Ties, and a machine with no figures (a CPU without curves), keep the order given. The run record's
scheduler says the order and each variant's figures (`order`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from evalsuite.core.types import Sample
from evalsuite.memory.throughput import Shape, busy_concurrency, load_curves, request_seconds
from evalsuite.models.checkpoint import is_gguf
from evalsuite.run.config import Variant
from evalsuite.run.footprint import plan_inputs, planner_gpu
from evalsuite.run.pools import banded, roofline_settings
from evalsuite.tasks import Task

RULE = "INT4 builds first, then the most predicted GPU seconds (past engine starts + the items' roofline seconds)"


@dataclass
class Work:
    variant: str
    build: bool  # a `quantize:` variant: its checkpoint is built (or found) before its engine starts
    start_s: float | None = None  # the median of this machine's past starts of its model
    tasks_s: float | None = None  # its items' GPU seconds; None: `source` says why none
    source: str = ""

    @property
    def seconds(self) -> float:
        return (self.start_s or 0.0) + (self.tasks_s or 0.0)


def longest_first(works: list[Work]) -> list[Work]:
    """Builds first, then the most predicted seconds; ties keep the given order."""
    return sorted(works, key=lambda w: (not w.build, -w.seconds))


def items_seconds(config: dict[str, Any], variant: Variant, gpu: str, memory_gib: float,
                  work: list[tuple[Shape, int]], curves: list) -> tuple[float | None, str]:
    """(the items' GPU seconds on one engine of this variant, where the figure comes from)."""
    from evalsuite.memory.planner import plan

    p = plan(config, **plan_inputs(variant), gpu=gpu, device_memory_gib=memory_gib)
    settings, total, sources = roofline_settings(variant), 0.0, set()
    for shape, count in work:
        c, source = busy_concurrency(config, shape, gpu, p.max_num_batched_tokens, p.max_num_seqs, curves, settings)
        each = request_seconds(config, shape, gpu, p.max_num_batched_tokens, c, settings) if c else None
        if each is None:
            return None, source
        total, sources = total + count * each, sources | {source}
    return total, ", ".join(sorted(sources))


def predicted(name: str, variant: Variant, model_dir: str, device: str, memory_gib: float,
              work: list[tuple[Shape, int]], cache_dir: Path | None, start_s: float | None) -> Work:
    """One variant's predicted work; a planner gap leaves its items' seconds unknown, never fails the run."""
    out = Work(name, build=variant.quantize is not None, start_s=start_s)
    path = Path(variant.model or model_dir) / "config.json"
    if is_gguf(variant.model) or not path.exists():
        out.source = "no config.json to plan from"
        return out
    gpu = planner_gpu(device)
    try:
        out.tasks_s, out.source = items_seconds(json.loads(path.read_text()), variant, gpu, memory_gib, work,
                                                load_curves(cache_dir, Path(model_dir).name, gpu))
    except Exception as e:  # noqa: BLE001 - an order is worth no failed run
        out.source = f"{type(e).__name__}: {e}"
    return out


def order_record(works: list[Work]) -> dict[str, Any]:
    """The run record's scheduler keys: the rule and each variant's figures, in the order started."""
    rows = [{k: (round(v, 1) if isinstance(v, float) else v) for k, v in asdict(w).items()} for w in works]
    return {"order_rule": RULE, "order": rows}


def order_variants(todo: dict[str, Variant], tasks: list[Task], samples: dict[str, list[Sample]], model_dir: str,
                   device: str, memory_gib: float, cache_dir: Path | None, mode: str) -> list[Work]:
    """The variants left to run with their predicted work, longest first."""
    from evalsuite.run.progress import StartTimes, start_key

    work = [(shape, count) for _, shape, count in banded(tasks, samples)]
    times = StartTimes(cache_dir)
    works = []
    for name, v in todo.items():
        key = start_key(mode, v.model or model_dir)
        past = times.estimate(key) if key else None
        works.append(predicted(name, v, model_dir, device, memory_gib, work, cache_dir, past[0] if past else None))
    return longest_first(works)
