"""Build (and keep in the cache) the RULER items of run configs before their runs start, in one process
that uses every core, so that runs started side by side find them instead of building them each.
`evalsuite prepare CONFIG` does the same for every task; this keeps to the RULER tasks (the configs'
other tasks are fetched by the runs themselves).

    python lab/ruler_items.py CONFIG...
"""

from __future__ import annotations

import sys
from pathlib import Path

from evalsuite.data.assets import default_cache_dir
from evalsuite.run.config import load_config
from evalsuite.run.prepare import prepare_config


def build(config: Path) -> None:
    cfg = load_config(config)
    cfg.tasks = [t for t in cfg.tasks if t.type == "ruler"]
    done = prepare_config(cfg, config, default_cache_dir())
    print(f"{config}: {sum(done.items.values())} RULER items in {done.seconds:.0f} s", flush=True)


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        build(Path(arg))
