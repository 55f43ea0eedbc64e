"""Per-item scores of H200 run folders, kept in docs/results, and the paired table built from them.

Run folders of the 1.5B hold ~130 MB of prompts per variant, too much to keep in the repository
(every device call carries the repository). What a comparison needs is each item's Score: its id,
group, target, prediction, value and the choice log-probabilities. `export` keeps those (gzip JSONL,
one file per variant and task) with each variant's result.json and the engine's memory log lines;
`table` prints accuracies with 95% Wilson intervals and paired differences against the baseline
(exact McNemar p for per-item accuracy; every difference's interval from evalsuite.stats, the path
compare and gate take).

`rundir` turns kept scores back into a run folder that `evalsuite gate` and `evalsuite compare`
read, so that variants measured in different sessions (whose run folders are gone) are gated and
plotted together. Each variant keeps its recorded result (settings, engine figures, status) and
gets its metrics recomputed from the kept per-item scores, as `evalsuite finish` computes them;
completions are not kept, so the folder serves comparisons and resumption, not a rerun.

`seed` builds such a folder where `evalsuite run --resume` finds it (OUTPUT_DIR/<id>-<config stem>),
so that a later session completes a partial variant instead of measuring its recorded items again:
the runner skips every sample id that has a score. Greedy answers of one model and config repeat
across sessions (24 of 24 multi-key cells measured twice were identical), so the items are
exchangeable; the engine figures are the new session's. Latency is never seeded: timings are
measured within one engine's life. Run it where the run will run (the config's resolved paths, e.g.
a GGUF variant's, must match).

    python lab/scores.py export RUN_DIR... DEST
    python lab/scores.py table DEST [--baseline bf16]
    python lab/scores.py rundir DEST CONFIG OUT_RUN_DIR [--variant V ...]
    python lab/scores.py seed DEST CONFIG OUTPUT_DIR [--variant V ...]
    python lab/scores.py glance SHORT_DEST LONG_DEST LATENCY_DEST [--baseline bf16]
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import shutil
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import yaml
from evalsuite.core.errors import ConfigError
from evalsuite.stats.significance import mcnemar_two_sided, paired_test, stratum_weights, two_sided, wilson

LOG_KEEP = re.compile(r"Model loading took|Available KV cache|KV cache size|Maximum concurrency|Using \w+LinearKernel|"
                      r"Actual usage|Error|error:")


def export(run_dirs: list[Path], dest: Path) -> None:
    from evalsuite.core.records import RunDir

    for run in run_dirs:
        seeded = RunDir(run).load_run().env.get("rebuilt_from") is not None
        for vdir in sorted(p for p in run.iterdir() if (p / "result.json").is_file()):
            if seeded and not (vdir / "engine.log").exists():
                # seeded from the kept scores and never started in this run: exporting it would only
                # replace the kept engine log with an empty one
                print(f"export: {run.name}/{vdir.name}: seeded, not run here; kept as it is")
                continue
            result = json.loads((vdir / "result.json").read_text())
            if result.get("status") == "partial" and not result.get("metrics"):
                # cut before its first item (a latency pass at its engine's start): `finish` scored
                # no sample, so there is nothing to keep, and an empty record would read as
                # "measured" beside the variant's kept one
                print(f"export: {run.name}/{vdir.name}: cut before any item; nothing exported")
                continue
            out = dest / vdir.name
            out.mkdir(parents=True, exist_ok=True)
            if (out / "result.json").is_file():
                result = _with_kept_figures(result, json.loads((out / "result.json").read_text()))
            (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
            _keep_config(run / "config.yaml", out / "config.yaml")
            log = (vdir / "engine.log").read_text(errors="replace").splitlines() if (vdir / "engine.log").exists() else []
            (out / "engine-memory.log").write_text("\n".join(ln[:400] for ln in log if LOG_KEEP.search(ln)) + "\n")
            for f in sorted((vdir / "samples").glob("*.jsonl")):
                with f.open() as src, gzip.open(out / f"{f.stem}.scores.jsonl.gz", "wt") as dst:
                    for line in src:
                        if line.endswith("\n"):  # a line cut by a kill is not a result
                            dst.write(json.dumps(json.loads(line)["score"]) + "\n")


def _keep_config(new: Path, kept: Path) -> None:
    """A variant's tasks measured by several configs (one lane a task) keep one config naming them
    all: where the kept config differs from the new run's in its tasks only, the new run's tasks
    replace those of the same name and the others stay; any other difference (model, defaults,
    variants) and the new run's config replaces the kept one whole."""
    cfg = yaml.safe_load(new.read_text())
    old = yaml.safe_load(kept.read_text()) if kept.is_file() else {}
    old_tasks, new_tasks = old.pop("tasks", None) or [], cfg.pop("tasks", None) or []
    if old != cfg:  # another model, defaults or variants (or nothing kept): the new config as it is
        shutil.copyfile(new, kept)
        return
    names = {t["name"] for t in new_tasks}
    cfg["tasks"] = [t for t in old_tasks if t["name"] not in names] + new_tasks
    kept.write_text(yaml.safe_dump(cfg, sort_keys=False))


def _with_kept_figures(new: dict, kept: dict) -> dict:
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
    return {**new, "engine": {**engine, "source": source}, "predicted": new.get("predicted") or kept.get("predicted") or {}}


def _stem(kept: Path) -> str:
    """The samples file a kept one came from: `legal`, or `legal.calibration` (the train items a
    thresholded task fitted on, evalsuite.tasks.threshold)."""
    return kept.name.removesuffix(".scores.jsonl.gz")


def load(dest: Path) -> dict[str, dict[str, dict[str, dict]]]:
    """variant -> task -> sample id -> score row."""
    out: dict = defaultdict(dict)
    for f in sorted(dest.glob("*/*.scores.jsonl.gz")):
        with gzip.open(f, "rt") as fh:
            out[f.parent.name][_stem(f)] = {r["sample_id"]: r for r in map(json.loads, fh)}
    return out


def _keys(rows: list[dict], task: str) -> list[tuple]:
    """The strata the headline weighs items by: legal's balanced accuracy per task and label."""
    return [(str(r["group"]), str(r["target"])) for r in rows] if task == "legal" else [()] * len(rows)


def headline(rows: list[dict], task: str) -> float:
    """The task's headline: mean of per-task balanced accuracies for legal, else mean score."""
    return float(stratum_weights(_keys(rows, task)) @ np.array([r["value"] for r in rows], float))


def row(variant: str, task: str, rows: dict, base: dict | None) -> str:
    vals = list(rows.values())
    n, k = len(vals), sum(r["value"] >= 1 for r in vals)
    lo, hi = wilson(k, n)
    head = headline(vals, task)
    cell = f"| {variant} | {task} | {n} | {head:.4f} | {k / n:.4f} [{lo:.4f}, {hi:.4f}] |"
    if base is None:
        return cell + " baseline | | |"
    b, c, d, lo_d, hi_d = paired(rows, base, task)
    bb, cc = np.array([r["value"] >= 1 for r in b]), np.array([r["value"] >= 1 for r in c])
    p = mcnemar_two_sided(int(np.sum(bb & ~cc)), int(np.sum(~bb & cc)))
    return cell + f" {100 * d:+.2f} [{100 * lo_d:+.2f}, {100 * hi_d:+.2f}] (n={len(b)}) | {int(np.sum(bb & ~cc))}/{int(np.sum(~bb & cc))} | {p:.2g} |"


def paired(rows: dict, base: dict, task: str) -> tuple[list[dict], list[dict], float, float, float]:
    """The items both answered (baseline's, candidate's), the headline difference and its 95% interval."""
    ids = [i for i in rows if i in base]
    b, c = [base[i] for i in ids], [rows[i] for i in ids]
    t = paired_test([r["value"] for r in b], [r["value"] for r in c], _keys(b, task), two_sided(0.95))
    return b, c, -t.drop, -t.high, -t.low


def table(dest: Path, baseline: str) -> None:
    data = load(dest)
    print("| variant | task | n | headline | per-item acc [95% Wilson] | headline diff vs baseline, pt [95% paired] | lost/gained | exact McNemar p |")
    print("|---|---|---|---|---|---|---|---|")
    for variant in sorted(data, key=lambda v: (v != baseline, v)):
        for task, rows in sorted(data[variant].items()):
            base = None if variant == baseline else data.get(baseline, {}).get(task)
            if variant != baseline and not base:
                continue
            print(row(variant, task, rows, base))


def _sample_meta(task: str, group: str | None) -> dict:
    """The sample fields a metric's group may name that a Score does not carry: MMLU's category."""
    if task != "mmlu" or group is None:
        return {}
    from evalsuite.tasks.spec import load_definition

    subjects = load_definition("mmlu").categories
    return {"category": subjects[group]} if group in subjects else {}


def _diff(data: dict, variant: str, task: str, baseline: str) -> str:
    """Headline with its n and, off the baseline, the paired difference in points [95%]."""
    rows, base = data[variant].get(task), data[baseline].get(task)
    if not rows:
        return "-"
    head = f"{headline(list(rows.values()), task):.3f}"
    if variant == baseline or not base:
        return f"{head} (n={len(rows):,})"
    b, _, d, lo, hi = paired(rows, base, task)
    return f"{head} {100 * d:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}] (n={len(b):,})"


def _found(rows: dict | None, lengths: list[int]) -> str:
    """Items right / items recorded at each length, joined by ' / '."""
    if not rows:
        return "-"
    cells = []
    for n in lengths:
        at = [r["value"] for r in rows.values() if r.get("extra", {}).get("length") == n]
        cells.append(f"{sum(v >= 1 for v in at)}/{len(at)}" if at else "-")
    return " / ".join(cells)


def _latency(rows: dict | None, lengths: list[str], full: dict[str, int]) -> list[str]:
    """Median TTFT and ITL at each of `lengths` (prompt tokens), one cell each; a median of fewer
    requests than the fullest variant's at that length (a cut run) says its n."""
    out = []
    for key, digits in (("ttft_ms", 0), ("itl_ms", 2)):
        cells = []
        for n in lengths:
            at = [r["extra"][key] for r in (rows or {}).values() if r["group"] == n and r["extra"].get(key) is not None]
            short = f" (n={len(at)})" if 0 < len(at) < full.get(n, 0) else ""
            cells.append(f"{np.median(at):,.{digits}f}{short}" if at else "-")
        out.append(" / ".join(cells) if rows else "-")
    return out


def _lengths(data: dict, task: str) -> list[int]:
    """Every context length any variant recorded for a task, ascending."""
    return sorted({r["extra"]["length"] for tasks in data.values() for r in (tasks.get(task) or {}).values()
                   if r.get("extra", {}).get("length") is not None})


def _header(name: str, lengths: list[int]) -> str:
    return f"{name} " + " / ".join(f"{n // 1024}K" for n in lengths) if lengths else name


_LONG_TASKS = ("needle", "needle_multikey", "legal_long")
_LONG_NAMES = {"needle": "needle", "needle_multikey": "multi-key", "legal_long": "legal_long"}


def glance(short: Path, long: Path, latency: Path, baseline: str) -> None:
    """One row per variant: accuracy to 32K with paired differences, the YaRN grid's found/n, the
    engine's weights and KV tokens (16 GiB pool), and TTFT/ITL medians alone on the card. The
    lengths of each column are the ones the kept records hold."""
    s, y, lat = load(short), load(long), load(latency)
    # the two longest prompts of the latency pass: at 1K every variant is fixed per-step cost
    lat_lengths = sorted({r["group"] for t in lat.values() for r in t.get("latency", {}).values()}, key=int)[-2:]
    full = {n: max(sum(r["group"] == n for r in t.get("latency", {}).values()) for t in lat.values())
            for n in lat_lengths}
    grids = [(s, t, _lengths(s, t), _LONG_NAMES[t]) for t in _LONG_TASKS]
    grids += [(y, t, _lengths(y, t), "YaRN " + _LONG_NAMES[t]) for t in _LONG_TASKS]
    heads = ["variant", "MMLU, diff pt [95%]", "CUAD bal. acc., diff pt [95%]",
             *(_header(name, lens) for _, _, lens, name in grids),
             "weights GiB", "KV tokens in 16 GiB",
             *(f"{k} ms " + " / ".join(f"{int(n) // 1000}K" for n in lat_lengths) for k in ("TTFT", "ITL"))]
    print("| " + " | ".join(heads) + " |")
    print("|" + "---|" * len(heads))
    for v in sorted(set(s) | set(y), key=lambda v: (v != baseline, v)):
        eng = {}
        for dest in (short, long):
            if (dest / v / "result.json").is_file():
                eng = json.loads((dest / v / "result.json").read_text()).get("engine") or {}
                break
        cells = [_diff(s, v, "mmlu", baseline) if v in s else "-", _diff(s, v, "legal", baseline) if v in s else "-",
                 *(_found(data.get(v, {}).get(t), lens) for data, t, lens, _ in grids),
                 f"{eng['weights_gib']:.2f}" if eng.get("weights_gib") else "-",
                 f"{eng['kv_cache_tokens']:,}" if eng.get("kv_cache_tokens") else "-",
                 *_latency(lat.get(v, {}).get("latency"), lat_lengths, full)]
        print(f"| {v} | " + " | ".join(cells) + " |")


def rundir(dest: Path, config: Path, out: Path, variants: list[str], seeded: bool = False) -> None:
    from evalsuite.core.records import RunDir
    from evalsuite.core.types import RunRecord, VariantResult
    from evalsuite.data.assets import default_cache_dir
    from evalsuite.run.config import load_config
    from evalsuite.run.finish import finish_run

    # a folder for comparisons needs no model file (the GGUF variant's is not in the repository); a
    # seeded one is resumed by `evalsuite run`, which does
    cfg = load_config(config) if seeded else records_config(config)
    wanted = {t.name for t in cfg.tasks} if seeded else None
    names = variants or sorted(p.name for p in dest.iterdir() if (p / "result.json").is_file())
    rd = RunDir(out)
    rd.write_config(cfg.model_dump(mode="json", exclude={"scheduler", "limit"}))
    kept = {n: VariantResult.model_validate_json((dest / n / "result.json").read_text()) for n in names}
    rd.write_run(RunRecord(run_id=out.name, config_path=str(config), model=cfg.model.name or cfg.model.source,
                           env={"rebuilt_from": str(dest)}))
    for name, result in kept.items():
        for f in sorted((dest / name).glob("*.scores.jsonl.gz")):
            if wanted is not None and _stem(f).split(".")[0] not in wanted:
                continue  # a seeded run holds only its config's tasks: never latency, nor a task another config runs
            with gzip.open(f, "rt") as fh:
                rows = [json.loads(line) for line in fh]
            if not rows:
                continue
            rd.append_samples(name, _stem(f), [
                {"sample": {"id": r["sample_id"], "meta": _sample_meta(r["task"], r.get("group"))}, "completion": {},
                 "score": r} for r in rows])
        rd.write_result(result.model_copy(update={"status": "running", "metrics": []}))
    record = finish_run(out, default_cache_dir())
    for v in record.variants:  # metrics from the kept scores; status and reason as recorded
        v.status, v.reason = kept[v.variant].status, kept[v.variant].reason
        if seeded and v.status in ("ok", "partial"):
            # `run --resume` leaves an `ok` variant whose every item of this config is scored and
            # measures the rest; a kept `partial` (its other tasks, run by other configs, were cut)
            # would start an engine for no item
            v.status, v.reason = "ok", f"seeded from {dest}"
        rd.write_result(v)
    rd.write_run(record)
    print(out)


def records_config(config: Path):
    """A config read for its records only (tasks, names, settings), never run: its variants' model
    files (the GGUF that lives on the GPU machine) need not exist here."""
    from unittest import mock

    from evalsuite.run import config as configmod

    with mock.patch.object(configmod, "_check_variant_models", lambda cfg: []):
        return configmod.load_config(config)


def seed(dest: Path, config: Path, output_dir: Path, variants: list[str]) -> None:
    from evalsuite.core.records import new_run_id
    from evalsuite.run.resume import find_resumable

    found = find_resumable(output_dir, config)
    if found is not None:
        raise SystemExit(f"seed: {found.root} already holds a run of {config.name}; `evalsuite run --resume` continues it")
    names = [v for v in variants if (dest / v / "result.json").is_file()] if variants else []
    if variants and not names:
        print(f"seed: no kept scores for {', '.join(variants)} in {dest}; nothing to seed")
        return
    rundir(dest, config, output_dir / new_run_id(config.stem), names, seeded=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export")
    e.add_argument("paths", nargs="+", type=Path)
    t = sub.add_parser("table")
    t.add_argument("dest", type=Path)
    t.add_argument("--baseline", default="bf16")
    r = sub.add_parser("rundir")
    r.add_argument("dest", type=Path)
    r.add_argument("config", type=Path, help="the config whose tasks the scores come from")
    r.add_argument("out", type=Path)
    r.add_argument("--variant", action="append", default=[])
    g = sub.add_parser("glance")
    g.add_argument("short", type=Path, help="kept scores of the 32K config")
    g.add_argument("long", type=Path, help="kept scores of the YaRN 128K config")
    g.add_argument("latency", type=Path, help="kept records of the latency config")
    g.add_argument("--baseline", default="bf16")
    sd = sub.add_parser("seed")
    sd.add_argument("dest", type=Path)
    sd.add_argument("config", type=Path)
    sd.add_argument("output_dir", type=Path, help="the folder `evalsuite run --output-dir` will be given")
    sd.add_argument("--variant", action="append", default=[])
    a = ap.parse_args()
    try:
        run_command(a)
    except ConfigError as e:  # bad input: one line, exit 2, as the CLI does
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def run_command(a: argparse.Namespace) -> None:
    if a.cmd == "export":
        export(a.paths[:-1], a.paths[-1])
    elif a.cmd == "rundir":
        rundir(a.dest, a.config, a.out, a.variant)
    elif a.cmd == "glance":
        glance(a.short, a.long, a.latency, a.baseline)
    elif a.cmd == "seed":
        seed(a.dest, a.config, a.output_dir, a.variant)
    else:
        table(a.dest, a.baseline)


if __name__ == "__main__":
    main()
