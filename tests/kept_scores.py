"""Per-item scores kept as lab/scores.py keeps a GPU run's, cut to a partial variant."""

from __future__ import annotations

import gzip
import json
from pathlib import Path


def kept_partial(scores_py, run: Path, dest: Path, variant: str, mmlu_items: int, status: str = "partial") -> Path:
    """Export `run`'s scores to `dest`, then leave `variant` as a session that ended after its first
    `mmlu_items` MMLU items (status `partial`; `ok` for a session whose grid was that small),
    everything else kept whole."""
    scores_py.export([run], dest)
    mmlu = dest / variant / "mmlu.scores.jsonl.gz"
    with gzip.open(mmlu, "rt") as fh:
        rows = fh.read().splitlines()
    with gzip.open(mmlu, "wt") as fh:
        fh.write("\n".join(rows[:mmlu_items]) + "\n")
    result = json.loads((dest / variant / "result.json").read_text())
    (dest / variant / "result.json").write_text(json.dumps({**result, "status": status}))
    return dest
