"""The only module that talks to NVIDIA devices (through NVML, which needs no CUDA context).

NVML 'used' is constant across variants (vLLM reserves gpu_memory_utilization up front), so
it is recorded only as a cross-check: the peak of the engine's processes and of the device.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import psutil

from evalsuite.core.units import GIB


def _nvml():
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # no driver, no GPU, or nvidia-ml-py missing: nothing to sample
        return None


def device_total_gib(index: int = 0) -> float | None:
    nv = _nvml()
    if nv is None:
        return None
    return nv.nvmlDeviceGetMemoryInfo(nv.nvmlDeviceGetHandleByIndex(index)).total / GIB


def device_memory_gib(index: int = 0) -> tuple[float, float]:
    """(total, free) memory of a GPU; (0, 0) where there is none to read."""
    nv = _nvml()
    if nv is None:
        return 0.0, 0.0
    info = nv.nvmlDeviceGetMemoryInfo(nv.nvmlDeviceGetHandleByIndex(index))
    return info.total / GIB, info.free / GIB


def visible_gpus() -> list[tuple[str, float, float]]:
    """(index, total GiB, free GiB) of each GPU this process may use, by NVML index (PCI bus order):
    every GPU, or those a CUDA_VISIBLE_DEVICES list of indices names; [] without NVML, or where that
    list names UUIDs or MIG instances, which the caller treats as the one device vLLM will take."""
    nv = _nvml()
    if nv is None:
        return []
    indices = list(range(nv.nvmlDeviceGetCount()))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        if not all(i.isdigit() for i in ids):
            return []
        indices = [int(i) for i in ids if int(i) in indices]
    out = []
    for i in indices:
        info = nv.nvmlDeviceGetMemoryInfo(nv.nvmlDeviceGetHandleByIndex(i))
        out.append((str(i), info.total / GIB, info.free / GIB))
    return out


class NvmlPeak:
    """Samples device memory used and the bytes held by our process tree (the engine's, given
    `root`), keeping peaks, and how many other processes shared a device with that tree."""

    def __init__(self, interval_s: float = 0.1, root: Callable[[], int | None] | None = None):
        self.nv = _nvml()
        # whose process tree is "ours": the engine's own process where it has one, so that engines
        # this process runs side by side (run --parallel) count as each other's other processes
        self.root = root
        self.interval_s = interval_s
        self.device_peak = 0
        self.tree_peak = 0
        self.others_max = 0
        self.seen_ours = False  # NVML listed a process of our tree: its PIDs are ours to compare
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _tree_pids(self) -> set[int]:
        pid = self.root() if self.root else os.getpid()
        if pid is None:  # the engine's process is not started yet
            return set()
        try:
            root = psutil.Process(pid)
            return {pid, *(p.pid for p in root.children(recursive=True))}
        except psutil.NoSuchProcess:
            return set()

    def _sample(self) -> None:
        pids = self._tree_pids()
        for i in range(self.nv.nvmlDeviceGetCount()):
            h = self.nv.nvmlDeviceGetHandleByIndex(i)
            self.device_peak = max(self.device_peak, self.nv.nvmlDeviceGetMemoryInfo(h).used)
            procs = self.nv.nvmlDeviceGetComputeRunningProcesses(h)
            ours = [p for p in procs if p.pid in pids]
            self.tree_peak = max(self.tree_peak, sum(p.usedGpuMemory or 0 for p in ours))
            if ours:  # only the devices our engine uses: other GPUs' tenants share nothing with it
                self.seen_ours = True
                self.others_max = max(self.others_max, len(procs) - len(ours))

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._sample()
            except Exception:  # a process that exits between listing and reading is skipped
                continue

    def __enter__(self):
        if self.nv is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def other_processes(self) -> int | None:
        """The most processes outside our tree seen at once on a device our tree used; None where
        NVML cannot tell (no driver, or a PID namespace in which our own PIDs never appear)."""
        return self.others_max if self.nv is not None and self.seen_ours else None

    def peak_gib(self) -> float | None:
        """The engine tree's peak; the device's when per-process accounting is unavailable (containers)."""
        if self.nv is None:
            return None
        return (self.tree_peak or self.device_peak) / GIB

    def peak_is_own(self) -> bool:
        """Whether peak_gib() is the tree's own bytes rather than the whole device's (which, with
        engines side by side, counts the others' too)."""
        return self.tree_peak > 0
