"""Per-item scores kept from a run folder, and a run folder made from them again.

A kept folder holds, per variant: result.json (settings, engine figures, status), config.yaml (the
run's resolved config), engine-memory.log (the engine's memory lines) and one `<task>.scores.jsonl.gz`
per samples file, each line a Score. Rows are read through RunDir.load_samples, the reader stats'
pairing reads, so a line cut by a kill or a sample recorded twice counts as it does there.

Imported, every variant keeps its recorded result and gets its metrics recomputed from the kept
scores as `evalsuite finish` computes them; completions are not kept, so the folder serves
comparisons and resumption, not a rerun. Latency is never seeded for a resume: timings are
measured within one engine's life. A kept folder comes from archives and other machines: every file
of it is read as data (evalsuite.core.files), and `export` writes into it only through `Inside`.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import os
import re
import shutil
import tempfile
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import ValidationError

from evalsuite.core.errors import ConfigError
from evalsuite.core.files import Inside, bounded_lines, open_regular, parse_json, parse_yaml, read_regular
from evalsuite.core.migrate import upgraded
from evalsuite.core.rundir import (CONFIG_FILE, ENGINE_LOG, RECORD_BYTES, RECORD_DEPTH, RESULT_FILE, RunDir,
                                    new_run_id, parse_result, read_result)
from evalsuite.core.types import RunRecord, Score

KEPT_SUFFIX = ".scores.jsonl.gz"
MEMORY_LOG = "engine-memory.log"
# the engine's lines a reader checks memory figures against; the rest of its log is not kept
LOG_KEEP = re.compile(r"Model loading took|Available KV cache|KV cache size|Maximum concurrency|Using \w+LinearKernel|"
                      r"Actual usage|Error|error:")
# A kept scores file, unpacked: MMLU's 14,042 items take 3 MB; a gzip that unpacks to more (a bomb) stops here
KEPT_BYTES = 256 << 20
KEPT_KIND = "kept scores file (gzip JSONL of scores)"


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
    """The Score rows of a kept file, as written: a regular file whose gzip unpacks to at most KEPT_BYTES,
    each line a Score (strict types, each key once, a finite value); else one line naming the file and line."""
    with open_regular(path, KEPT_KIND) as raw:
        try:
            with gzip.GzipFile(fileobj=raw) as gz:
                data = gz.read(KEPT_BYTES + 1)
        except (OSError, EOFError, zlib.error) as e:
            raise ConfigError(f"{path}: not a {KEPT_KIND}: {e}") from None
    if len(data) > KEPT_BYTES:
        raise ConfigError(f"{path}: unpacks to more than {KEPT_BYTES >> 20} MiB; not a {KEPT_KIND}")
    rows = []
    for n, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        row = parse_json(path, line, KEPT_KIND, n)
        try:
            score = Score.model_validate_json(line, strict=True)
        except ValidationError as e:
            err = e.errors(include_url=False, include_input=False)[0]
            key = ".".join(map(str, err["loc"])) or "(top level)"
            raise ConfigError(f"{path}: line {n}: not a {KEPT_KIND}: {key}: {err['msg']}") from None
        if not math.isfinite(score.value):
            raise ConfigError(f"{path}: line {n}: not a {KEPT_KIND}: value: {score.value} (allowed: a finite number)")
        rows.append(row)
    return rows


def gz_rows(rows: list[dict]) -> bytes:
    """gzip with no name or time in its header: the same scores make the same bytes (archives repeat)."""
    raw = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
        gz.write("".join(json.dumps(r) + "\n" for r in rows).encode())
    return raw.getvalue()


def write_rows(path: Path, rows: list[dict]) -> None:
    Inside(path.parent).write(path.name, gz_rows(rows))


def export_scores(run: Path, dest: Path, variants: Sequence[str] = ()) -> list[str]:
    """Keep the scores of `run`'s variants (all, or `variants`) in `dest`, beside any kept there
    already; one line a variant says what was done."""
    rd = RunDir(run)
    record = rd.load_run()
    seeded = record.env.rebuilt_from is not None
    # a result.json that is no file (a FIFO) is the variant's all the same, and refused when read
    names = list(variants) or [p.name for p in sorted(run.iterdir()) if os.path.lexists(p / RESULT_FILE)]
    missing = [v for v in names if rd.load_result(v) is None]
    if missing:
        raise ConfigError(f"--variant: {', '.join(missing)} not in {run} (allowed: {', '.join(v.variant for v in record.variants)})")
    said = []
    kept = Inside(dest)
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
        said.append(f"{name}: {_export_variant(rd, name, result, kept)}")
    return said


def _export_variant(rd: RunDir, name: str, result: dict, kept: Inside) -> str:
    earlier = kept.read(f"{name}/{RESULT_FILE}", RECORD_BYTES, "JSON record")
    if earlier is not None:
        result = with_kept_figures(result, _result_dict(kept.root / name / RESULT_FILE, earlier))
    kept.write(f"{name}/{RESULT_FILE}", (json.dumps(result, indent=2) + "\n").encode())
    keep_config(rd, kept, name)
    kept.write(f"{name}/{MEMORY_LOG}", ("\n".join(_memory_lines(rd.root / name / ENGINE_LOG)) + "\n").encode())
    counts = []
    for f in rd.sample_files(name):
        rows = [r["score"] for r in rd.load_samples(name, f.stem) if isinstance(r.get("score"), dict)]
        kept.write(f"{name}/{f.stem}{KEPT_SUFFIX}", gz_rows(rows))
        counts.append(f"{f.stem} {len(rows)}")
    return ", ".join(counts) or "no scores"


def _memory_lines(log: Path) -> list[str]:
    """The engine log's lines a reader checks memory figures against, read a line at a time."""
    if not log.exists() and not log.is_symlink():
        return []
    with open_regular(log, "engine log") as fh:
        return [text[:400] for line in bounded_lines(fh) if LOG_KEEP.search(text := line.decode(errors="replace"))]


def keep_config(rd: RunDir, kept: Inside, name: str) -> None:
    """A variant's tasks measured by several configs (one lane a task) keep one config naming them
    all: where the kept config differs from the new run's in its tasks only, the new run's tasks
    replace those of the same name and the others stay; any other difference (model, defaults,
    variants) and the new run's config replaces the kept one whole."""
    new = read_regular(rd.config_path, RECORD_BYTES, "YAML file")
    cfg = rd.read_config()
    rel = f"{name}/{CONFIG_FILE}"
    raw = kept.read(rel, RECORD_BYTES, "YAML file")
    old = parse_yaml(kept.root / rel, raw, RECORD_DEPTH, "kept config") if raw is not None else {}
    old = old if isinstance(old, dict) else {}
    old_tasks, new_tasks = old.pop("tasks", None) or [], cfg.pop("tasks", None) or []
    named = [t for t in (*old_tasks, *new_tasks) if isinstance(t, dict) and isinstance(t.get("name"), str)]
    if old != cfg or len(named) != len(old_tasks) + len(new_tasks):
        kept.write(rel, new)
        return
    names = {t["name"] for t in new_tasks}
    cfg["tasks"] = [t for t in old_tasks if t["name"] not in names] + new_tasks
    kept.write(rel, yaml.safe_dump(cfg, sort_keys=False).encode())


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
    # a result.json that is no file (a FIFO) is a variant all the same: refused when read, never dropped
    held = sorted(p.name for p in kept.iterdir() if os.path.lexists(p / RESULT_FILE))
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
    texts = {n: _kept_bytes(kept / n / CONFIG_FILE) for n in names}
    if None in texts.values() or len(set(texts.values())) > 1:
        odd = sorted(n for n, t in texts.items() if t != texts[names[0]] or t is None) or names
        raise ConfigError(f"{kept}: the kept configs of {', '.join(odd)} are missing or differ from "
                          f"{names[0]}'s; give --config CONFIG")
    from evalsuite.core.configfile import MAX_DEPTH, format_validation_error

    path = kept / names[0] / CONFIG_FILE
    data = parse_yaml(path, texts[names[0]], MAX_DEPTH, "kept config")
    try:
        return _Config(RunConfig.model_validate(data), None)
    except ValidationError as e:
        raise ConfigError(f"{path}: {format_validation_error(e, RunConfig)}") from None


def _kept_bytes(path: Path) -> bytes | None:
    return read_regular(path, RECORD_BYTES, "YAML file") if path.exists() or path.is_symlink() else None


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
    from evalsuite.run.session import recorded_exclude

    cfg = config.cfg
    rd = RunDir(root)
    rd.write_config(cfg.model_dump(mode="json", exclude=recorded_exclude(cfg) | {"limit"}))
    results = {n: read_result(kept / n / RESULT_FILE) for n in names}
    rd.write_run(RunRecord(run_id=run_id, config_path=config.path and os.path.realpath(config.path),
                           model=cfg.model.name or cfg.model.source, env={"rebuilt_from": str(kept)}))
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


def _result_dict(path: Path, raw: bytes | None = None) -> dict:
    """A variant's result.json as this version holds it, still a mapping (export merges it as one),
    read as data and held to the schema."""
    raw = read_regular(path, RECORD_BYTES, "JSON record") if raw is None else raw
    parse_result(path, raw)
    data = parse_json(path, raw)
    return upgraded(data, str(path), run=False)


def _sample_meta(cfg) -> Callable[[dict], dict]:
    """The sample fields a metric's group may name that a Score does not carry: a defined task's
    category of the item's group (MMLU's subjects), as the task sets it on its samples."""
    from evalsuite.tasks.spec import ChoiceConfig, load_definition

    categories = {t.name or t.type: load_definition(t.type).categories for t in cfg.tasks if isinstance(t, ChoiceConfig)}

    def meta(row: dict) -> dict:
        cats = categories.get(str(row.get("task")), {})
        return {"category": cats[row["group"]]} if row.get("group") in cats else {}

    return meta
