"""The host's load beside a timed pass (the latency pass): a loaded host slows a request's TTFT and
ITL, so the record says what load its figures were timed under (core.types.HostLoad)."""

from __future__ import annotations

import os

from evalsuite.core import env as envmod
from evalsuite.core.records import RunDir
from evalsuite.core.types import VariantResult
from evalsuite.run.config import RunConfig


def pass_started(cfg: RunConfig, run_dir: RunDir, device: str, result: VariantResult, task: str, items: int) -> None:
    """The load as the pass starts, written at once, so that a run killed inside it (then scored by
    `finish`) still says. A resumed pass keeps the load its recorded items were timed under when it
    times none now, or when that load was the one that marks them."""
    cpus = os.cpu_count() or 1
    now = envmod.host_load_now(engine_threads(cfg, device, cpus))
    if now is None:
        return
    recorded = len(run_dir.load_samples(result.variant, task))
    prior = result.host_load if recorded else None  # as the runner carried it from the earlier record
    if recorded >= items or (prior is not None and prior.loaded):
        result.host_load = prior
        return
    result.host_load = now
    run_dir.write_result(result)


def pass_ended(result: VariantResult) -> None:
    """The load as the pass ends, beside the one it started under."""
    envmod.host_load_ended(result.host_load)


def engine_threads(cfg: RunConfig, device: str, cpus: int) -> int:
    """The engine's compute threads (core.env.engine_threads); the fake engine's are none."""
    if cfg.engine.mode == "fake":
        return 0
    return envmod.engine_threads(device, cfg.engine.env.get("VLLM_CPU_OMP_THREADS_BIND"), cpus)
