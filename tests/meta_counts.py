"""Exact parameter counts from a model's config.json, by building the model on the meta device: the
oracle tests/test_planner.py checks the planner's closed-form counts against.

accelerate's init_empty_weights + transformers' AutoModelForCausalLM.from_config allocate nothing,
so even a 70B model is counted in about a second.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

ROUTER = re.compile(r"\.(gate|router)\.weight$")  # MoE routers: Linear, but never quantized


@functools.lru_cache(maxsize=32)
def _counts(config_json: str) -> tuple[int, int, int, int] | None:
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    raw = json.loads(config_json)
    try:
        config = AutoConfig.for_model(**raw)
        with init_empty_weights():
            model = AutoModelForCausalLM.from_config(config)
        model.tie_weights()  # from_config leaves meta weights untied; loading would tie them
    except (ValueError, KeyError, TypeError, ImportError, AttributeError):
        return None  # an architecture this transformers does not build
    embed = lm_head = linear = other = 0
    for name, p in model.named_parameters():  # tied weights are listed once
        n = p.numel()
        if "embed_tokens" in name:
            embed += n
        elif name.startswith("lm_head"):
            lm_head += n
        elif ".layers." in name and p.ndim >= 2 and not ROUTER.search(name):
            linear += n
        else:
            other += n
    return embed, lm_head, linear, other


def exact_param_counts(config: dict[str, Any]) -> tuple[int, int, int, int] | None:
    """(embed, lm_head, linear, other) as the planner splits them; None if transformers cannot build it."""
    return _counts(json.dumps(config, sort_keys=True))
