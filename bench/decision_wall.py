"""The whole decision, timed: `evalsuite run CONFIG --parallel auto`, then `evalsuite report`, by phase.

Both commands run as a user runs them, in subprocesses, tracking off. The wall time of each is what
a user waits for; the phases come from the run's own records (phases.jsonl, which the run appends
as each span ends): items (building every task's items, before any engine), builds (W4A16
checkpoints), starts (engine start and compilation), one phase per task (the latency pass is the
task `latency`), paused (engines stopped while another timed its latency pass), closes, and the
report (its command's wall time). Engines run side by side, so a phase's spans overlap: each phase
is given as its wall time (the union of its spans: how long some engine was in it) and as the sum
over engines; `other` is the run's wall time outside every span (interpreter, model and tokenizer,
the summary). A task's union less the pauses inside it is printed too: with the latency pass in
place, the others' tasks stand still while one variant times.

`--fresh-cache` runs with a cache folder of its own that holds only the imported models, the
extracted data, the downloaded wheels and the throughput curves measured on this machine
(bench/prefill_curve.py --save) of the current one: items, W4A16 checkpoints and vLLM's
compile caches start empty, as on a fresh machine with the model imported. Arguments after `--`
go to `evalsuite run` as they are (`-- --stop decided`); with `--full RUN_DIR` (a run of the same
config without them) the bench also reports the items answered against that run's and whether
every variant's verdict (the summary's gate, the suite's one statistics path) is the same.

    .venv/bin/python bench/decision_wall.py CONFIG [-V VARIANT ...] [--parallel auto] [--fresh-cache
        [--cache-root DIR]] [--full RUN_DIR] [--work-dir DIR] [-- RUN ARGS ...]

The last line printed is the RESULT line.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import ray_fanout  # noqa: E402  (its config wrapper: tracking off, runs under the work folder)

# phases.jsonl's phase -> the name the bench reports it under (tasks by their own name)
PHASES = {"items": "items", "build": "builds", "engine_start": "starts", "paused": "paused",
          "engine_close": "closes", "quiet_wait": "quiet_wait"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", type=Path)
    ap.add_argument("-V", "--variant", action="append", default=[], dest="variants")
    ap.add_argument("--parallel", default="auto", help="`run --parallel` (default auto)")
    ap.add_argument("--fresh-cache", action="store_true", help="a cache of only the models, data and wheels")
    ap.add_argument("--cache-root", type=Path, help="where --fresh-cache makes it (default: WORK_DIR/cache; "
                    "W4A16 checkpoints and compile caches land there)")
    ap.add_argument("--full", type=Path, metavar="RUN_DIR", help="a full run of CONFIG to set items and verdicts against")
    ap.add_argument("--work-dir", type=Path, help="keep the runs here (default: a temporary folder, kept)")
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    args.run_args = extra
    return args


def fresh_cache(cache: Path) -> Path:
    """A cache folder holding links to the current one's models, data, wheels and measured throughput
    curves, nothing else."""
    from evalsuite.data.assets import default_cache_dir

    here = default_cache_dir()
    if cache.exists() and any(p.name not in ("models", "assets", "wheels", "throughput") for p in cache.iterdir()):
        sys.exit(f"--cache-root {cache}: holds more than models, data and wheels; give a new folder")
    cache.mkdir(parents=True, exist_ok=True)
    for part in ("models", "assets", "wheels", "throughput"):  # throughput: curves measured once per model and card
        if (here / part).exists() and not (cache / part).exists():
            (cache / part).symlink_to((here / part).resolve())
    return cache


def timed(args: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    res = subprocess.run(args, capture_output=True, text=True, env=env)
    return time.perf_counter() - t0, res


def union_s(spans: list[tuple[float, float]]) -> float:
    """Seconds covered by at least one of the spans."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def clipped(spans: list[tuple[float, float]], within: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The parts of `spans` inside any of `within`."""
    return [(max(a, c), min(b, d)) for a, b in spans for c, d in within if min(b, d) > max(a, c)]


def phase_table(rows: list[dict], wall_run: float, run_start: float) -> dict[str, dict[str, float]]:
    """Per reported phase: wall (union), sum and count of its spans; tasks also net of the pauses
    inside them; `other`: the run's wall outside every span."""
    spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in rows:
        name = r.get("task") if r["phase"] == "task" else PHASES.get(r["phase"], r["phase"])
        spans[name].append((r["start"], r["end"]))
    out = {name: {"wall_s": union_s(s), "sum_s": sum(b - a for a, b in s), "n": len(s)} for name, s in spans.items()}
    paused_by_variant: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in rows:
        if r["phase"] == "paused":
            paused_by_variant[r["variant"]].append((r["start"], r["end"]))
    for r in rows:
        if r["phase"] == "task":
            held = sum(b - a for a, b in clipped([(r["start"], r["end"])], paused_by_variant[r["variant"]]))
            out[r["task"]].setdefault("paused_s", 0.0)
            out[r["task"]]["paused_s"] += held
    everything = [(r["start"], r["end"]) for r in rows]
    out["other"] = {"wall_s": max(wall_run - union_s(clipped(everything, [(run_start, run_start + wall_run)])), 0.0),
                    "sum_s": float("nan"), "n": 1}
    return out


def per_variant(rows: list[dict], variant: str) -> str:
    """One variant's spans in order, seconds each; a task's less the time its engine was paused."""
    mine = [r for r in rows if r.get("variant") == variant]
    paused = [(r["start"], r["end"]) for r in mine if r["phase"] == "paused"]
    parts = []
    for r in sorted(mine, key=lambda r: r["start"]):
        if r["phase"] == "paused":
            continue
        held = sum(b - a for a, b in clipped([(r["start"], r["end"])], paused)) if r["phase"] == "task" else 0.0
        name = r["task"] if r["phase"] == "task" else PHASES.get(r["phase"], r["phase"])
        items = f"/{r['items']}" if r.get("items") else ""
        parts.append(f"{name}{items} {r['end'] - r['start'] - held:.1f}" + (f" (+{held:.1f} paused)" if held else ""))
    return ", ".join(parts) + (f"; paused {sum(b - a for a, b in paused):.1f} s in all" if paused else "")


def answered(run_dir: Path) -> int:
    """Task items answered (the latency pass's timed requests left out)."""
    from evalsuite.core.records import RunDir

    rd = RunDir(run_dir)
    return sum(len(rd.load_samples(f.parent.parent.name, f.stem)) for f in run_dir.glob("*/samples/*.jsonl")
               if f.stem != "latency")


def verdicts(run_dir: Path) -> dict[str, str]:
    """Each variant's verdict as the run's summary gives it (its gate against the baseline)."""
    from evalsuite.core.records import RunDir
    from evalsuite.verdict.rules import default_rules_path, load_rules
    from evalsuite.report.summary import gate_verdicts

    rd = RunDir(run_dir)
    return gate_verdicts(rd, rd.load_run(), load_rules(default_rules_path()))[0]


def against_full(run_dir: Path, full: Path) -> str:
    """items=, items_full=, share and verdicts_match= beside a full run, each difference printed."""
    mine, theirs = answered(run_dir), answered(full)
    a, b = verdicts(run_dir), verdicts(full)
    for v in sorted(set(a) | set(b)):
        mark = "" if a.get(v) == b.get(v) else "   <- differs"
        print(f"verdict {v}: {a.get(v, '-')} here, {b.get(v, '-')} in the full run{mark}")
    share = mine / theirs if theirs else float("nan")
    return f" items_full={theirs} items_share={share:.3f} verdicts_match={int(a == b)}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="decision_wall-"))
    work.mkdir(parents=True, exist_ok=True)
    cache = {"EVALSUITE_CACHE": str(fresh_cache(args.cache_root or work / "cache"))} if args.fresh_cache else {}
    env = {**os.environ, **cache}
    config = ray_fanout.wrapped(args.config, work / "runs")
    cmd = [sys.executable, "-m", "evalsuite", "run", str(config), "--no-progress", "-o", str(work / "runs"),
           "--parallel", args.parallel, *[a for v in args.variants for a in ("-V", v)], *args.run_args]
    try:
        run_start = time.time()
        wall_run, res = timed(cmd, env)
    finally:
        config.unlink(missing_ok=True)
    (work / "run.log").write_text(res.stdout + res.stderr)
    found = [p for p in (work / "runs").glob("*") if (p / "run.json").exists()]
    if res.returncode != 0 or len(found) != 1:
        print(f"{' '.join(cmd)} exited {res.returncode}:\n{res.stderr[-3000:]}", file=sys.stderr)
        return res.returncode or 1
    run_dir = found[0]
    wall_report, rep = timed([sys.executable, "-m", "evalsuite", "report", str(run_dir), "--out", str(work / "report")], env)
    (work / "report.log").write_text(rep.stdout + rep.stderr)
    return report(run_dir, wall_run, run_start, wall_report, rep.returncode, args)


def report(run_dir: Path, wall_run: float, run_start: float, wall_report: float, report_rc: int,
           args: argparse.Namespace) -> int:
    from evalsuite.core.records import RunDir
    from evalsuite.core.types import Scheduling

    rd = RunDir(run_dir)
    record = rd.load_run()
    sched = record.scheduling or Scheduling()
    table = phase_table(rd.load_phases(), wall_run, run_start)
    table["report"] = {"wall_s": wall_report, "sum_s": wall_report, "n": 1}
    print(f"run {run_dir}: {wall_run:.1f} s; report {wall_report:.1f} s (exit {report_rc}); "
          f"{sched.most_at_once or 1} engines at most at once, latency pass: {sched.latency_pass or '-'}")
    print(f"{'phase':24s} {'wall s':>9s} {'sum s':>9s} {'spans':>6s} {'paused s':>9s}")
    for name, t in table.items():
        print(f"{name:24s} {t['wall_s']:9.1f} {t['sum_s']:9.1f} {t['n']:6d} {t.get('paused_s', 0.0):9.1f}")
    for v in record.variants:
        print(f"variant {v.variant}: {v.status} {v.reason or ''}".rstrip())
        print("  " + per_variant(rd.load_phases(), v.variant))
    phases = ",".join(f"{name}:{t['wall_s']:.1f}" for name, t in table.items())
    ok = all(v.status == "ok" for v in record.variants) and report_rc == 0
    extra = against_full(run_dir, args.full) if args.full else ""
    print(f"RESULT bench=decision_wall variants={len(record.variants)} items={answered(run_dir)} "
          f"wall_s={wall_run + wall_report:.1f} all_ok={int(ok)} parallel={args.parallel} "
          f"run_args={'_'.join(a.lstrip('-') for a in args.run_args) or '-'} phases={phases}{extra}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
