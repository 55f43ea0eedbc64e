"""Offline mode: vllm.LLM in a child process per variant.

A child per variant means memory is returned between variants and a crash or OOM kills
only that variant's process; the parent records the reason and the sweep carries on.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
from multiprocessing import connection
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import psutil

from evalsuite.core.types import Completion, EngineStats, Request
from evalsuite.engine import EngineFailed


def log_tail(path: Path, lines: int = 400) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


_ERROR_LINE = re.compile(r"\b([A-Za-z]*(?:Error|Exception)): (.+)$")
_GENERIC = ("See root cause above", "Engine core initialization failed", "please check the stack trace",
            "See stack trace (above) for the root cause", "EngineCore encountered a fatal error")


def failure_reason(log_path: Path, fallback: str) -> str:
    """The root cause of an engine failure: the first specific exception line in its log.

    vLLM re-raises a worker's error in the engine core and again in the client, each time
    wrapped in a more generic message, so the first specific line is the most telling.
    """
    lines = [ln for ln in log_tail(log_path, 2000).splitlines() if " WARNING " not in ln and " INFO " not in ln]
    found = [(i, m) for i, m in ((i, _ERROR_LINE.search(line)) for i, line in enumerate(lines)) if m]
    specific = [(i, m) for i, m in found if not any(g in m.group(2) for g in _GENERIC)]
    pick = (specific or found)
    if not pick:
        return fallback
    i, m = pick[0]
    message = m.group(2).strip()
    if _PYDANTIC_HEADER.match(message):
        message = f"{message}: {_pydantic_details(lines[i + 1:])}"
    return f"{m.group(1)}: {message}"[:400]


# pydantic (vLLM's configs: a max_model_len over the model's, a bad engine argument) puts only a
# count on the exception's line; what was wrong is on the lines below it.
_PYDANTIC_HEADER = re.compile(r"\d+ validation errors? for \S+$")
_PYDANTIC_TAIL = re.compile(r"\s*\[type=[^\]]*\]?\s*$")
# what vLLM's engine core puts before each line it logs: "(EngineCore pid=7) ERROR 12-01 19:54:07 [core.py:1332] "
_LOG_PREFIX = re.compile(r"^(\(\w+ pid=\d+\)\s*)?([A-Z]+ \d\d-\d\d [\d:.]+ \[[^\]]*\] ?)?")


def _pydantic_details(after: list[str], most: int = 4) -> str:
    """The field and message lines under a pydantic header, on one line, without the input echo."""
    out = []
    for line in after[:most]:
        text = _PYDANTIC_TAIL.sub("", _LOG_PREFIX.sub("", line)).strip()
        if not text or text.startswith("For further information"):
            break
        out.append(text)
    return "; ".join(out)


def fill_from_log(stats: EngineStats, log_path: Path) -> None:
    """Fields the API does not expose on this platform, from vLLM's own log lines (marked "log")."""
    from evalsuite.memory.logparse import parse_engine_log

    for key, value in parse_engine_log(log_tail(log_path, 5000)).items():
        if key in EngineStats.model_fields and getattr(stats, key) is None:
            setattr(stats, key, value)
            stats.source[key] = "log"


def exit_with_parent(parent_pid: int, interval_s: float = 1.0) -> None:
    """Kill this process's group once its parent is gone (a killed driver or Ray worker), so an
    orphaned engine never keeps holding GPU memory. Needs the caller to lead its own group."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(interval_s)
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, daemon=True, name="exit-with-parent").start()


class _ParentLink:
    """The child's end of the pipe. Losing it means the parent died: end the whole group at once,
    before the child's own exit path (vLLM's worker ends with os._exit) orphans the engine core."""

    def __init__(self, conn):
        self._conn = conn

    def recv(self):
        try:
            return self._conn.recv()
        except EOFError:
            os.killpg(0, signal.SIGKILL)

    def send(self, obj) -> None:
        try:
            self._conn.send(obj)
        except OSError:  # BrokenPipeError, ConnectionResetError
            os.killpg(0, signal.SIGKILL)


def _engine_child(parent_pid: int, entry: Callable, conn, *args: Any) -> None:
    """The engine child leads its own session: vLLM's engine core and its tensor-parallel workers
    join the group, and close() ends them all with one killpg even after the child itself died."""
    os.setsid()
    exit_with_parent(parent_pid)  # a parent killed during a long batch, while nobody reads the pipe
    entry(_ParentLink(conn), *args)


def _group_alive(pgid: int) -> bool:
    """Any member of the group that is not a zombie (zombies hold no memory, only a pid)."""
    for p in psutil.process_iter(["status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return False


def exited(proc: subprocess.Popen) -> bool:
    """Whether a child process has ended, without waiting for it."""
    try:
        proc.wait(timeout=0)
    except subprocess.TimeoutExpired:
        return False
    return True


def kill_process_group(pgid: int, grace_s: float = 15.0) -> None:
    """SIGTERM the whole group, SIGKILL whatever is left after grace_s."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and _group_alive(pgid):
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class OfflineEngine:
    def __init__(self, model: str, kwargs: dict[str, Any], log_path: Path, env: dict[str, str] | None = None,
                 startup_timeout_s: float = 900, entry: Callable | None = None):
        self.model, self.kwargs, self.log_path = model, kwargs, Path(log_path)
        self.env = env or {}
        self.startup_timeout_s = startup_timeout_s
        self._entry = entry  # the child's main; vllm_offline.worker_main unless a test swaps in its own
        self._proc: mp.Process | None = None
        self._conn = None
        self._stats = EngineStats()
        self._closing = threading.Lock()
        self._unread = 0  # answers to batches sent ahead that a caller stopped waiting for
        self.held_s = 0.0  # time its process tree was stopped (a neighbour's latency pass): not the engine's delay

    def start(self) -> EngineStats:
        from evalsuite.engine.vllm_offline import worker_main

        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        args = (child, self.model, self.kwargs, str(self.log_path), self.env)
        self._proc = ctx.Process(target=_engine_child, args=(os.getpid(), self._entry or worker_main, *args))
        self._proc.start()
        child.close()
        self._conn = parent
        kind, payload = self._recv(self.startup_timeout_s, "engine start")
        if kind != "ready":
            self.close()
            raise EngineFailed(failure_reason(self.log_path, payload))
        self._stats = EngineStats.model_validate(payload)
        fill_from_log(self._stats, self.log_path)
        return self._stats

    def _recv(self, timeout: float, what: str):
        deadline = time.monotonic() + timeout - self.held_s
        while not connection.wait([self._conn], 1.0):  # a message to read, or 1 s passed
            proc = self._proc  # close() from another thread (a packed run's interrupt) may clear it
            if proc is None or not proc.is_alive():
                raise EngineFailed(failure_reason(self.log_path, self._died(what)))
            if time.monotonic() > deadline + self.held_s:
                raise EngineFailed(f"{what} timed out after {timeout:.0f} s")
        try:
            return self._conn.recv()
        except (EOFError, OSError):  # OSError: a child killed mid-send resets the pipe (ConnectionResetError)
            raise EngineFailed(failure_reason(self.log_path, self._died(what))) from None

    def _died(self, what: str, grace_s: float = 5.0) -> str:
        """The engine's death with its exit code: the pipe's end is seen a moment before the process
        is reaped, and -9 (the OOM killer's SIGKILL) is what gets a packed variant its retry alone."""
        proc = self._proc
        if proc is None:
            return f"engine process died during {what} (exit code closed)"
        proc.join(grace_s)
        return f"engine process died during {what} (exit code {proc.exitcode})"

    def _call(self, msg: tuple, what: str, timeout: float = 24 * 3600):
        self._send(msg)
        return self._answer(what, timeout)

    def _send(self, msg: tuple) -> None:
        if self._proc is None:
            raise EngineFailed("engine not started")
        while self._unread:  # the pipe answers in order: an abandoned stream's answers come first
            self._recv(24 * 3600, "generation")
            self._unread -= 1
        try:
            self._conn.send(msg)
        except OSError:  # BrokenPipeError, ConnectionResetError: the child is gone
            raise EngineFailed(failure_reason(self.log_path, self._died("a request"))) from None

    def _answer(self, what: str, timeout: float = 24 * 3600):
        kind, payload = self._recv(timeout, what)
        if kind == "error":  # vLLM's client error only says "see above": then the log has the cause
            generic = any(g in payload for g in _GENERIC)
            raise EngineFailed(failure_reason(self.log_path, payload) if generic else payload)
        return payload

    def generate(self, requests: list[Request], on_done: Callable[[int], None] | None = None) -> list[Completion]:
        # The models themselves cross the pipe: the child runs this same evalsuite, and a dump on one
        # side with a validation on the other took 1.6 times as long, with the engine idle
        # (bench/request_transfer.py).
        completions = self._call(("generate", requests), "generation")
        if on_done:
            on_done(len(requests))
        return completions

    def pipelined(self, batches: Iterable[list[Request]], ahead: int = 1) -> Iterator[list[Completion]]:
        """Each batch's completions in order, with `ahead` more batches already sent, so that the
        engine starts the next one as soon as it ends the current one: the requests' crossing and the
        caller's work on the answers (scoring, records) happen while the engine works."""
        todo = iter(batches)
        sent = 0

        def send_next() -> int:
            reqs = next(todo, None)
            if reqs is None:
                return 0
            self._send(("generate", reqs))
            return 1

        try:
            for _ in range(ahead + 1):
                sent += send_next()
            while sent:
                completions = self._answer("generation")
                sent -= 1
                sent += send_next()
                yield completions
        finally:
            self._unread += sent

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None else None

    def stats(self) -> EngineStats:
        vals = self._call(("metrics",), "metrics", timeout=120)
        s = self._stats.model_copy(deep=True)
        if "vllm:num_preemptions" in vals:
            s.num_preemptions = int(vals["vllm:num_preemptions"])
        hits, queries = vals.get("vllm:prefix_cache_hits"), vals.get("vllm:prefix_cache_queries")
        if hits is not None and queries:
            s.prefix_cache_hit_rate = hits / queries
        return with_kv_peak(s, vals.get("kv_usage_peak"))

    def close(self, wait: bool = True) -> None:
        with self._closing:  # the owner's thread and a packed run's interrupt may both close it
            self._close(wait)

    def _close(self, wait: bool) -> None:
        if self._proc is None:
            return
        tree = _process_tree(self._proc.pid)  # before the child exits and orphans its children
        if wait:
            try:
                if self._proc.is_alive():
                    self._conn.send(("close",))
                    connection.wait([self._conn], 30)
            except (OSError, EOFError, BrokenPipeError):
                pass
            self._proc.join(20)
        kill_process_group(self._proc.pid, grace_s=15 if wait else 0)  # also orphans whose parent died first
        _terminate(tree, grace_s=15 if wait else 0)  # descendants that left the group (their own session)
        self._proc.join(5)
        self._proc = None


def with_kv_peak(s: EngineStats, usage: float | None) -> EngineStats:
    """KV actually used at the workload's peak, from the engine's usage fraction."""
    if usage is None or not s.kv_cache_blocks:
        return s
    s.kv_used_peak_blocks = round(usage * s.kv_cache_blocks)
    s.source["kv_used_peak_blocks"] = "api"
    if s.kv_cache_gib:
        s.kv_used_peak_gib = usage * s.kv_cache_gib
        s.source["kv_used_peak_gib"] = "api"
    return s


def _process_tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return root.children(recursive=True) + [root]
    except psutil.NoSuchProcess:
        return []


def hold(pid: int | None) -> list[psutil.Process]:
    """Stop an engine's whole process tree (SIGSTOP, the root first so that it never sees a child
    stop): its kernels in flight end and no more are launched until release(); its memory stays."""
    procs = [] if pid is None else list(reversed(_process_tree(pid)))
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.suspend()
    deadline = time.monotonic() + 2.0  # the signal lands asynchronously: the device is quiet once they have stopped
    while time.monotonic() < deadline and any(_running(p) for p in procs):
        time.sleep(0.01)
    return procs


def _running(p: psutil.Process) -> bool:
    try:
        return p.status() not in (psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return False


def release(procs: list[psutil.Process]) -> None:
    """SIGCONT to what hold() stopped, the children first."""
    for p in reversed(procs):
        with contextlib.suppress(psutil.NoSuchProcess):
            p.resume()


def _terminate(procs: list[psutil.Process], grace_s: float = 15) -> None:
    """vLLM's engine core is a grandchild: end it with its parent so memory is really freed."""
    for p in procs:
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
