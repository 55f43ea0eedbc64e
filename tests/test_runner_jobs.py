"""The runner's jobs, each in its own module: tasks declare what the runner asks of them (no probing),
the engine factory takes plain arguments, --resume decides what is left, and the GPU-sharing
accounting stands alone (pure logic; stand-in engines and NVML)."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

from evalsuite.core.rundir import RunDir
from evalsuite.core.types import Completion, EngineStats, Request, Sample, Score, VariantResult
from evalsuite.engine import one_at_a_time
from evalsuite.engine.factory import make_engine
from evalsuite.memory import sharing
from evalsuite.memory.sharing import DeviceWatch
from evalsuite.run.config import EngineConfig, LatencyConfig, RunConfig
from evalsuite.run.progress import Progress
from evalsuite.run.resume import to_run
from evalsuite.run.items import preflight
from evalsuite.run.runner import Runner
from evalsuite.tasks import Task, TaskContext
from evalsuite.tasks.latency import LatencyTask

RUNNER = Path(__file__).resolve().parents[1] / "evalsuite" / "run" / "runner.py"
ANSWERING = RUNNER.with_name("answering.py")


class Counting(Task):
    """A task of `n` items that each score 1; its declared capabilities are set per test."""

    def __init__(self, name: str, n: int = 6, **declared):
        self.name, self.primary_metric, self.n = name, f"{name}/acc", n
        self.__dict__.update(declared)

    def samples(self) -> list[Sample]:
        return [Sample(id=f"{self.name}{i}", task=self.name, request=Request(prompt=str(i)), target="")
                for i in range(self.n)]

    def score(self, sample: Sample, completion: Completion) -> Score:
        return Score(sample_id=sample.id, task=self.name, value=1.0, pred=completion.text, target="")

    def metrics(self, scores):
        return []


class Engine:
    def __init__(self):
        self.calls: list[list[Request]] = []

    def generate(self, requests, on_done=None):
        self.calls.append(requests)
        return [Completion(text="x") for _ in requests]

    def pipelined(self, batches):
        return one_at_a_time(self, batches)


def test_the_runner_asks_tasks_nothing_by_probing():
    """Every capability is declared on Task; the runner reads it rather than testing a task for it."""
    trees = [ast.parse(path.read_text()) for path in (RUNNER, ANSWERING)]
    probes = [n.lineno for tree in trees for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
              and n.func.id in ("hasattr", "getattr", "isinstance") and isinstance(n.args[0], ast.Name)
              and n.args[0].id in ("t", "task")]
    assert probes == []


class _Tok:
    all_special_ids = [0]

    def __len__(self) -> int:
        return 100


def test_every_task_class_is_a_task():
    """Whatever scores samples in evalsuite.tasks declares its capabilities through Task."""
    import evalsuite.tasks as package

    scorers = []
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"evalsuite.tasks.{info.name}")
        scorers += [c for c in vars(module).values() if isinstance(c, type) and c.__module__ == module.__name__
                    and callable(getattr(c, "score", None)) and callable(getattr(c, "metrics", None))]
    assert len(scorers) >= 6 and [c.__name__ for c in scorers if not issubclass(c, Task)] == []


def test_what_tasks_declare(tmp_path):
    latency = LatencyConfig(prompt_tokens=[8], repeats=2, warmup=0).build(TaskContext(base_dir=tmp_path, cache_dir=tmp_path,
                                                                            tokenizer=_Tok()))
    assert isinstance(latency, LatencyTask) and len(latency.samples()) == 2
    assert (latency.batch_size, latency.limited, latency.runs_simulated, latency.harness) == (1, False, False, False)
    assert latency.warmup_request().max_tokens == 4 and latency.warmup_requests() == [latency.warmup_request()]
    warmed = LatencyConfig(prompt_tokens=[8, 16], output_tokens=6, repeats=2, warmup=3).build(
        TaskContext(base_dir=tmp_path, cache_dir=tmp_path, tokenizer=_Tok()))
    warm = warmed.warmup_requests()  # each timed length and output, before the timed ones, prompts of their own
    assert [len(r.prompt_token_ids) for r in warm] == [8, 8, 8, 16, 16, 16] and {r.max_tokens for r in warm} == {6}
    assert not {tuple(r.prompt_token_ids) for r in warm} & {tuple(s.request.prompt_token_ids) for s in warmed.samples()}
    plain = Counting("plain")
    assert (plain.batch_size, plain.limited, plain.runs_simulated, plain.harness, plain.chance) == \
        (None, True, True, False, None)
    assert plain.warmup_request() is None and plain.calibration_samples() == []


def test_limit_thins_only_the_tasks_that_allow_it(tmp_path, monkeypatch):
    cfg = RunConfig.model_validate({"model": {"path": "m"}, "variants": {"bf16": {}}, "limit": 2})
    tasks = [Counting("acc"), Counting("timing", limited=False)]
    monkeypatch.setattr("evalsuite.run.items.build_tasks", lambda cfg, ctx: tasks)
    _, samples = preflight(cfg, TaskContext(base_dir=tmp_path, cache_dir=tmp_path))
    assert (len(samples["acc"]), len(samples["timing"])) == (2, 6)


def test_declared_batch_size_and_warmup_shape_the_engine_calls(tmp_path):
    cfg = RunConfig.model_validate({"model": {"path": "m"}, "variants": {"bf16": {}}, "engine": {"batch_size": 4}})
    runner = Runner(cfg, RunDir(tmp_path / "run"), "m", TaskContext(base_dir=tmp_path, cache_dir=tmp_path), Progress(False))
    engine = Engine()
    task = Counting("own")
    runner.run_task(engine, "bf16", task, task.samples())
    assert [len(c) for c in engine.calls] == [4, 2]  # the run's batch size, no warm-up
    engine = Engine()
    task = Counting("timed", batch_size=1)
    task.warmup_request = lambda: Request(prompt="warm", max_tokens=1)
    runner.run_task(engine, "bf16", task, task.samples())
    assert engine.calls[0][0].prompt == "warm" and [len(c) for c in engine.calls[1:]] == [1] * 6


def test_resume_keeps_what_scored_every_item_and_skips_what_a_variant_never_runs(tmp_path):
    cfg = RunConfig.model_validate({"model": {"path": "m"}, "variants": {
        "done": {}, "cut": {}, "sim": {"quantize": "rtn", "simulate": True}, "new": {}}})
    run_dir = RunDir(tmp_path / "run")
    acc, timing = Counting("acc"), Counting("timing", runs_simulated=False)
    samples = {t.name: t.samples() for t in (acc, timing)}
    for name, n in (("done", 6), ("cut", 3), ("sim", 6)):
        run_dir.write_result(VariantResult(variant=name, status="ok"))
        rows = [{"sample": s.model_dump(), "completion": Completion(text="x").model_dump(),
                 "score": acc.score(s, Completion(text="x")).model_dump()} for s in samples["acc"][:n]]
        run_dir.append_samples(name, "acc", rows)
        if name != "sim":  # a simulated variant has no timing records: it never runs that task
            run_dir.append_samples(name, "timing", [{**r, "sample": {**r["sample"], "id": f"timing{i}"}}
                                                    for i, r in enumerate(rows)])
    todo, kept = to_run(cfg, run_dir, [acc, timing], samples, resume=True)
    assert list(todo) == ["cut", "new"] and [r.variant for r in kept] == ["done", "sim"]
    todo, kept = to_run(cfg, run_dir, [acc, timing], samples, resume=False)
    assert list(todo) == list(cfg.variants) and kept == []


def test_the_factory_takes_plain_arguments(tmp_path, monkeypatch):
    """A fake engine gets the arguments as given; a vLLM engine gets its compile-cache environment
    under the run's cache folder, the config's own variables over it, and is not started."""
    fake = make_engine(EngineConfig(mode="fake"), "/m", {"seed": 1}, tmp_path / "log", tmp_path)
    assert (type(fake).__name__, fake.model_dir, fake.kwargs) == ("FakeEngine", "/m", {"seed": 1})
    monkeypatch.setattr("evalsuite.engine.factory.platform_name", lambda: "gpu")
    offline = make_engine(EngineConfig(env={"X": "1"}), "/m", {}, tmp_path / "log", tmp_path)
    assert type(offline).__name__ == "OfflineEngine" and offline._proc is None
    assert offline.env == {"X": "1", "VLLM_CACHE_ROOT": str(tmp_path / "vllm")}
    server = make_engine(EngineConfig(mode="server", base_url="http://h:1", startup_timeout_s=5), "/m", {},
                         tmp_path / "log", tmp_path)
    assert (type(server).__name__, server.base_url, server.startup_timeout_s) == ("ServerEngine", "http://h:1", 5)


class _Nvml:
    """What DeviceWatch reads of NvmlPeak: other processes seen, and the tree's peak."""

    def __init__(self, others: list[int | None]):
        self.others = others

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def other_processes(self):
        return self.others.pop(0)

    def peak_gib(self):
        return 7.5

    def peak_is_own(self):
        return True


def test_a_shared_device_withholds_the_start_deltas_and_counts_its_tenants(monkeypatch):
    monkeypatch.setattr(sharing, "NvmlPeak", lambda root=None: _Nvml([2, 3]))
    monkeypatch.setattr(sharing, "device_total_gib", lambda: 80.0)
    with DeviceWatch(0.5) as device:
        started = device.started(EngineStats(cuda_graph_gib=20.0, weights_gib=3.0, source={"cuda_graph_gib": "log"}))
        assert started.cuda_graph_gib is None and started.other_processes == 2
    ended = device.ended(EngineStats(cuda_graph_gib=21.0, non_torch_gib=0.3, weights_gib=3.0))
    assert ended.cuda_graph_gib is None and ended.non_torch_gib is None and ended.weights_gib == 3.0
    assert (ended.other_processes, ended.nvml_peak_gib, ended.reserved_gib) == (3, 7.5, 40.0)
    assert ended.source["nvml_peak_gib"] == "process"  # the engine's own bytes: its packed footprint


def test_a_device_to_itself_keeps_every_figure(monkeypatch):
    monkeypatch.setattr(sharing, "NvmlPeak", lambda root=None: _Nvml([0, 0]))
    monkeypatch.setattr(sharing, "device_total_gib", lambda: None)
    with DeviceWatch(None) as device:
        device.started(EngineStats(cuda_graph_gib=0.4))
    ended = device.ended(EngineStats(cuda_graph_gib=0.4, reserved_gib=None))
    assert (ended.cuda_graph_gib, ended.other_processes, ended.reserved_gib) == (0.4, 0, None)


def test_the_timing_pass_records_the_hosts_load(tmp_path):
    """The host's load beside the timings: as the pass started (already on disk while it runs, for a run
    killed in it) and as it ended, with the CPU count the load is read against; untimed tasks add none."""
    import os

    cfg = RunConfig.model_validate({"model": {"path": "m"}, "variants": {"bf16": {}}})
    run_dir = RunDir(tmp_path / "run")
    runner = Runner(cfg, run_dir, "m", TaskContext(base_dir=tmp_path, cache_dir=tmp_path), Progress(False))
    on_disk = []

    class Timed(Counting):
        def score(self, sample: Sample, completion: Completion) -> Score:
            on_disk.append(run_dir.load_result("bf16").host_load)
            return super().score(sample, completion)

    acc, timed = Counting("acc"), Timed("timed", timed_alone=True, batch_size=1)
    result = VariantResult(variant="bf16", status="running")
    runner._run_tasks(Engine(), "bf16", [acc], {"acc": acc.samples()}, result)
    assert result.host_load is None
    runner._run_tasks(Engine(), "bf16", [acc, timed], {"acc": acc.samples(), "timed": timed.samples()}, result)
    load = result.host_load
    assert load.cpus == os.cpu_count() and len(load.start) == 3 and len(load.end) == 3
    assert on_disk[0].start == load.start and on_disk[0].end is None


def test_a_resumed_timing_pass_keeps_the_load_its_recorded_items_saw(tmp_path, monkeypatch):
    """Resumed with every timed item recorded, the pass times nothing: the load those items were timed
    under stands, not the load now, and so does the condition. Resumed with items left, the pass is
    timed again in full, under one load and one condition: none of the earlier items is pooled in."""
    from evalsuite.core import env as envmod

    cfg = RunConfig.model_validate({"model": {"path": "m"}, "variants": {"bf16": {}}})
    run_dir = RunDir(tmp_path / "run")
    runner = Runner(cfg, run_dir, "m", TaskContext(base_dir=tmp_path, cache_dir=tmp_path), Progress(False))
    timed = Counting("timed", timed_alone=True, batch_size=1)
    busy, quiet = [90.0, 9.0, 9.0], [0.1, 0.1, 0.1]
    monkeypatch.setattr(envmod, "load_average", lambda: busy)
    result = runner._opened("bf16", cfg.variants["bf16"])
    runner._run_tasks(Engine(), "bf16", [timed], {"timed": timed.samples()}, result)
    run_dir.write_result(result)
    assert result.host_load.loaded
    monkeypatch.setattr(envmod, "load_average", lambda: quiet)
    again = runner._opened("bf16", cfg.variants["bf16"])
    runner._run_tasks(Engine(), "bf16", [timed], {"timed": timed.samples()}, again)
    assert again.host_load == result.host_load  # all recorded: nothing timed now
    assert again.timing == result.timing and result.timing.repeats is None and result.timing.engine == "offline"
    more = Counting("timed", n=9, timed_alone=True, batch_size=1)
    third = runner._opened("bf16", cfg.variants["bf16"])
    runner._run_tasks(Engine(), "bf16", [more], {"timed": more.samples()}, third)
    assert third.host_load.start == quiet  # six earlier items dropped, nine timed now
    assert len(run_dir.load_samples("bf16", "timed")) == 9


def test_a_cpu_engines_threads_are_the_cores_it_is_bound_to(tmp_path, monkeypatch):
    """All the host's cores unless VLLM_CPU_OMP_THREADS_BIND names some; none on a GPU or for the
    fake engine, whose host side is a thread or two."""
    import os

    from evalsuite.core.env import bound_cores
    from evalsuite.run.hostload import engine_threads

    assert bound_cores("0-3") == 4 and bound_cores("0,2,5") == 3 and bound_cores("0-3|4-7") == 8

    def threads(engine: dict, device: str) -> int:
        cfg = RunConfig.model_validate({"model": {"path": "m"}, "variants": {"bf16": {}}, "engine": engine})
        return engine_threads(cfg, device, os.cpu_count() or 1)

    assert threads({}, "CPU: Xeon") == (os.cpu_count() or 1)
    assert threads({"env": {"VLLM_CPU_OMP_THREADS_BIND": "2-3"}}, "CPU: Xeon") == 2
    assert threads({}, "NVIDIA H200") == 0 and threads({"mode": "fake"}, "CPU: Xeon") == 0
