"""An engine that may share its GPU with other processes: what NVML saw over the engine's life,
and which of vLLM's memory figures are still the engine's own.

vLLM measures some figures as drops in the device's free memory while it starts; with another
process on the device the drop is partly that process's, so those figures are withheld (marked
"withheld") rather than recorded as this engine's.
"""

from __future__ import annotations

from collections.abc import Callable

from evalsuite.core.settings import GPU_MEMORY_UTILIZATION
from evalsuite.core.types import EngineStats
from evalsuite.memory.cuda import NvmlPeak, device_total_gib

# Free-memory deltas: beside four other engines, 17-31 GiB of "CUDA graphs" were seen for a 1.5B
# model whose graphs take 0.4-0.5 GiB alone.
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


class DeviceWatch:
    """NVML over one engine's life, entered before the engine starts and left once it is closed."""

    def __init__(self, gpu_memory_utilization: float | None, root: Callable[[], int | None] | None = None):
        """`root`: the engine's process id once it has one (its tree is the engine); without it,
        this process's tree."""
        self.gpu_memory_utilization = gpu_memory_utilization or GPU_MEMORY_UTILIZATION
        self.nvml = NvmlPeak(root=root)
        self.others_at_start: int | None = None

    def __enter__(self) -> DeviceWatch:
        self.nvml.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.nvml.__exit__(*exc)

    def started(self, stats: EngineStats) -> EngineStats:
        """start()'s figures, with the deltas withheld and the count of other processes already in:
        a run cut before the end's record still says whether its device was shared."""
        self.others_at_start = self.nvml.other_processes()
        stats = without_shared_deltas(stats, self.others_at_start)
        stats.other_processes = self.others_at_start
        return stats

    def ended(self, stats: EngineStats) -> EngineStats:
        """The end's figures, withheld as at start (engine.stats() reads vLLM's log anew), with NVML's
        peak, the most other processes seen, and what vLLM reserved (the same for every variant,
        kept as a cross-check)."""
        stats = without_shared_deltas(stats, self.others_at_start)
        stats.other_processes = self.nvml.other_processes()
        stats.nvml_peak_gib = self.nvml.peak_gib()
        if stats.nvml_peak_gib is not None:
            stats.source["nvml_peak_gib"] = "process" if self.nvml.peak_is_own() else "device"
        total = device_total_gib()
        if total and stats.reserved_gib is None:
            stats.reserved_gib = total * self.gpu_memory_utilization
            stats.source["reserved_gib"] = "computed"
        return stats
