"""Per-item scores kept from a run folder, and a run folder made from them again.

A kept folder holds, per variant: result.json (settings, engine figures, status), config.yaml (the
run's resolved config), engine-memory.log (the engine's memory lines) and one `<task>.scores.jsonl.gz`
per samples file, each line a Score. Rows are read through RunDir.load_samples, the reader stats'
pairing reads, so a line cut by a kill or a sample recorded twice counts as it does there.

Imported, every variant keeps its recorded result and gets its metrics recomputed from the kept
scores as `evalsuite finish` computes them; completions are not kept, so the folder serves
comparisons and resumption, not a rerun. Latency is never seeded for a resume: timings are
measured within one engine's life.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import shutil
import tempfile
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from evalsuite.core.errors import ConfigError
from evalsuite.core.migrate import upgraded
from evalsuite.core.records import CONFIG_FILE, ENGINE_LOG, RESULT_FILE, RunDir, new_run_id, read_result
from evalsuite.core.types import RunRecord

KEPT_SUFFIX = ".scores.jsonl.gz"
MEMORY_LOG = "engine-memory.log"
# the engine's lines a reader checks memory figures against; the rest of its log is not kept
LOG_KEEP = re.compile(r"Model loading took|Available KV cache|KV cache size|Maximum concurrency|Using \w+LinearKernel|"
                      r"Actual usage|Error|error:")
SEEDED_KEY = "rebuilt_from"  # run.json env: the kept folder a run folder was made from


def task_of(kept_file: Path) -> str:
    """The samples file a kept one came from: `legal`, or `legal.calibration` (the train items a
    thresholded task fitted on)."""
    return kept_file.name.removesuffix(KEPT_SUFFIX)


def read_kept(folder: Path, variants: Sequence[str] = ()) -> dict[str, dict[str, dict[str, dict]]]:
    """variant -> task -> sample id -> Score row, of every kept file under `folder` (or of `variants`)."""
    out: dict[str, dict[str, dict[str, dict]]] = {}
    if not folder.is_dir():
        raise ConfigError(f"{folder}: no kept scores there (not a folder)")
    for f in sorted(folder.glob(f"*/*{KEPT_SUFFIX}")):
        if variants and f.parent.name not in variants:
            continue
        out.setdefault(f.parent.name, {})[task_of(f)] = {r["sample_id"]: r for r in read_rows(f)}
    return out


def read_rows(path: Path) -> list[dict]:
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
    except (OSError, EOFError, ValueError, zlib.error) as e:
        raise ConfigError(f"{path}: not a kept scores file (gzip JSONL of scores): {e}") from None
    if not all(isinstance(r, dict) and isinstance(r.get("sample_id"), str) for r in rows):
        raise ConfigError(f"{path}: a line without a sample_id; not a kept scores file")
    return rows


def write_rows(path: Path, rows: list[dict]) -> None:
    """gzip with no name or time in its header: the same scores make the same bytes (archives repeat)."""
    raw = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
        gz.write("".join(json.dumps(r) + "\n" for r in rows).encode())
    path.write_bytes(raw.getvalue())


def export_scores(run: Path, dest: Path, variants: Sequence[str] = ()) -> list[str]:
    """Keep the scores of `run`'s variants (all, or `variants`) in `dest`, beside any kept there
    already; one line a variant says what was done."""
    rd = RunDir(run)
    record = rd.load_run()
    seeded = record.env.get(SEEDED_KEY) is not None
    names = list(variants) or [p.name for p in sorted(run.iterdir()) if (p / RESULT_FILE).is_file()]
    missing = [v for v in names if rd.load_result(v) is None]
    if missing:
        raise ConfigError(f"--variant: {', '.join(missing)} not in {run} (allowed: {', '.join(v.variant for v in record.variants)})")
    said = []
    for name in names:
        if seeded and not (run / name / ENGINE_LOG).exists():
            # made from kept scores and never started here: exporting it would replace the kept
            # engine log with an empty one
            said.append(f"{name}: imported, not run here; kept as it is")
            continue
        result = _result_dict(run / name / RESULT_FILE)
        if result.get("status") == "partial" and not result.get("metrics"):
            # cut before its first item: nothing to keep, and an empty record would read as measured
            said.append(f"{name}: cut before any item; nothing exported")
            continue
        said.append(f"{name}: {_export_variant(rd, name, result, dest / name)}")
    return said


def _export_variant(rd: RunDir, name: str, result: dict, out: Path) -> str:
    out.mkdir(parents=True, exist_ok=True)
    if (out / RESULT_FILE).is_file():
        result = with_kept_figures(result, _result_dict(out / RESULT_FILE))
    (out / RESULT_FILE).write_text(json.dumps(result, indent=2) + "\n")
    keep_config(rd.config_path, out / CONFIG_FILE)
    log = rd.root / name / ENGINE_LOG
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    (out / MEMORY_LOG).write_text("\n".join(ln[:400] for ln in lines if LOG_KEEP.search(ln)) + "\n")
    counts = []
    for f in rd.sample_files(name):
        rows = [r["score"] for r in rd.load_samples(name, f.stem) if isinstance(r.get("score"), dict)]
        write_rows(out / f"{f.stem}{KEPT_SUFFIX}", rows)
        counts.append(f"{f.stem} {len(rows)}")
    return ", ".join(counts) or "no scores"


def keep_config(new: Path, kept: Path) -> None:
    """A variant's tasks measured by several configs (one lane a task) keep one config naming them
    all: where the kept config differs from the new run's in its tasks only, the new run's tasks
    replace those of the same name and the others stay; any other difference (model, defaults,
    variants) and the new run's config replaces the kept one whole."""
    cfg = yaml.safe_load(new.read_text())
    old = yaml.safe_load(kept.read_text()) if kept.is_file() else {}
    old_tasks, new_tasks = old.pop("tasks", None) or [], cfg.pop("tasks", None) or []
    if old != cfg:
        shutil.copyfile(new, kept)
        return
    names = {t["name"] for t in new_tasks}
    cfg["tasks"] = [t for t in old_tasks if t["name"] not in names] + new_tasks
    kept.write_text(yaml.safe_dump(cfg, sort_keys=False))


def with_kept_figures(new: dict, kept: dict) -> dict:
    """A variant cut mid-run records only the engine figures of its start; where the kept record is
    of the same settings (another task's lane, same card), the figures it has and the cut run lacks
    are kept, each still named by its source. A figure the new run withheld (its device was shared,
    so vLLM's free-memory deltas were not its own) stays withheld: the kept one is no better."""
    if new.get("settings") != kept.get("settings") or not kept.get("engine"):
        return new
    engine = dict(new.get("engine") or {})
    source, kept_source = dict(engine.get("source") or {}), kept["engine"].get("source") or {}
    for k, v in kept["engine"].items():
        if engine.get(k) is None and v is not None and source.get(k) != "withheld":
            engine[k] = v
            if k in kept_source:
                source[k] = kept_source[k]
    return {**new, "engine": {**engine, "source": source}, "predicted": new.get("predicted") or kept.get("predicted")}


@dataclass
class Imported:
    """What `import_scores` made: the run folder (None where nothing was kept to seed) and what it says."""

    root: Path | None
    said: list[str]


def kept_variants(kept: Path, variants: Sequence[str]) -> list[str]:
    """The variants of a kept folder (all, or those asked that it holds)."""
    if not kept.is_dir():
        raise ConfigError(f"{kept}: no kept scores there (not a folder)")
    held = sorted(p.name for p in kept.iterdir() if (p / RESULT_FILE).is_file())
    return [v for v in variants if v in held] if variants else held


def import_scores(kept: Path, out: Path, config: Path | None, variants: Sequence[str], cache_dir: Path,
                  for_resume: bool = False) -> Imported:
    """A run folder at `out` made from the scores kept in `kept`. With `for_resume`, `out` is the
    output folder a run writes to: the run folder is made where `evalsuite run --resume CONFIG`
    finds it, holding only CONFIG's tasks, so that the run measures only the items not kept."""
    from evalsuite.run.resume import find_resumable

    names = kept_variants(kept, variants)
    if not for_resume:
        if not names:
            raise ConfigError(f"{kept}: no kept variant{' of ' + ', '.join(variants) if variants else ''} there")
        if out.exists() and any(out.iterdir()):
            raise ConfigError(f"{out}: not empty; give a new folder for the imported run")
        cfg = _config(kept, names, config, check_models=False)
        return Imported(_rebuild(kept, cfg, out, names, None, cache_dir), _outside(cfg, names))
    if config is None:
        raise ConfigError("--for-resume needs --config: the config the resumed run will run")
    found = find_resumable(out, config)
    if found is not None:
        raise ConfigError(f"{found.root} already holds a run of {config.name}; `evalsuite run --resume` continues it")
    if not names:
        return Imported(None, [f"no kept scores of {', '.join(variants) or 'any variant'} in {kept}; nothing to seed"])
    cfg = _config(kept, names, config, check_models=True)
    root = _rebuild(kept, cfg, out / new_run_id(config.stem), names, {t.name for t in cfg.cfg.tasks}, cache_dir)
    return Imported(root, _outside(cfg, names))


def _outside(config: _Config, names: list[str]) -> list[str]:
    """A line naming the kept variants the config has no variant for: a run folder records only its
    config's variants, so these are left out."""
    left = [n for n in names if n not in config.cfg.variants]
    return [f"not in {config.path or 'the kept config'}, left out: {', '.join(left)}"] if left else []


@dataclass
class _Config:
    cfg: object  # RunConfig
    path: Path | None  # the config file given; None for the kept one, which names no file a run was started from


def _config(kept: Path, names: list[str], config: Path | None, check_models: bool) -> _Config:
    """The config the run folder records: the one given, else the one the kept variants share."""
    from evalsuite.run.config import RunConfig, load_config

    if config is not None:
        return _Config(load_config(config, check_models=check_models), config)
    texts = {n: (kept / n / CONFIG_FILE).read_text() if (kept / n / CONFIG_FILE).is_file() else None for n in names}
    if None in texts.values() or len(set(texts.values())) > 1:
        odd = sorted(n for n, t in texts.items() if t != texts[names[0]] or t is None) or names
        raise ConfigError(f"{kept}: the kept configs of {', '.join(odd)} are missing or differ from "
                          f"{names[0]}'s; give --config CONFIG")
    from pydantic import ValidationError

    from evalsuite.core.configfile import format_validation_error

    try:
        return _Config(RunConfig.model_validate(yaml.safe_load(texts[names[0]])), None)
    except (ValidationError, yaml.YAMLError, TypeError) as e:
        what = format_validation_error(e, RunConfig) if isinstance(e, ValidationError) else "not a config"
        raise ConfigError(f"{kept / names[0] / CONFIG_FILE}: {what}") from None


def _rebuild(kept: Path, config: _Config, out: Path, names: list[str], only_tasks: set[str] | None,
             cache_dir: Path) -> Path:
    """Made in a folder beside `out` and moved there whole: a kept file that turns out damaged leaves
    no half-made run folder that a second try would refuse."""
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}-"))
    try:
        _fill(kept, config, staging, out.name, [n for n in names if n in config.cfg.variants], only_tasks, cache_dir)
        os.replace(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


def _fill(kept: Path, config: _Config, root: Path, run_id: str, names: list[str], only_tasks: set[str] | None,
          cache_dir: Path) -> None:
    from evalsuite.run.finish import finish_run

    cfg = config.cfg
    rd = RunDir(root)
    rd.write_config(cfg.model_dump(mode="json", exclude={"scheduler", "limit"}))
    results = {n: read_result(kept / n / RESULT_FILE) for n in names}
    rd.write_run(RunRecord(run_id=run_id, config_path=config.path and os.path.realpath(config.path),
                           model=cfg.model.name or cfg.model.source, env={SEEDED_KEY: str(kept)}))
    meta = _sample_meta(cfg)
    for name, result in results.items():
        for f in sorted((kept / name).glob(f"*{KEPT_SUFFIX}")):
            task = task_of(f)
            if only_tasks is not None and task.split(".")[0] not in only_tasks:
                continue  # a seeded run holds only its config's tasks: never latency, nor another config's task
            rows = read_rows(f)
            if rows:
                rd.append_samples(name, task, [{"sample": {"id": r["sample_id"], "meta": meta(r)}, "completion": {},
                                                "score": r} for r in rows])
        rd.write_result(result.model_copy(update={"status": "running", "metrics": []}))
    record = finish_run(root, cache_dir)
    for v in record.variants:  # metrics from the kept scores; status and reason as recorded
        v.status, v.reason = results[v.variant].status, results[v.variant].reason
        if only_tasks is not None and v.status in ("ok", "partial"):
            # `run --resume` leaves an `ok` variant whose every item of this config is scored and
            # measures the rest; a kept `partial` (its other tasks, run by other configs, were cut)
            # would start an engine for no item
            v.status, v.reason = "ok", f"seeded from {kept}"
        rd.write_result(v)
    rd.write_run(record)


def _result_dict(path: Path) -> dict:
    """A variant's result.json as this version holds it, still a mapping (export merges it as one)."""
    return upgraded(json.loads(path.read_text()), str(path), run=False)


def _sample_meta(cfg) -> Callable[[dict], dict]:
    """The sample fields a metric's group may name that a Score does not carry: a defined task's
    category of the item's group (MMLU's subjects), as the task sets it on its samples."""
    from evalsuite.tasks.spec import ChoiceConfig, load_definition

    categories = {t.name or t.type: load_definition(t.type).categories for t in cfg.tasks if isinstance(t, ChoiceConfig)}

    def meta(row: dict) -> dict:
        cats = categories.get(str(row.get("task")), {})
        return {"category": cats[row["group"]]} if row.get("group") in cats else {}

    return meta
