"""A packed run's latency pass on the variant's own engine, its neighbours paused (no second start).

Quiet is tested on real processes standing in for engines (what hold() stops is a process tree);
the whole path on the fake engine, where what counts is that each variant starts one engine and
its latency pass runs on it. The real CPU engine's figures against a restarted engine alone are
bench/latency_pause.py's.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import yaml
from typer.testing import CliRunner

from evalsuite.cli.main import app
from evalsuite.core.rundir import RunDir
from evalsuite.engine.registry import engine_kind
from evalsuite.run.quiet import Flight, Quiet, _Tracked, latency_pass
from evalsuite.run.config import load_config

cli = CliRunner()


class Stand:
    """An engine as Quiet sees one: a process tree to stop, and the time it was held."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        self.held_s = 0.0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stopped(self) -> bool:
        return psutil.Process(self.pid).status() == psutil.STATUS_STOPPED

    def end(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def stands():
    made = {n: Stand() for n in "abc"}
    yield made
    for s in made.values():
        s.end()


def test_a_pass_waits_for_starts_stops_the_neighbours_and_holds_new_starts(tmp_path, stands):
    quiet = Quiet(RunDir(tmp_path), engine_kind("offline"))
    for name in "ab":
        with quiet.starting(name, stands[name], None):
            pass
    starting = threading.Event()

    def slow_start():  # c is still starting when a's pass asks for the device
        with quiet.starting("c", stands["c"], None):
            starting.set()
            time.sleep(0.4)

    t = threading.Thread(target=slow_start)
    t.start()
    starting.wait()
    t0 = time.monotonic()
    with quiet.alone("a", None) as held:
        assert time.monotonic() - t0 >= 0.3  # it waited for c's start to end
        assert held.names == ["b", "c"] and stands["b"].stopped() and stands["c"].stopped()
        assert not stands["a"].stopped()
        entered = threading.Event()
        late = threading.Thread(target=lambda: quiet.starting("d", stands["a"], None).__enter__() or entered.set())
        late.start()
        time.sleep(0.2)
        assert not entered.is_set()  # no engine starts while a pass has the device
    late.join(5)
    t.join()
    assert entered.is_set() and not stands["b"].stopped() and not stands["c"].stopped()
    assert stands["b"].held_s >= 0.2  # its own timeouts do not count the pause
    rows = RunDir(tmp_path).load_phases()
    assert {(r["phase"], r.get("variant"), r.get("by")) for r in rows} == {
        ("quiet_wait", "a", None), ("paused", "b", "a"), ("paused", "c", "a")}


def test_engines_on_another_gpu_and_closed_ones_are_left_alone(tmp_path, stands):
    quiet = Quiet(RunDir(tmp_path), engine_kind("offline"))
    for name, gpu in (("a", "0"), ("b", "1"), ("c", "0")):
        with quiet.starting(name, stands[name], gpu):
            pass
    quiet.closing("c", "0")
    waited = threading.Event()

    def pass_of_a():
        with quiet.alone("a", "0") as held:
            waited.set()
            assert held.names == [] and not stands["b"].stopped() and not stands["c"].stopped()

    t = threading.Thread(target=pass_of_a)
    t.start()
    time.sleep(0.2)
    assert not waited.is_set()  # c's engine is still ending: its teardown works the device
    quiet.gone("c")
    t.join(5)
    assert waited.is_set()


def test_a_pause_says_what_each_neighbour_had_in_flight_and_the_cpu_is_found_idle(tmp_path, stands):
    """b is paused mid-batch (two requests sent, the longer 4,096 tokens): the pass records so. A
    stopped process spends no CPU time, which is how a CPU engine's device is found idle once its
    neighbours are stopped; a process that is not stopped is not still."""
    from evalsuite.core.types import Request
    from evalsuite.run import hostload

    quiet = Quiet(RunDir(tmp_path), engine_kind("offline"))
    flight = Flight()
    with quiet.starting("a", stands["a"], None):
        pass
    with quiet.starting("b", stands["b"], None, flight):
        pass
    flight.task = "needle"
    flight.sent([Request(prompt_token_ids=[1] * 4096), Request(prompt_token_ids=[1] * 100)])
    flight.sent([Request(prompt_token_ids=[1] * 8)])
    flight.answered()  # the first batch answered; the second still out
    flight.sent([Request(prompt_token_ids=[1] * 4096)])
    cfg = load_config(_config(tmp_path, tmp_path))
    cfg.engine.mode = "offline"
    with quiet.alone("a", None) as held:
        assert held.names == ["b"] and held.in_flight["b"].model_dump() == {
            "task": "needle", "requests": 2, "longest_prompt": 4096}
        found = hostload.verify_idle(cfg, "CPU: test", None, held.procs)
        assert found.idle == "cpu_time" and found.idle_ok is True
    spinning = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        assert not hostload.cpu_still([psutil.Process(spinning.pid)], window_s=0.2, timeout_s=0.5)
    finally:
        spinning.kill()
        spinning.wait()


def test_a_gpu_pass_waits_for_the_card_to_drain_and_records_what_nvml_read(tmp_path, monkeypatch):
    from evalsuite.run import hostload

    reads = iter([90.0, 40.0] + [0.0] * 30)
    monkeypatch.setattr(hostload, "utilization_reader", lambda device: (lambda: next(reads)) if device == "1" else None)
    monkeypatch.setattr("evalsuite.memory.cuda.time.sleep", lambda s: None)
    cfg = load_config(_config(tmp_path, tmp_path))
    cfg.engine.mode = "offline"
    found = hostload.verify_idle(cfg, "NVIDIA H100 80GB HBM3", "1", [])
    assert found.idle == "nvml" and found.idle_ok is True and set(found.utilization_pct) == {0.0}
    assert hostload.verify_idle(cfg, "NVIDIA H100 80GB HBM3", "0", []).idle is None  # NVML cannot read it


def test_the_tracked_engine_says_what_is_in_flight_while_a_stream_runs():
    from evalsuite.core.types import Completion, Request

    flight = Flight()
    seen = []

    class Engine:
        def pipelined(self, batches):
            for b in batches:
                seen.append(flight.now().requests)
                yield [Completion(text="") for _ in b]

    tracked = _Tracked(Engine(), flight)
    batches = [[Request(prompt_token_ids=[1] * n)] for n in (10, 20, 30)]
    assert [len(c) for c in tracked.pipelined(iter(batches))] == [1, 1, 1]
    assert seen == [1, 1, 1] and flight.now().requests == 0


def _config(tmp_path: Path, model: Path, timing: dict | None = None, **scheduler) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({
        "model": {"path": str(model)}, "engine": {"mode": "fake", "batch_size": 2},
        "defaults": {"max_model_len": 2048, "engine_args": {"kv_cache_memory_bytes": 2**26}},
        "variants": {"a": {}, "b": {}, "c": {}}, "baseline": "a",
        "tasks": [{"type": "needle", "lengths": [256], "depths": [0.0, 0.5, 1.0]}],
        "latency": {"prompt_tokens": [32], "output_tokens": 4, "repeats": 2},
        "scheduler": scheduler, "timing": timing or {}, "tracking": {"enabled": False}}))
    return path


def test_which_way_the_latency_pass_is_timed(tmp_path, tiny_model):
    def mode(cpu: bool, mode: str = "offline", **timing) -> str:
        cfg = load_config(_config(tmp_path, tiny_model, timing))
        cfg.engine.mode = mode
        return latency_pass(cfg, cpu)

    assert mode(cpu=False) == "pause"
    assert mode(cpu=True) == "restart"  # a packed CPU engine computes on a share of the cores
    assert mode(cpu=False, mode="server") == "restart"
    assert mode(cpu=True, quiet="pause") == "pause"
    assert mode(cpu=False, quiet="restart") == "restart"
    assert mode(cpu=False, alone=False) == "beside"


def test_the_timing_keys_under_scheduler_are_one_line_naming_their_place(tmp_path, tiny_model):
    for key, value, said in (("latency_pass", "pause", "timing: {quiet: ...}"), ("latency_alone", False,
                                                                                "timing: {alone: ...}")):
        res = cli.invoke(app, ["validate", str(_config(tmp_path, tiny_model, **{key: value}))])
        assert res.exit_code == 2 and f"scheduler: {key}:" in res.output and said in res.output, res.output


def test_a_packed_run_times_latency_on_the_engine_it_started(tmp_path, tiny_model):
    out = tmp_path / "runs"
    res = cli.invoke(app, ["run", str(_config(tmp_path, tiny_model, {"quiet": "pause"}, parallel=2)),
                           "--no-progress", "-o", str(out)])
    assert res.exit_code == 0, res.output
    (root,) = [p for p in out.iterdir() if (p / "run.json").exists()]
    rows = RunDir(root).load_phases()
    starts = sorted(r["variant"] for r in rows if r["phase"] == "engine_start")
    assert starts == ["a", "b", "c"]  # one engine a variant: no second start for latency
    latency = [r for r in rows if r["phase"] == "task" and r["task"] == "latency"]
    assert len(latency) == 3 and sum(r["phase"] == "quiet_wait" for r in rows) == 3
    for r in latency:  # from the device's being had to the pass's end, nobody pauses the variant timing
        (waited,) = [w for w in rows if w["phase"] == "quiet_wait" and w["variant"] == r["variant"]]
        others = [p for p in rows if p["phase"] == "paused" and p["variant"] == r["variant"]]
        assert all(p["end"] <= waited["end"] or p["start"] >= r["end"] for p in others)
    record = RunDir(root).load_run()
    assert record.scheduling.latency_pass == "pause" and record.scheduling.most_at_once == 2
    # the order started and why: the fake engine on a CPU gives no figures to tell them apart, so as given
    assert [w.variant for w in record.scheduling.order] == ["a", "b", "c"]
    assert record.scheduling.order_rule.startswith("INT4 builds first")
    for v in record.variants:
        assert v.status == "ok" and v.placement.latency == "pause" and v.metric("latency/ttft_ms_p50")
        # the fake engine has no device to check; the record still says whom it paused and how it warmed up
        assert v.timing.engine == "fake" and v.timing.idle is None and (v.timing.warmup, v.timing.repeats) == (2, 2)
        assert v.timing.neighbours == ("paused" if v.timing.paused else "none") and \
            sorted(v.timing.paused) == v.placement.paused_for_latency
    assert "paused" in res.output and "2 engines ran at once (at most 2 allowed)" in res.output
