"""Copies run folders into docs/results for keeping, random prompts' token ids and completions replaced by counts.

The workload and latency prompts are random token ids (tens of MB per run) that the run's config
rebuilds from its seed, and what a model writes after them is noise (its length stays); every other
file (run.json, config.yaml, env.json, result.json, engine.log and the per-request timings in
samples/) is copied as it is, so `evalsuite check` reads the kept folders.
Usage: python lab/keep_runs.py DEST RUN_DIR...
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path


def slim_row(line: str) -> str:
    row = json.loads(line)
    request = (row.get("sample") or {}).get("request") or {}
    ids = request.pop("prompt_token_ids", None)
    if ids is not None:
        request["prompt_token_count"] = len(ids)
    completion = row.get("completion") or {}
    # a random prompt's completion is noise (MBs for a decode-heavy workload); its length stays. Keyed
    # on the count too, so that a kept folder kept again comes out the same
    if "prompt_token_count" in request and isinstance(completion.get("text"), str):
        completion["text_chars"] = len(completion.pop("text"))
    return json.dumps(row)


def keep(run: Path, dest: Path) -> Path:
    out = dest / run.name
    shutil.copytree(run, out, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.jsonl"))
    for f in run.rglob("samples/*.jsonl"):
        target = out / f.relative_to(run)
        target.parent.mkdir(parents=True, exist_ok=True)
        with f.open() as src:
            target.write_text("".join(slim_row(line) + "\n" for line in src if line.strip()))
    return out


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: keep_runs.py DEST RUN_DIR...")
    for r in sys.argv[2:]:
        print(keep(Path(r), Path(sys.argv[1])))
