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


def kept_run(kept: Path, variants: list[str], out: Path, tasks: tuple[str, ...] = ("mmlu", "legal", "needle"),
             baseline: str | None = "bf16") -> Path:
    """A run folder of `variants` from kept per-item scores (docs/results/*/scores), written through
    the product's own RunDir: each variant's recorded result (its metrics, status, engine figures)
    and its kept scores as samples, for the `tasks` given."""
    from evalsuite.core.records import RunDir
    from evalsuite.core.types import RunRecord, VariantResult

    rd = RunDir(out)
    rd.write_config({"baseline": baseline if baseline in variants else None})
    record = RunRecord(run_id=out.name, model="Qwen2.5-Coder-1.5B-Instruct")
    for name in variants:
        result = VariantResult.model_validate_json((kept / name / "result.json").read_text())
        for task in tasks:
            f = kept / name / f"{task}.scores.jsonl.gz"
            if f.is_file():
                with gzip.open(f, "rt") as fh:
                    rows = [json.loads(line) for line in fh]
                rd.append_samples(name, task, [{"sample": {"id": r["sample_id"]}, "completion": {}, "score": r}
                                               for r in rows])
        result.metrics = [m for m in result.metrics if m.task in tasks]
        rd.write_result(result)
        record.variants.append(result)
    rd.write_run(record)
    return rd.root
