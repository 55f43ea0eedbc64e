"""make_engine: the Engine implementation a run's `engine:` section names, not yet started."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from evalsuite.core.env import platform_name
from evalsuite.core.hosts import RAY_LOOPBACK_ENV
from evalsuite.core.types import EngineMode
from evalsuite.engine import Engine, tensor_parallel_workaround
from evalsuite.models.compile_cache import engine_env


class Launch(Protocol):
    """How a run starts its engines: a run config's `engine:` section has these."""

    mode: EngineMode
    base_url: str | None  # server: attach to this running server instead of starting one
    startup_timeout_s: float
    env: Mapping[str, str]  # the engine's environment variables, over the compile-cache placement


def make_engine(launch: Launch, model: str, kwargs: dict[str, Any], log_path: Path, cache_dir: Path,
                ray_loopback: bool = True) -> Engine:
    """An engine, not yet started, that loads `model` with vLLM arguments `kwargs`; it logs to
    `log_path` and keeps vLLM's compile caches under `cache_dir`. `ray_loopback`: a Ray cluster vLLM
    starts for `distributed_executor_backend: ray` listens on 127.0.0.1 only (false: on every interface,
    or inside a Ray task, whose cluster is already there)."""
    if launch.mode == "fake":
        from evalsuite.engine.fake import FakeEngine

        return FakeEngine(model, kwargs, log_path)
    kwargs = tensor_parallel_workaround(kwargs, {**os.environ, **launch.env})
    env = engine_env(kwargs, dict(launch.env), cache_dir, platform_name())
    if ray_loopback and kwargs.get("distributed_executor_backend") == "ray":
        env.setdefault(*RAY_LOOPBACK_ENV)
    if launch.mode == "server":
        from evalsuite.engine.server import ServerEngine

        return ServerEngine(model, kwargs, log_path, env=env, base_url=launch.base_url,
                            startup_timeout_s=launch.startup_timeout_s)
    from evalsuite.engine.offline import OfflineEngine

    return OfflineEngine(model, kwargs, log_path, env=env, startup_timeout_s=launch.startup_timeout_s)
