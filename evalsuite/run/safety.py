"""The config options that can run code or open the machine to others, and the switches that allow them.

Engine arguments pass to vLLM as they are, so a few of them are refused unless the config sets
`engine.unsafe_engine_args: true`: those that make a server listen beyond this machine or carry
credentials, and those that name Python code to import (a `*_cls`, a plugin, a logits processor).
`engine.env` is refused the variables that make every engine process run other code
(PYTHONPATH, LD_PRELOAD and their kind) under the same switch. An `lm_eval` task's `include_path`
folder may hold `!function` Python code that lm-eval runs: it needs `allow_code: true` on the task.
A deny-list rather than an allow-list: vLLM has hundreds of engine arguments and adds more each
release; the suite's own settings need none of the refused ones.
"""

from __future__ import annotations

import re
from typing import Any

UNSAFE_SWITCH = "engine.unsafe_engine_args: true"

# Engine arguments that open the server to the network, carry secrets or name code to import.
DENIED_ARGS = frozenset({
    "host", "port", "uds", "api_key", "allowed_origins", "allow_credentials", "allowed_methods", "allowed_headers",
    "root_path", "ssl_keyfile", "ssl_certfile", "ssl_ca_certs", "enable_ssl_refresh", "trust_remote_code",
    "logits_processors", "middleware", "kv_transfer_config", "kv_events_config", "ec_transfer_config",
    "allowed_local_media_path", "model_loader_extra_config", "hf_token", "token",
})
DENIED_ARG_PATTERN = re.compile(r".*(_cls|_class|plugins?|_plugin_.*|api_key.*|secret.*|_module(_path)?)")
# Values of an otherwise harmless argument that are names vLLM knows, not import paths.
KNOWN_VALUES = {"distributed_executor_backend": frozenset({"mp", "uni", "ray", "external_launcher"})}

# Variables that change which code the engine's Python processes load, or the loader itself.
DENIED_ENV_PREFIXES = ("LD_", "DYLD_", "PYTHON")
ALLOWED_PYTHON_ENV = frozenset({"PYTHONHASHSEED", "PYTHONUNBUFFERED", "PYTHONFAULTHANDLER", "PYTHONDONTWRITEBYTECODE"})
DENIED_ENV = frozenset({"PATH", "BASH_ENV", "ENV", "VLLM_API_KEY", "VLLM_PLUGINS", "HF_TOKEN"})


def denied_arg(key: str, value: Any) -> bool:
    norm = key.strip().lower().replace("-", "_")
    if norm in KNOWN_VALUES:
        return value not in KNOWN_VALUES[norm]
    return norm in DENIED_ARGS or DENIED_ARG_PATTERN.fullmatch(norm) is not None


def denied_env(name: str) -> bool:
    upper = name.upper()
    if upper in ALLOWED_PYTHON_ENV:
        return False
    return upper in DENIED_ENV or upper.startswith(DENIED_ENV_PREFIXES)


def engine_problems(variants: dict[str, Any], env: dict[str, str], unsafe: bool) -> list[str]:
    """One message per refused engine argument or variable, unless the config allows them."""
    if unsafe:
        return []
    problems = []
    for name, variant in variants.items():
        for key, value in variant.engine_args.items():
            if denied_arg(key, value):
                problems.append(f"variants.{name}.engine_args.{key}: can open the engine to the network, carry a "
                                f"secret or run code; refused unless {UNSAFE_SWITCH}")
    for key in env:
        if denied_env(key):
            problems.append(f"engine.env.{key}: changes which code every engine process runs; refused unless "
                            f"{UNSAFE_SWITCH}")
    return problems


def code_notes(cfg: Any) -> list[str]:
    """What in a valid config will run code beyond evalsuite's and vLLM's own, said by `validate`."""
    notes = []
    if cfg.model.trust_remote_code:
        notes.append("model.trust_remote_code: the model folder's own Python code will run")
    for task in cfg.tasks:
        if getattr(task, "include_path", None):
            notes.append(f"tasks.{task.name}.include_path: lm-eval will run the Python code (`!function`) "
                         f"of the task files in {task.include_path} (allow_code: true)")
    if cfg.engine.unsafe_engine_args:
        notes.append(f"{UNSAFE_SWITCH}: engine arguments and variables pass unchecked "
                     "(they may run code or open the server)")
    return notes
