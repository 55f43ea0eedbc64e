"""What a timed pass (the latency pass) was timed beside: the host's load (core.types.HostLoad), and
the device's own state (core.types.TimingCondition): whether other engines of the run shared it, and
whether it was found idle before the first warm-up request. A loaded host slows a request's TTFT
and ITL; so does a GPU still running a paused neighbour's queued kernels. The record says which."""

from __future__ import annotations

import os
import time

import psutil

from evalsuite.core import env as envmod
from evalsuite.core.rundir import RunDir
from evalsuite.core.types import TimingCondition, VariantResult
from evalsuite.memory.cuda import nvml_device, utilization_reader, wait_idle
from evalsuite.run.config import RunConfig

# A stopped process spends no CPU time: read twice this far apart, its counters agree.
STILL_S = 0.3
STILL_TIMEOUT_S = 5.0


def pass_started(cfg: RunConfig, run_dir: RunDir, device: str, result: VariantResult, task: str, items: int) -> None:
    """The load as the pass starts, written at once, so that a run killed inside it (then scored by
    `finish`) still says. A resumed pass keeps the load its recorded items were timed under when it
    times none now (fresh_pass times a partly recorded pass again in full)."""
    cpus = os.cpu_count() or 1
    now = envmod.host_load_now(engine_threads(cfg, device, cpus))
    if now is None:
        return
    if len(run_dir.load_samples(result.variant, task)) >= items:
        return  # as the runner carried it from the earlier record
    result.host_load = now
    run_dir.write_result(result)


def pass_ended(result: VariantResult) -> None:
    """The load as the pass ends, beside the one it started under."""
    envmod.host_load_ended(result.host_load)


def fresh_pass(run_dir: RunDir, variant: str, task: str, items: int) -> bool:
    """Whether the pass times anything now. A pass cut part-way (a resumed run) is timed again in
    full: its recorded requests and the ones left would be timed in two sessions, under two
    conditions, and pooled into one median."""
    recorded = len(run_dir.load_samples(variant, task))
    if recorded >= items:
        return False
    if recorded:
        run_dir.write_samples(variant, task, [])
    return True


def engine_threads(cfg: RunConfig, device: str, cpus: int) -> int:
    """The engine's compute threads (core.env.engine_threads); a stand-in's without vLLM are none."""
    if not cfg.engine.kind.vllm:
        return 0
    return envmod.engine_threads(device, cfg.engine.env.get("VLLM_CPU_OMP_THREADS_BIND"), cpus)


def verify_idle(cfg: RunConfig, device: str, gpu: str | None, stopped: list[psutil.Process]) -> TimingCondition:
    """The device checked idle before the timed requests: on a GPU, NVML's utilization read 0 for a
    second (the kernels paused neighbours queued have run out); on a CPU, the stopped neighbours'
    processes spend no CPU time (alone, the host's load is the check). Not checked for a stand-in
    without vLLM (the fake engine), or where NVML cannot read the card."""
    if not cfg.engine.kind.vllm:
        return TimingCondition()
    if not device.startswith("CPU"):
        read = utilization_reader(nvml_device(cfg.engine.env, gpu))
        if read is None:
            return TimingCondition()
        w = wait_idle(read)
        return TimingCondition(idle="nvml", idle_ok=w.ok, drain_s=round(w.waited_s, 3),
                               utilization_pct=w.readings[-12:])
    if not stopped:
        return TimingCondition()
    t0 = time.monotonic()
    ok = cpu_still(stopped)
    return TimingCondition(idle="cpu_time", idle_ok=ok, drain_s=round(time.monotonic() - t0, 3))


def cpu_still(procs: list[psutil.Process], window_s: float = STILL_S, timeout_s: float = STILL_TIMEOUT_S) -> bool:
    """Whether the processes (stopped ones) spend no CPU time over `window_s`, within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    before = _cpu_times(procs)
    while True:
        time.sleep(window_s)
        after = _cpu_times(procs)
        if after <= before:
            return True
        if time.monotonic() >= deadline:
            return False
        before = after


def _cpu_times(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            continue
    return total


def condition(cfg: RunConfig, found: TimingCondition, result: VariantResult, device: str, warmup: int,
              repeats: int | None) -> TimingCondition:
    """`found` (neighbours, the idle check) with what else moves a timing: the warm-up, the repeats, the
    device, the engine mode and a CPU engine's cores."""
    cores = engine_threads(cfg, device, os.cpu_count() or 1) or None
    return found.model_copy(update={"warmup": warmup, "repeats": repeats, "engine": cfg.engine.mode, "cores": cores,
                                    "device": result.engine.device or device})
