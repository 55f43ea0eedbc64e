"""The run directory: everything a run produced, readable without the code that wrote it.

runs/<run_id>/
  config.yaml            resolved config (includes and defaults applied)
  env.json               evalsuite commit, library versions, CPU/GPU names
  run.json               RunRecord (schema_version, variants with status, metrics, engine stats)
  <variant>/result.json  VariantResult, rewritten as the variant progresses
  <variant>/samples/<task>.jsonl   one line per sample: sample, completion, score
  <variant>/engine.log   vLLM's own output
"""

from __future__ import annotations

import json
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from evalsuite.core.errors import EvalsuiteError
from evalsuite.core.types import SCHEMA_VERSION, RunRecord, VariantResult

SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def new_run_id(stem: str) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{re.sub(r'[^A-Za-z0-9_.-]', '_', stem)}"


def _drop_partial_line(path: Path) -> None:
    """A kill mid-write leaves a line without its newline; cut it so the next append starts clean."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with path.open("rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return
        data = f.getvalue() if hasattr(f, "getvalue") else (f.seek(0) or f.read())
        f.seek(0)
        f.truncate(data.rfind(b"\n") + 1)


class RunDir:
    def __init__(self, root: Path):
        self.root = Path(root)

    @property
    def run_id(self) -> str:
        return self.root.name

    def exists(self) -> bool:
        return (self.root / "run.json").exists()

    def write_config(self, resolved: dict[str, Any]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        _atomic_write(self.root / "config.yaml", yaml.safe_dump(resolved, sort_keys=False))

    def read_config(self) -> dict[str, Any]:
        """The resolved config the run was made with; {} for a run folder without one."""
        path = self.root / "config.yaml"
        if not path.exists():
            return {}
        data = yaml.safe_load(path.read_text())
        return data if isinstance(data, dict) else {}

    def write_env(self, env: dict[str, Any]) -> None:
        _atomic_write(self.root / "env.json", json.dumps(env, indent=2, default=str))

    def write_run(self, record: RunRecord) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        _atomic_write(self.root / "run.json", record.model_dump_json(indent=2))

    def load_run(self) -> RunRecord:
        path = self.root / "run.json"
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise EvalsuiteError(f"{self.root}: not a run directory (no run.json)") from None
        except json.JSONDecodeError as e:
            raise EvalsuiteError(f"{path}: corrupt JSON ({e.msg} at line {e.lineno})") from None
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise EvalsuiteError(f"{path}: schema_version {version} is not supported (this evalsuite reads {SCHEMA_VERSION})")
        return RunRecord.model_validate(data)

    def variant_dir(self, variant: str) -> Path:
        d = self.root / variant
        (d / "samples").mkdir(parents=True, exist_ok=True)
        return d

    def samples_path(self, variant: str, task: str) -> Path:
        return self.variant_dir(variant) / "samples" / f"{task}.jsonl"

    def append_samples(self, variant: str, task: str, rows: list[dict[str, Any]]) -> None:
        """Append and fsync, so a killed run loses at most the batch in flight."""
        path = self.samples_path(variant, task)
        _drop_partial_line(path)
        with path.open("a") as f:
            for row in rows:
                f.write(json.dumps(row, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def load_samples(self, variant: str, task: str) -> list[dict[str, Any]]:
        """Rows written so far; a line cut short by a kill is dropped (it is redone). Creates nothing."""
        path = self.root / variant / "samples" / f"{task}.jsonl"
        if not path.exists():
            return []
        rows, seen = [], set()
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            sid = row.get("sample", {}).get("id")
            if sid in seen:
                continue  # never count a sample twice
            seen.add(sid)
            rows.append(row)
        return rows

    def write_result(self, result: VariantResult) -> None:
        _atomic_write(self.variant_dir(result.variant) / "result.json", result.model_dump_json(indent=2))

    def load_result(self, variant: str) -> VariantResult | None:
        path = self.root / variant / "result.json"
        if not path.exists():
            return None
        return VariantResult.model_validate_json(path.read_text())
