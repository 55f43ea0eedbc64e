"""`run --parallel`: which variants share a device (evalsuite.run.pools, evalsuite.run.packed), and a packed run's answers
equal to a sequential run's on the real vLLM CPU engine."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from evalsuite.core import env as envmod
from evalsuite.core.errors import ConfigError
from evalsuite.core.rundir import RunDir
from evalsuite.core.types import Request, RunRecord, Sample, VariantResult
from evalsuite.run import packed, pools
from evalsuite.run.config import RunConfig, load_config
from evalsuite.memory.throughput import Shape
from evalsuite.run.pools import Packer, core_slices, engine_limit, out_of_memory, pool_tokens, predict_need
from evalsuite.run.runner import Runner
from tests.samples_file import rows as _rows

REPO = Path(__file__).resolve().parent.parent


def test_variants_start_while_they_fit_in_the_budget_first_fit_in_order():
    p = Packer({"a": 6.0, "b": 6.0, "c": 3.0, "d": 1.0}, budget_gib=10.0, limit=8)
    assert p.start() == ["a", "c", "d"]  # b does not fit beside a; c and d do
    assert p.start() == []
    p.done("a")
    assert p.start() == ["b"]


def test_at_most_limit_engines_at_once():
    p = Packer({n: 1.0 for n in "abcd"}, budget_gib=100.0, limit=2)
    assert p.start() == ["a", "b"]
    p.done("b")
    assert p.start() == ["c"]


def test_unknown_or_too_large_footprint_runs_alone():
    p = Packer({"a": 1.0, "hub": None, "big": 50.0, "b": 1.0}, budget_gib=10.0, limit=8)
    assert p.alone == {"hub", "big"}
    assert p.start() == ["a", "b"]
    p.done("a"), p.done("b")
    assert p.start() == ["hub"]  # nothing beside it
    assert p.start() == []
    p.done("hub")
    assert p.start() == ["big"]


def test_on_several_gpus_each_variant_goes_where_most_room_is_left():
    p = Packer({"a": 6.0, "b": 6.0, "c": 6.0, "d": 3.0}, budget_gib=[10.0, 10.0], limit=8)
    assert p.start() == ["a", "b", "d"] and p.device == {"a": 0, "b": 1, "d": 0}  # c fits on neither now
    assert p.beside("a") == ["d"] and p.beside("b") == []  # neighbours are the same card's
    p.done("a")
    assert p.start() == ["c"] and p.device["c"] == 0  # 7 GiB left there, 4 on the other
    big = Packer({"x": 12.0, "y": 1.0}, budget_gib=[10.0, 10.0], limit=8)
    assert big.alone == {"x"}  # larger than any one card: alone on the host


def test_capacity_spreads_over_the_gpus_unless_the_config_pins_one(monkeypatch):
    from evalsuite.memory import cuda

    monkeypatch.setattr(cuda, "visible_gpus", lambda: [("0", 80.0, 79.0), ("1", 80.0, 40.0)])
    monkeypatch.setattr(cuda, "device_memory_gib", lambda index=0: (80.0, 79.0))
    assert pools.capacity(cpu=False, margin=0.1) == [("0", 80.0, 71.0), ("1", 80.0, 32.0)]
    assert pools.capacity(cpu=False, margin=0.1, pinned=True) == [(None, 80.0, 71.0)]
    monkeypatch.setattr(cuda, "visible_gpus", lambda: [("3", 80.0, 79.0)])
    assert pools.capacity(cpu=False, margin=0.1) == [(None, 80.0, 71.0)]  # one card: vLLM's own choice
    assert pools.gpu_env({"A": "1"}, "1") == {"A": "1", "CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def test_a_packed_run_on_two_gpus_puts_each_engine_on_its_card(tmp_path, tiny_model, monkeypatch):
    """The plan's side of two cards (pure: the cards' memory is given, no engine starts): each slot's
    environment names its card, its utilization is of that card, and its neighbours are that card's."""
    from evalsuite.core.rundir import RunDir
    from evalsuite.core.types import RunRecord
    from evalsuite.run.config import load_config

    monkeypatch.setattr(packed, "capacity", lambda cpu, margin, pinned=False: [("0", 80.0, 8.0), ("1", 80.0, 8.0)])
    cfg_path = tmp_path / "c.yaml"
    cfg_path.write_text(yaml.safe_dump({
        "model": {"path": str(tiny_model)}, "defaults": {"dtype": "bfloat16", "max_model_len": 2048},
        "variants": {"a": {}, "b": {}, "c": {}}, "tasks": [], "scheduler": {"parallel": 3},  # auto: by host cores
        "tracking": {"enabled": False}}))
    cfg = load_config(cfg_path)
    record = RunRecord(run_id="r", model="m", env={"device": "NVIDIA H100 80GB HBM3"})
    run = packed.PackedRun(cfg, RunDir(tmp_path / "r"), record, str(tiny_model), None, None)
    packer = run.plan(dict(cfg.variants), [], {})
    assert packer.start() == ["a", "b", "c"]  # the tiny model's engines fit three on the cards' 8 GiB each
    slots = {n: run._slot(n, packer) for n in "abc"}
    assert {n: s.env["CUDA_VISIBLE_DEVICES"] for n, s in slots.items()} == {"a": "0", "b": "1", "c": "0"}
    assert slots["a"].beside == ["c"] and slots["b"].beside == [] and slots["a"].gpu == "0"
    footprint = run.predicted["a"].footprint_gib
    assert slots["a"].overrides["gpu_memory_utilization"] == pools.utilization(footprint, 80.0)
    assert [g.gpu for g in record.scheduling.gpus] == ["0", "1"] and "scheduler" not in record.env.model_dump()
    from rich.console import Console

    from evalsuite.core.types import VariantResult
    from evalsuite.report.placement import placement_table

    record.variants = [VariantResult(variant=n, status="ok", placement={
        "parallel": 3, "gpu": s.gpu, "ran_with": s.beside, "predicted": run.predicted[n], "measured": {}})
        for n, s in slots.items()]
    console = Console(width=200, record=True)
    console.print(placement_table(record))
    text = console.export_text()
    assert "8.0 of 80.0 GiB on GPU 0, 8.0 of 80.0 GiB on GPU 1" in " ".join(text.split())  # the title may wrap
    assert any(line.split()[:2] == ["variant", "GPU"] for line in text.replace("┃", " ").replace("│", " ").splitlines()
               if line.split())


def test_the_margin_is_what_capacity_keeps_free(monkeypatch):
    class VM:
        total, available = 20 * 2**30, 16 * 2**30

    monkeypatch.setattr(pools.psutil, "virtual_memory", lambda: VM)
    assert pools.capacity(cpu=True, margin=0.1) == [(None, 20.0, 14.0)]


def test_an_engine_out_of_memory_beside_others_is_retried_alone_once():
    p = Packer({"a": 4.0, "b": 4.0}, budget_gib=10.0, limit=8)
    assert p.start() == ["a", "b"]
    p.done("b")
    assert p.retry_alone("b")
    assert p.start() == []  # waits for a to end
    p.done("a")
    assert p.start() == ["b"]
    assert not p.retry_alone("b")


def test_out_of_memory_reasons():
    def failed(reason: str) -> VariantResult:
        return VariantResult(variant="v", status="failed", reason=reason)

    assert out_of_memory(failed("ValueError: Free memory on device (3.1/139.8 GiB) on startup is less than desired "
                                "GPU memory utilization"))
    assert out_of_memory(failed("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert out_of_memory(failed("engine process died (signal 9)"))
    assert not out_of_memory(failed("ValueError: unknown quantization method"))
    assert not out_of_memory(VariantResult(variant="v", status="ok", reason="out of memory"))


def test_out_of_memory_of_an_engine_cut_after_its_first_tasks():
    """An engine that died mid-variant leaves it `partial`: its error, not the task names around
    it in the reason, says whether memory ran out ("-9" is a memory word, for the OOM killer's signal)."""
    from evalsuite.engine import EngineFailed
    from evalsuite.run.runner import EngineCut

    def cut(error: str) -> VariantResult:
        reason = EngineCut(EngineFailed(error), "in needle-96k", ["mmlu", "cuad"], []).reason
        return VariantResult(variant="v", status="partial", reason=reason, engine_error=error)

    assert cut("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB").reason == (
        "engine failed in needle-96k: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB; "
        "mmlu, cuad complete")
    assert out_of_memory(cut("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert out_of_memory(cut("engine process died (signal 9); see engine.log"))
    assert not out_of_memory(cut("RuntimeError: CUDA error: an illegal memory access was encountered"))
    interrupted = "interrupted; scored from the samples it recorded: mmlu 8 (out of memory)"
    assert not out_of_memory(VariantResult(variant="v", status="partial", reason=interrupted))


def test_cpu_cores_are_split_between_engines():
    assert core_slices([0, 1], 2) == ["0", "1"]
    assert core_slices([0, 1, 2, 3], 2) == ["0,1", "2,3"]
    assert core_slices([0], 3) == ["0"]
    assert engine_limit("auto", cpu=True, cores=2) == 2
    assert engine_limit(4, cpu=True, cores=2) == 2
    assert engine_limit(4, cpu=False, cores=2) == 4
    assert engine_limit("auto", cpu=False, cores=16) == 8  # two busy processes an engine
    assert engine_limit("auto", cpu=False, cores=1) == 1


def test_the_kv_pool_holds_the_longest_request_times_the_batch():
    task = type("T", (), {"name": "t", "batch_size": None})()
    samples = {"t": [Sample(id=str(n), task="t", request=Request(prompt_token_ids=[1] * n, max_tokens=4), target="")
                     for n in (10, 100)]}
    assert pool_tokens([task], samples, batch_size=8, batch_tokens=10_000) == 104 * 8
    assert pool_tokens([task], samples, batch_size=8, batch_tokens=200) == 200 + 8 * 4  # the batch's token cap


def tokens(n: int) -> list:
    """One band of tasks' requests whose batch needs n KV tokens (a CPU without a curve keeps that need)."""
    return [("t", Shape(n, 0), 1, n)]


def test_the_footprint_adds_the_planners_parts(tiny_model):
    from evalsuite.run.config import Variant

    v = Variant(max_model_len=2048, dtype="bfloat16")
    p = predict_need(str(tiny_model), v, "CPU x86_64", 24.0, tokens(10))
    parts = ("weights_gib", "activation_gib", "cuda_graph_gib", "non_torch_gib", "kv_cache_gib")
    assert p.footprint_gib == pytest.approx(sum(getattr(p, k) for k in parts), abs=1e-3)
    pinned = predict_need(str(tiny_model), v.model_copy(update={"engine_args": {"kv_cache_memory_bytes": 2**30}}),
                          "CPU x86_64", 24.0, tokens(10))
    assert pinned.kv_cache_memory_bytes == 2**30
    # at least one request at max_model_len (vLLM refuses to start otherwise), more for a larger batch
    assert p.kv_cache_memory_bytes == predict_need(str(tiny_model), v, "CPU", 24.0, tokens(2048)).kv_cache_memory_bytes
    assert predict_need(str(tiny_model), v, "CPU", 24.0, tokens(8192)).kv_cache_memory_bytes == 4 * p.kv_cache_memory_bytes
    assert predict_need("/nonexistent", v.model_copy(update={"model": "org/hub-only"}), "CPU", 24.0, tokens(10)) is None


def test_quantized_checkpoints_build_one_at_a_time(monkeypatch):
    state = {"now": 0, "most": 0}
    lock = threading.Lock()

    def build(self, *args):
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
        time.sleep(0.05)  # long enough for the other thread to try
        with lock:
            state["now"] -= 1
        return "built"

    monkeypatch.setattr(Runner, "_quantized", build)
    runner = object.__new__(packed._PackedRunner)
    threads = [threading.Thread(target=runner._quantized, args=("v", None, None)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert state["most"] == 1


def _fake_config(tmp_path: Path, model: Path, **scheduler) -> RunConfig:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({
        "model": {"path": str(model)}, "engine": {"mode": "fake"},
        "defaults": {"max_model_len": 2048, "engine_args": {"kv_cache_memory_bytes": 2**26}},
        "variants": {"a": {}, "b": {}}, "scheduler": scheduler, "tracking": {"enabled": False}}))
    return load_config(path)


def test_a_variant_out_of_memory_beside_another_reruns_alone_and_says_so(tmp_path, tiny_model, monkeypatch):
    cfg = _fake_config(tmp_path, tiny_model, parallel=2)
    run_dir = RunDir(tmp_path / "run")
    record = RunRecord(run_id="r", model="m", env={"device": "CPU x86_64"})
    run = packed.PackedRun(cfg, run_dir, record, str(tiny_model), None, None)
    calls = []

    def run_slot(slot, tasks, samples):
        calls.append((slot.name, tuple(slot.beside)))
        if slot.name == "b" and slot.beside:
            return VariantResult(variant="b", status="failed", reason="ValueError: Available memory on node 0 "
                                 "(0.10/23.5 GiB) on kv cache allocation is less than requested")
        time.sleep(0.2)  # a still runs when b fails
        return VariantResult(variant=slot.name, status="ok")

    monkeypatch.setattr(run, "_run_slot", run_slot)
    results = run.run(dict(cfg.variants), [], {})
    assert sorted(calls[:2]) == [("a", ("b",)), ("b", ("a",))] and calls[2:] == [("b", ())]
    assert results["b"].status == "ok" and results["b"].placement.alone is True
    assert results["a"].placement.ran_with == ["b"]
    assert results["a"].placement.predicted.footprint_gib > 0
    assert results["a"].placement.cpu_cores is not None


def test_bad_parallel_in_a_config_is_one_line(tmp_path, tiny_model):
    with pytest.raises(ConfigError) as e:
        _fake_config(tmp_path, tiny_model, parallel="lots")
    assert "scheduler.parallel" in str(e.value) and "'lots'" in str(e.value) and "auto" in str(e.value)
    assert "\n" not in str(e.value)
    assert _fake_config(tmp_path, tiny_model, parallel="auto").scheduler.parallel == "auto"
    assert _fake_config(tmp_path, tiny_model, parallel="3").scheduler.parallel == 3


def test_bad_parallel_flag_exits_2_naming_the_flag(tmp_path, tiny_model):
    _fake_config(tmp_path, tiny_model)
    res = subprocess.run([sys.executable, "-m", "evalsuite", "run", str(tmp_path / "c.yaml"), "--parallel", "0"],
                         capture_output=True, text=True, timeout=300, env=_env())
    assert res.returncode == 2
    assert res.stderr.strip() == ("evalsuite: error: --parallel: '0' is not allowed "
                                  "(allowed: auto or a whole number >= 1)")


def _answers(run: Path, variant: str) -> dict[str, str]:
    out = {}
    for f in sorted((run / variant / "samples").glob("*.jsonl")):
        for line in f.read_text().splitlines():
            row = json.loads(line)
            out[f"{f.stem}/{row['sample']['id']}"] = row["completion"]["text"]
    return out


def _real_sweep(tmp_path: Path, model: Path, batch_size: int, variants: dict, tasks: list, **extra) -> Path:
    """A config for the tiny model on the real vLLM CPU engine, each engine with a 64 MiB KV pool."""
    cfg = tmp_path / "sweep.yaml"
    cfg.write_text(yaml.safe_dump({
        "model": {"path": str(model)},
        "defaults": {"dtype": "bfloat16", "max_model_len": 2048, "enforce_eager": True,
                     "engine_args": {"kv_cache_memory_bytes": 64 * 2**20}},
        "engine": {"batch_size": batch_size, "env": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}},
        "variants": variants, "tasks": tasks, "tracking": {"enabled": False}, **extra}))
    return cfg


@pytest.mark.engine
def test_a_packed_run_answers_as_a_sequential_run(tmp_path, tiny_model):
    """Two variants on the real vLLM CPU engine, one after another and two at once: the same answer
    to every item, the latency pass alone afterwards, and the plan beside the measured figures."""
    cfg = _real_sweep(tmp_path, tiny_model, 4, {"bf16": {}, "kv_fp8": {"kv_cache_dtype": "fp8"}},
                      [{"type": "mmlu", "subjects": ["abstract_algebra", "anatomy"], "limit_per_subject": 6,
                        "num_fewshot": 2},
                       {"type": "needle", "lengths": [512, 1024], "depths": [0.0, 1.0]}],
                      latency={"prompt_tokens": [64], "output_tokens": 8, "repeats": 1})
    runs = {}
    for label, extra in (("sequential", []), ("packed", ["--parallel", "2"])):
        out = tmp_path / label
        res = subprocess.run([sys.executable, "-m", "evalsuite", "run", str(cfg), "--no-progress", "-o", str(out),
                              *extra], capture_output=True, text=True, timeout=900, env=_env())
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
        (runs[label],) = [p for p in out.iterdir() if (p / "run.json").exists()]
        # the summary shows the plan against the engines only where it packed
        assert ("packing (--parallel 2): 2 engines ran at once (at most 2 allowed)" in res.stdout) == (label == "packed")
    assert "0.062 / 0.062 (+0%)" in res.stdout  # each engine's 64 MiB KV pool, predicted and measured
    for variant in ("bf16", "kv_fp8"):
        seq, packed = _answers(runs["sequential"], variant), _answers(runs["packed"], variant)
        assert len(seq) == 12 + 4 + 1 and seq == packed
        result = json.loads((runs["packed"] / variant / "result.json").read_text())
        place = result["placement"]
        assert result["status"] == "ok" and place["ran_with"] == [{"bf16": "kv_fp8", "kv_fp8": "bf16"}[variant]]
        assert place["engine_alone"] is True and place["predicted"]["kv_cache_memory_bytes"] == 64 * 2**20
        assert len(result["host_load"]["end"]) == 3  # the alone pass's, beside its latency figures
        assert place["measured"]["kv_cache_gib"] == pytest.approx(place["predicted"]["kv_cache_gib"], rel=0.02)
        names = {m["name"] for m in result["metrics"]}
        assert {"mmlu/acc", "needle/acc", "latency/ttft_ms_p50"} <= names
    sched = json.loads((runs["packed"] / "run.json").read_text())["scheduling"]
    assert sched["parallel"] == 2 and sched["budget_gib"] > 0


@pytest.mark.engine
def test_ctrl_c_ends_a_packed_runs_engines_at_once_and_resume_finishes(tmp_path, tiny_model):
    """Ctrl-C reaches only the main thread: the variants' threads must not finish their tasks first.
    Both engines end, both variants are `partial` with what they recorded, and --resume completes them."""
    import psutil

    # far more items than the seconds an interrupt may take: a run that waited for them would finish
    cfg = _real_sweep(tmp_path, tiny_model, 1, {"a": {}, "b": {}},
                      [{"type": "mmlu", "subjects": ["abstract_algebra", "anatomy", "astronomy"],
                        "limit_per_subject": 100, "num_fewshot": 5}], output_dir=str(tmp_path / "runs"))
    run_ = subprocess.Popen([sys.executable, "-m", "evalsuite", "run", str(cfg), "--no-progress", "--parallel", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=_env())
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and run_.poll() is None:
        runs = [p for p in (tmp_path / "runs").glob("*") if (p / "run.json").exists()]
        if runs and all(_rows(runs[0], v) for v in ("a", "b")):
            break
        time.sleep(0.05)
    assert run_.poll() is None, run_.stderr.read()[-3000:]
    engines = psutil.Process(run_.pid).children(recursive=True)
    run_.send_signal(signal.SIGINT)
    assert run_.wait(timeout=120) == 130, run_.stderr.read()[-3000:]
    _, alive = psutil.wait_procs(engines, timeout=30)
    assert not alive, f"engines left running: {[p.pid for p in alive]}"
    run = runs[0]
    n = 100 + 100 + 100
    record = {v["variant"]: v for v in json.loads((run / "run.json").read_text())["variants"]}
    for v in ("a", "b"):
        assert record[v]["status"] == "partial", record[v]
        assert 0 < len(_rows(run, v)) < n, "the interrupt waited for the variant to finish"

    res = subprocess.run([sys.executable, "-m", "evalsuite", "run", str(cfg), "--no-progress", "--parallel", "2",
                          "--resume"], capture_output=True, text=True, timeout=900, env=_env())
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    record = {v["variant"]: v for v in json.loads((run / "run.json").read_text())["variants"]}
    for v in ("a", "b"):
        ids = [r["sample"]["id"] for r in _rows(run, v)]
        assert record[v]["status"] == "ok" and len(ids) == len(set(ids)) == n


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(REPO)}


def test_on_ray_the_plan_becomes_fractions_of_a_gpu(tmp_path, tiny_model):
    cfg = _fake_config(tmp_path, tiny_model, parallel=4)
    cfg.variants["hub"] = cfg.variants["a"].model_copy(update={"model": "org/hub-only"})
    shares = pools.ray_shares(cfg, dict(cfg.variants), [], {}, str(tiny_model), "NVIDIA H200", 139.8)
    assert shares["a"][0] == 0.25  # the tiny model needs far less: at least 1/N of the card under parallel: N
    assert shares["a"][1]["kv_cache_memory_bytes"] == 2**26 and 0 < shares["a"][1]["gpu_memory_utilization"] < 0.05
    assert shares["hub"] == (1.0, {})  # no prediction: a whole GPU
    cfg.scheduler.parallel = "auto"
    assert pools.ray_shares(cfg, {"a": cfg.variants["a"]}, [], {}, str(tiny_model), "NVIDIA H200", 139.8)["a"][0] < 0.05
    assert pools.ray_shares(cfg, {"a": cfg.variants["a"]}, [], {}, str(tiny_model), "", 0.0)["a"] == (1.0, {})


def test_a_failed_latency_pass_keeps_the_variants_accuracy(tmp_path, tiny_model, monkeypatch):
    """The latency pass runs after the packed tasks, on an engine of its own: its failure leaves the
    variant `partial` with every accuracy metric, the reason naming the pass and its error; gate
    judges the accuracy and names the missing latency with that reason; --resume measures it."""
    from typer.testing import CliRunner

    from evalsuite.cli.main import app
    from evalsuite.engine import EngineFailed
    from evalsuite.engine.fake import FakeEngine

    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({
        "model": {"path": str(tiny_model)}, "engine": {"mode": "fake", "batch_size": 4},
        "defaults": {"max_model_len": 2048}, "variants": {"bf16": {}, "fp8": {"kv_cache_dtype": "fp8"}},
        "tasks": [{"type": "mmlu", "subjects": ["anatomy"], "limit_per_subject": 12, "num_fewshot": 0}],
        "latency": {"prompt_tokens": [16], "output_tokens": 2, "repeats": 1},
        "tracking": {"enabled": False}, "output_dir": str(tmp_path / "runs")}))
    real = FakeEngine.generate

    def dies_timed(self, requests, on_done=None):
        if self.kwargs.get("kv_cache_dtype") == "fp8" and any(r.ignore_eos for r in requests):
            raise EngineFailed("engine died: CUDA error: an illegal memory access was encountered")
        return real(self, requests, on_done)

    monkeypatch.setattr(FakeEngine, "generate", dies_timed)
    # a quiet host: on a loaded one the baseline's latency is "not comparable", whatever the candidate's
    monkeypatch.setattr(envmod, "load_average", lambda: [0.0, 0.0, 0.0])
    cli = CliRunner()
    res = cli.invoke(app, ["run", str(cfg), "--no-progress", "--parallel", "2"])
    assert res.exit_code == 0, res.output
    (run,) = [p for p in (tmp_path / "runs").iterdir() if (p / "run.json").exists()]
    fp8 = RunRecord.model_validate_json((run / "run.json").read_text()).variant("fp8")
    assert fp8.status == "partial" and fp8.reason.startswith("latency pass failed, the other tasks complete: engine died")
    assert fp8.metric("mmlu/acc").n == 12 and fp8.metric("latency/ttft_ms_p50") is None
    assert fp8.engine.kv_cache_tokens and fp8.placement.engine_alone is False  # the packed engine's figures
    assert RunDir(run).load_result("fp8") == fp8
    assert "fp8 partial: latency pass failed" in res.output

    cli.invoke(app, ["gate", "--baseline", f"{run}:bf16", "--candidate", f"{run}:fp8",
                "--markdown", str(tmp_path / "gate.md")])
    report = (tmp_path / "gate.md").read_text()
    assert "variant status" not in report and "`mmlu/acc`" in report, report
    assert "missing in candidate (latency pass failed, the other tasks complete: engine died" in report

    monkeypatch.setattr(FakeEngine, "generate", real)
    res = cli.invoke(app, ["run", str(cfg), "--no-progress", "--parallel", "2", "--resume"])
    assert res.exit_code == 0, res.output
    fp8 = RunRecord.model_validate_json((run / "run.json").read_text()).variant("fp8")
    assert fp8.status == "ok" and fp8.metric("latency/ttft_ms_p50") is not None and fp8.metric("mmlu/acc").n == 12


def test_an_engine_out_of_memory_mid_variant_beside_another_is_retried_alone(tmp_path, tiny_model, repo_root,
                                                                            monkeypatch):
    """An engine that runs out of memory in a later task beside another leaves its variant `partial`,
    which the packed run retries alone as it does one that failed at start; the retry reads the
    finished task back, so its items are asked once."""
    from typer.testing import CliRunner

    from evalsuite.cli.main import app
    from evalsuite.engine import EngineFailed
    from evalsuite.engine.fake import FakeEngine

    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({
        "model": {"path": str(tiny_model)}, "engine": {"mode": "fake", "batch_size": 4},
        "defaults": {"max_model_len": 2048}, "variants": {"bf16": {}, "fp8": {"kv_cache_dtype": "fp8"}},
        "tasks": [{"type": "mmlu", "subjects": ["anatomy"], "limit_per_subject": 12, "num_fewshot": 0},
                  {"type": "legal", "data_dir": str(repo_root / "tasks/data/legalbench-cuad"),
                   "tasks": ["governing_law"], "limit_per_task": 10}],
        "tracking": {"enabled": False}, "output_dir": str(tmp_path / "runs")}))
    real = FakeEngine.generate

    def short_of_memory_beside(self, requests, on_done=None):
        legal = any("governs the contract" in (r.prompt or "") for r in requests)
        if self.kwargs.get("kv_cache_dtype") == "fp8" and "kv_cache_memory_bytes" in self.kwargs and legal:
            raise EngineFailed("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(self, requests, on_done)

    monkeypatch.setattr(FakeEngine, "generate", short_of_memory_beside)
    res = CliRunner().invoke(app, ["run", str(cfg), "--no-progress", "--parallel", "2"])
    assert res.exit_code == 0, res.output
    assert "fp8: engine ran out of memory beside others; retrying it alone" in res.output
    (run,) = [p for p in (tmp_path / "runs").iterdir() if (p / "run.json").exists()]
    fp8 = RunRecord.model_validate_json((run / "run.json").read_text()).variant("fp8")
    assert fp8.status == "ok" and fp8.placement.alone is True
    assert fp8.metric("mmlu/acc").n == 12 and fp8.metric("legal/acc").n == 10
    ids = [json.loads(x)["sample"]["id"] for x in (run / "fp8" / "samples" / "mmlu.jsonl").read_text().splitlines()]
    assert len(ids) == len(set(ids)) == 12


def test_the_measured_footprint_is_the_engines_own_nvml_peak_only():
    """Pure: a packed engine's footprint is NVML's peak of its own processes; a card-wide peak
    (NVML could not tell processes apart) holds the other engines' bytes too and is left out."""
    from evalsuite.core.types import EngineStats

    def result(source: str | None) -> VariantResult:
        stats = EngineStats(weights_gib=3.3179, kv_cache_gib=28.4375, nvml_peak_gib=35.7207,
                            source={"nvml_peak_gib": source} if source else {})
        return VariantResult(variant="bf16", engine=stats)

    assert pools.measured(result("process")).model_dump() == {"weights_gib": 3.3179, "kv_cache_gib": 28.4375,
                                                                "footprint_gib": 35.7207}
    assert "footprint_gib" not in pools.measured(result("device")).model_dump()
    assert "footprint_gib" not in pools.measured(result(None))


def test_the_summary_sets_the_plan_beside_the_engine():
    """Pure: a packed record's placement table and MLflow metrics; an unpacked record shows none."""
    from rich.console import Console

    from evalsuite.core.types import RunRecord, Scheduling, VariantResult
    from evalsuite.report.placement import engines_at_once, part_error, placement_metrics, placement_table

    packed = VariantResult(variant="fp8", status="ok", placement={
        "parallel": "auto", "ran_with": ["bf16"], "engine_alone": True,
        "predicted": {"weights_gib": 2.2, "kv_cache_gib": 1.0, "activation_gib": 0.5, "footprint_gib": 3.7},
        "measured": {"weights_gib": 2.0, "kv_cache_gib": 1.0, "footprint_gib": 4.0}})
    lone = VariantResult(variant="gguf", status="ok", placement={
        "parallel": "auto", "ran_with": [], "predicted": {"error": "no config.json"}, "measured": {}})
    record = RunRecord(run_id="r", model="m", variants=[packed, lone],
                       scheduling={"parallel": "auto", "limit": 8, "most_at_once": 2, "budget_gib": 120.0,
                                   "memory_gib": 139.8})
    console = Console(width=200, record=True)
    console.print(placement_table(record))
    text = " ".join(console.export_text().split())  # the caption wraps
    # the engines that ran together, not only the plan's allowance (which once read as the count)
    assert "packing (--parallel auto): 2 engines ran at once (at most 8 allowed), 120.0 of 139.8 GiB" in text
    assert engines_at_once(Scheduling(limit=8)) == "at most 8 engines allowed at once"  # a record before the count
    assert "2.200 / 2.000 (+10%)" in text and "0.500 / -" in text
    assert "3.700 / 4.000 (-7%)" in text  # the planner's footprint against the engine's NVML peak
    assert "alone" in text and "no prediction: no config.json" in text
    assert "measured alone, after the packed tasks: fp8; the others beside" in text
    assert part_error(2.2, 2.0) == pytest.approx(10.0) and part_error(1.0, None) is None
    zero = VariantResult(variant="sim", status="ok", placement={  # a simulated variant's CPU graphs: 0 and 0
        "parallel": "auto", "ran_with": [], "predicted": {"cuda_graph_gib": 0.0}, "measured": {"cuda_graph_gib": 0.0}})
    console.print(placement_table(RunRecord(run_id="r", model="m", variants=[zero])))
    assert "0.000 / 0.000" in console.export_text()
    assert placement_metrics(packed) == {"placement/weights_gib/predicted": 2.2, "placement/kv_cache_gib/predicted": 1.0,
                                         "placement/activation_gib/predicted": 0.5,
                                         "placement/footprint_gib/predicted": 3.7,
                                         "placement/weights_gib/measured": 2.0, "placement/kv_cache_gib/measured": 1.0,
                                         "placement/footprint_gib/measured": 4.0}
    assert placement_table(RunRecord(run_id="r", model="m", variants=[VariantResult(variant="a")])) is None
