"""bench/engine_start.py prints vLLM's own account of each start: the lines it picks from an engine log."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import engine_start  # noqa: E402


def test_phases_keeps_vllms_timing_lines_in_order(tmp_path):
    log = tmp_path / "first.log"
    log.write_text("\n".join([
        "(EngineCore pid=1) INFO 12-01 18:01:03 [model_runner.py:305] Model loading took 0.89 GiB and 3.830891 seconds",
        "(EngineCore pid=1) INFO 12-01 18:01:05 [decorators.py:312] Directly load AOT compilation from path /c/x",
        "(EngineCore pid=1) INFO 12-01 18:01:20 [backends.py:394] Compiling a graph for compile range (1, 8192) takes 9.10 s",
        "(EngineCore pid=1) INFO 12-01 18:01:45 [gpu_worker.py:560] Available KV cache memory: 124.13 GiB",
        "(EngineCore pid=1) INFO 12-01 18:01:49 [gpu_model_runner.py:6845] Graph capturing finished in 4 secs, took 0.74 GiB",
        "(EngineCore pid=1) INFO 12-01 18:01:50 [core.py:348] init engine (profile, create kv cache, warmup model) took 41.2 s",
    ]))
    got = engine_start.phases(log)
    assert [g.split()[0] for g in got] == ["Model", "Directly", "Compiling", "Graph", "init"]
    assert got[-1] == "init engine (profile, create kv cache, warmup model) took 41.2 s"
    assert engine_start.phases(tmp_path / "missing.log") == []
