"""What a variant's engine loads and the vLLM arguments it gets: the variant's own settings, with
the config's model settings (tokenizer, revision, remote code, hf_overrides) under them.

evalsuite.engine.make_engine starts the engine from these; it knows nothing of configs.
"""

from __future__ import annotations

from typing import Any

from evalsuite.core.settings import GPU_MEMORY_UTILIZATION
from evalsuite.models.checkpoint import engine_model
from evalsuite.run.config import RunConfig, Variant


def engine_args(cfg: RunConfig, variant: Variant, model_dir: str) -> tuple[str, dict[str, Any]]:
    """(what vLLM loads, its keyword arguments) for `variant` of `cfg`, `model_dir` being the
    config's model as resolved (a `.gguf` variant takes its tokenizer and config from there)."""
    kwargs = variant.vllm_kwargs()
    model, loading = engine_model(variant.model, model_dir)
    if cfg.model.trust_remote_code:
        kwargs["trust_remote_code"] = True
    if cfg.model.tokenizer:
        kwargs.setdefault("tokenizer", cfg.model.tokenizer)
    if cfg.model.revision and not variant.model:  # the tokenizer from the same commit unless it comes from elsewhere
        kwargs.setdefault("revision", cfg.model.revision)
        if not cfg.model.tokenizer:
            kwargs.setdefault("tokenizer_revision", cfg.model.revision)
    for key, value in loading.items():
        kwargs.setdefault(key, value)
    if cfg.model.hf_overrides:  # a variant's own hf_overrides win key by key
        kwargs["hf_overrides"] = {**cfg.model.hf_overrides, **kwargs.get("hf_overrides", {})}
    kwargs.setdefault("seed", cfg.seed)
    kwargs.setdefault("gpu_memory_utilization", GPU_MEMORY_UTILIZATION)
    return model, kwargs
