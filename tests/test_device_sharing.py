"""Whether an engine had its GPU to itself: NVML's process list read against our process tree
(a stand-in NVML module: pure logic), and the free-memory deltas withheld when it did not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

from evalsuite.core.types import EngineStats
from evalsuite.memory.cuda import NvmlPeak
from evalsuite.memory.sharing import without_shared_deltas


class _Nvml:
    """NVML's calls NvmlPeak makes, over a fixed list of (pid, bytes) per device."""

    def __init__(self, devices: list[list[tuple[int, int | None]]]):
        self.devices = devices

    def nvmlDeviceGetCount(self):
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(used=sum(b or 0 for _, b in self.devices[h]))

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=p, usedGpuMemory=b) for p, b in self.devices[h]]


def _shared_by(n: int) -> type[NvmlPeak]:
    """An NvmlPeak that saw `n` other processes on the engine's GPU (the runner's view of a lane)."""
    return type("SharedNvml", (NvmlPeak,), {"other_processes": lambda self: n})


def _sampled(devices) -> NvmlPeak:
    peak = NvmlPeak()
    peak.nv = _Nvml(devices)
    peak._sample()
    return peak


def test_alone_shared_and_unknown():
    me, other = os.getpid(), 10**7
    assert _sampled([[(me, 2**30)]]).other_processes() == 0
    assert _sampled([[(me, 2**30), (other, 2**30), (other + 1, None)]]).other_processes() == 2
    # another GPU's tenants share nothing with our engine
    assert _sampled([[(me, 2**30)], [(other, 2**30)]]).other_processes() == 0
    # a PID namespace that hides our own PIDs: NVML cannot tell, so it says nothing
    assert _sampled([[(other, 2**30)]]).other_processes() is None


def test_packed_engines_of_one_process_are_each_others_other_processes():
    """`run --parallel` starts every engine from one evalsuite process: each engine's own tree is
    "ours", so the neighbour counts as another process and its bytes are not this engine's peak."""
    a, b = (subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(2))
    try:
        devices = [[(a.pid, 2**30), (b.pid, 3 * 2**30)]]
        peak = NvmlPeak(root=lambda: a.pid)
        peak.nv = _Nvml(devices)
        peak._sample()
        assert peak.other_processes() == 1 and peak.peak_gib() == 1.0 and peak.peak_is_own()
        before_start = NvmlPeak(root=lambda: None)
        before_start.nv = _Nvml(devices)
        before_start._sample()
        assert before_start.other_processes() is None  # nothing of the engine's seen yet
        # without its own bytes the peak is the whole card's, both engines together: not this engine's
        assert before_start.peak_gib() == 4.0 and not before_start.peak_is_own()
    finally:
        for p in (a, b):
            p.kill()
            p.wait()


def test_shared_device_withholds_the_free_memory_deltas():
    def stats():
        return EngineStats(weights_gib=3.3, cuda_graph_gib=31.6, non_torch_gib=0.2, peak_activation_gib=1.0,
                           kv_used_peak_gib=1.0, required_gib=6.5,
                           source={"cuda_graph_gib": "log", "required_gib": "computed"})

    alone = without_shared_deltas(stats(), 0)
    assert (alone.cuda_graph_gib, alone.required_gib) == (31.6, 6.5)
    shared = without_shared_deltas(stats(), 4)
    assert shared.cuda_graph_gib is None and shared.non_torch_gib is None and shared.required_gib is None
    assert shared.source["cuda_graph_gib"] == "withheld" and shared.weights_gib == 3.3
    assert shared.source["required_gib"] == "withheld"


def test_export_never_restores_a_figure_the_run_withheld():
    """`evalsuite export` merges a cut run's record with the kept one of the same settings; a
    free-memory delta the new run withheld (shared device) must not come back from an older record."""
    from evalsuite.results.scores import with_kept_figures

    settings = {"kv_cache_dtype": "auto"}
    kept = {"settings": settings, "engine": {"cuda_graph_gib": 20.8, "weights_gib": 3.3, "startup_s": 50.0,
                                             "source": {"cuda_graph_gib": "log", "weights_gib": "api"}}}
    new = {"settings": settings, "engine": {"cuda_graph_gib": None, "weights_gib": 3.3, "startup_s": None,
                                            "source": {"cuda_graph_gib": "withheld", "weights_gib": "api"}}}
    merged = with_kept_figures(new, kept)["engine"]
    assert merged["cuda_graph_gib"] is None and merged["source"]["cuda_graph_gib"] == "withheld"
    assert merged["startup_s"] == 50.0  # what the cut run lacks and did not withhold is still kept


def test_a_run_on_a_shared_device_records_it_and_withholds_the_graph_figure(tmp_path, tiny_model, repo_root, monkeypatch):
    from tests.test_fake_e2e import make_config, only_run, run

    from evalsuite.engine.fake import FakeEngine

    start = FakeEngine.start

    def start_with_graphs(self):  # as vLLM logs its graphs' free-memory delta
        self._started = start(self).model_copy(update={"cuda_graph_gib": 20.8, "source": {"cuda_graph_gib": "log"}})
        return self._started.model_copy()

    monkeypatch.setattr(FakeEngine, "start", start_with_graphs)
    monkeypatch.setattr("evalsuite.memory.sharing.NvmlPeak", _shared_by(3))
    cfg = make_config(tmp_path, tiny_model, repo_root / "evalsuite" / "tasks" / "defs" / "data" / "legalbench-cuad", tracking=False)
    code, out = run("run", str(cfg), "--no-progress", "--variant", "bf16")
    assert code == 0, out
    result = json.loads((only_run(tmp_path / "runs") / "bf16" / "result.json").read_text())
    assert result["engine"]["other_processes"] == 3
    assert result["engine"]["source"].get("required_gib") in (None, "withheld")
    assert result["engine"]["cuda_graph_gib"] is None and result["engine"]["source"]["cuda_graph_gib"] == "withheld"


def test_a_run_cut_on_a_shared_device_still_says_it_was_shared(tmp_path, tiny_model, repo_root, monkeypatch):
    """A lane's run killed at its deadline never reaches the end's record: the record written at the
    engine's start already counts the device's other processes."""
    from tests.test_fake_e2e import make_config, only_run, run

    from evalsuite.engine.fake import FakeEngine

    def cut(self, reqs, on_done=None):
        raise KeyboardInterrupt

    monkeypatch.setattr("evalsuite.memory.sharing.NvmlPeak", _shared_by(2))
    monkeypatch.setattr(FakeEngine, "generate", cut)
    cfg = make_config(tmp_path, tiny_model, repo_root / "evalsuite" / "tasks" / "defs" / "data" / "legalbench-cuad", tracking=False)
    code, out = run("run", str(cfg), "--no-progress", "--variant", "bf16")
    assert code == 130, out
    result = json.loads((only_run(tmp_path / "runs") / "bf16" / "result.json").read_text())
    assert result["status"] == "partial" and result["engine"]["other_processes"] == 2
