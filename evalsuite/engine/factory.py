"""make_engine: the Engine implementation a run's `engine:` section names (evalsuite.engine.registry),
not yet started."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from evalsuite.core.env import platform_name
from evalsuite.core.hosts import RAY_LOOPBACK_ENV
from evalsuite.engine import Engine, tensor_parallel_workaround
from evalsuite.engine.registry import Launch, engine_kind
from evalsuite.models.compile_cache import engine_env


def make_engine(launch: Launch, model: str, kwargs: dict[str, Any], log_path: Path, cache_dir: Path,
                ray_loopback: bool = True) -> Engine:
    """An engine, not yet started, that loads `model` with vLLM arguments `kwargs`; it logs to
    `log_path` and keeps vLLM's compile caches under `cache_dir`. `ray_loopback`: a Ray cluster vLLM
    starts for `distributed_executor_backend: ray` listens on 127.0.0.1 only (false: on every interface,
    or inside a Ray task, whose cluster is already there)."""
    kind = engine_kind(launch.mode)
    if not kind.vllm:
        return kind.build(launch, model, kwargs, log_path, {})
    kwargs = tensor_parallel_workaround(kwargs, {**os.environ, **launch.env})
    env = engine_env(kwargs, dict(launch.env), cache_dir, platform_name())
    if ray_loopback and kwargs.get("distributed_executor_backend") == "ray":
        env.setdefault(*RAY_LOOPBACK_ENV)
    return kind.build(launch, model, kwargs, log_path, env)
