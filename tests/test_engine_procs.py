"""An engine is ended with its whole process group: nothing it started outlives close(), even
when the engine child died first (a crashed tensor-parallel engine leaves its workers behind)
or when the process that owns the engine is killed.

The engine child here is a stand-in that starts a grandchild and reports ready: what is under
test is the operating system's process handling, not vLLM.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from evalsuite.core.types import EngineStats, Request, VariantResult
from evalsuite.engine import EngineFailed
from evalsuite.engine.offline import OfflineEngine, kill_process_group
from evalsuite.run.pools import out_of_memory


def grandchild_engine(conn, model, kwargs, log_path, env) -> None:
    """Stand-in for vllm_offline.worker_main: starts a 'worker' of its own, then serves nothing."""
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    Path(log_path).write_text(f"{worker.pid}\n")
    conn.send(("ready", EngineStats().model_dump()))
    while True:
        msg = conn.recv()
        if msg[0] == "close":
            conn.send(("ok", None))
            return


def _gone(pid: int, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


def _start(tmp_path: Path) -> tuple[OfflineEngine, int]:
    engine = OfflineEngine("unused", {}, tmp_path / "engine.log", entry=grandchild_engine, startup_timeout_s=60)
    engine.start()
    return engine, int((tmp_path / "engine.log").read_text())


def test_engine_child_leads_its_own_group(tmp_path):
    engine, worker = _start(tmp_path)
    try:
        child = engine._proc.pid
        assert os.getpgid(child) == child != os.getpgid(0)
        assert os.getpgid(worker) == child
    finally:
        engine.close()
    assert _gone(worker)


def test_close_kills_the_orphans_of_a_dead_engine(tmp_path):
    engine, worker = _start(tmp_path)
    os.kill(engine._proc.pid, signal.SIGKILL)  # the engine dies; its worker is orphaned, still in the group
    engine._proc.join(10)
    assert psutil.pid_exists(worker) and psutil.Process(worker).ppid() != engine._proc.pid
    engine.close()
    assert _gone(worker), "an orphaned engine worker survived close()"


def busy_engine(conn, model, kwargs, log_path, env) -> None:
    """Stand-in for an engine mid-batch: after its first request it never reads the pipe again."""
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    Path(log_path).write_text(f"{worker.pid}\n")
    conn.send(("ready", EngineStats().model_dump()))
    conn.recv()
    time.sleep(600)


def test_close_without_wait_ends_a_busy_engine_at_once(tmp_path):
    """An interrupted run ends its engine mid-batch: a polite close would wait ~65 s for an answer
    that never comes (long enough for a time limit's SIGKILL to lose the run's last records)."""
    engine = OfflineEngine("unused", {}, tmp_path / "engine.log", entry=busy_engine, startup_timeout_s=60)
    engine.start()
    worker = int((tmp_path / "engine.log").read_text())
    child = engine._proc.pid
    engine._conn.send(("generate", []))
    t0 = time.monotonic()
    engine.close(wait=False)
    assert time.monotonic() - t0 < 10
    assert _gone(child, 5) and _gone(worker, 5)


OWNER = """
import sys, time
from pathlib import Path
from evalsuite.engine.offline import OfflineEngine
from tests.test_engine_procs import grandchild_engine
log = Path(sys.argv[1])
engine = OfflineEngine("unused", {}, log, entry=grandchild_engine, startup_timeout_s=60)
engine.start()
print(engine._proc.pid, log.read_text().strip(), flush=True)
time.sleep(600)
"""


def test_engine_dies_with_its_owner(tmp_path, repo_root):
    """A killed driver (or Ray worker) takes its engine along: no close() ever runs there."""
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(tmp_path / "engine.log")], stdout=subprocess.PIPE,
                             text=True, cwd=repo_root, env={**os.environ, "PYTHONPATH": str(repo_root)})
    child, worker = map(int, owner.stdout.readline().split())
    owner.kill()
    owner.wait()
    assert _gone(child) and _gone(worker), "the engine outlived the process that owned it"


def test_kill_process_group_escalates_to_sigkill():
    stubborn = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
                                 "signal.SIG_IGN); print(1, flush=True); time.sleep(600)"],
                                stdout=subprocess.PIPE, start_new_session=True)
    stubborn.stdout.readline()  # SIGTERM is ignored from here on
    t0 = time.monotonic()
    kill_process_group(stubborn.pid, grace_s=1.0)
    assert stubborn.wait(10) == -signal.SIGKILL
    assert time.monotonic() - t0 < 8
    kill_process_group(stubborn.pid)  # an empty group is not an error


def test_tensor_parallel_workaround_only_where_multicast_is_off():
    from evalsuite.engine import tensor_parallel_workaround as fix

    tp2, off = {"tensor_parallel_size": 2}, {"NCCL_NVLS_ENABLE": "0"}
    assert fix(tp2, off)["compilation_config"] == {"pass_config": {"fuse_allreduce_rms": False}}
    assert fix(tp2, {}) == tp2 and fix({}, off) == {}  # multicast on, or one GPU: vLLM's defaults
    own = {**tp2, "compilation_config": {"mode": 3, "pass_config": {"fuse_allreduce_rms": True}}}
    assert fix(own, off) == own  # the variant's own choice wins
    mixed = fix({**tp2, "compilation_config": {"mode": 3}}, off)["compilation_config"]
    assert mixed == {"mode": 3, "pass_config": {"fuse_allreduce_rms": False}}



def test_an_engine_killed_mid_batch_is_recorded_with_its_signal(tmp_path):
    """The kernel's OOM killer ends an engine with SIGKILL; its reason must carry the exit code (-9),
    which is how a packed run tells an engine that ran out of memory beside others (and retries it alone)."""
    engine = OfflineEngine("unused", {}, tmp_path / "engine.log", entry=busy_engine, startup_timeout_s=60)
    engine.start()
    killer = threading.Timer(1.0, os.kill, (engine._proc.pid, signal.SIGKILL))
    killer.start()
    try:
        with pytest.raises(EngineFailed) as failed:
            engine.generate([Request(prompt="x", max_tokens=1)])
    finally:
        killer.join()
        engine.close(wait=False)
    assert "exit code -9" in str(failed.value)
    assert out_of_memory(VariantResult(variant="v", status="failed", reason=str(failed.value)))
