"""`evalsuite prepare`: what a config's tasks read, fetched and built into the cache before any
engine starts (the model imported, its tokenizer, datasets, haystacks, RULER's items), so that GPU
time goes to the engine and a later run needs no network for them.

Model weights from the Hugging Face hub are not fetched here: vLLM downloads them at the engine's
start, into the hub's own cache.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from evalsuite.run.config import RunConfig, check_local_model
from evalsuite.run.needs import check_needs
from evalsuite.run.items import preflight
from evalsuite.run.session import task_context


@dataclass
class Prepared:
    model: str
    items: dict[str, int]  # task name -> items a run of this config scores
    seconds: float


def prepare_config(cfg: RunConfig, config_path: Path, cache_dir: Path) -> Prepared:
    """Build every task's items of `cfg` (already narrowed by --tasks and --limit) into `cache_dir`."""
    t0 = time.monotonic()
    check_local_model(cfg, config_path)
    check_needs(cfg, config_path, engine=False)  # no engine here: only the hub, for the tokenizer and items
    model_dir, ctx = task_context(cfg, config_path, cache_dir)
    _, samples = preflight(cfg, ctx)
    return Prepared(model_dir, {name: len(s) for name, s in samples.items()}, time.monotonic() - t0)
