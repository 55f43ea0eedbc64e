"""Build (and keep in the cache) the RULER items of run configs before their runs start, in one process
that uses every core, so that runs started side by side find them instead of building them each.

    python lab/ruler_items.py CONFIG...
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from evalsuite.data.assets import default_cache_dir
from evalsuite.run.config import load_config
from evalsuite.run.runner import preflight
from evalsuite.run.session import load_tokenizer, min_max_model_len, resolve_model
from evalsuite.tasks import TaskContext


def build(config: Path) -> None:
    cfg = load_config(config)
    cfg.tasks = [t for t in cfg.tasks if t.type == "ruler"]
    cache = default_cache_dir()
    model_dir = resolve_model(cfg, config.resolve().parent, cache)
    ctx = TaskContext(base_dir=config.resolve().parent, cache_dir=cache, seed=cfg.seed,
                      tokenizer=load_tokenizer(cfg, model_dir), max_model_len=min_max_model_len(cfg))
    t0 = time.time()
    _, samples = preflight(cfg, ctx)
    print(f"{config}: {sum(map(len, samples.values()))} RULER items in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        build(Path(arg))
