"""One sweep run one variant after another and packed (`run --parallel`), side by side in one run.

Both modes are `evalsuite run` as a user runs it, in a subprocess each, on the same config: the wall
time of each command is what a user waits for, engine starts and preparation included. Tracking is
off in both so MLflow does not enter the timing. The packed mode runs first, so that what the
warm-up below leaves cold (the page cache of the task data, say) helps the sequential mode: the
speedup errs low. Answers are compared per item (`same_answers`: the share of items whose completion
text is identical; latency rows are timings and left out); `--noise` runs the sequential mode a
second time, whose share of identical answers is the floor a packed run's changes are read against.
Each variant's primary metrics are also paired packed against sequential through the suite's paired
test, a line each with its 95% interval (`score_delta_max_pt`: the largest difference, in points):
on a GPU, batches composed differently can flip near-tied answers, and what matters is whether a
score moves. `--prebuild` builds the W4A16 checkpoints that the
variants quantize (`evalsuite quantize`, cached) first and says so (`prebuilt=` in the RESULT line);
the warm-up below builds any still missing, untimed. With neither (`--warmup 0`), the packed mode,
which runs first, would pay every build and the sequential mode none: the speedup would err low by
the builds' minutes.

Before either mode, an untimed packed pass over a few items a task (`--warmup N`, default 8) fills
the compile caches: vLLM compiles each variant's graphs and kernels at its engine's start and first
requests and reuses them from disk afterwards, so on a fresh machine whichever mode ran first would
pay every compilation and the other none (on the H200 the 1.5B's first engine started in 68 s,
later ones of the same shape in 20-26 s: docs/benchmarks.md, overhead). Warm, both modes time what a
user's second sweep costs; `--warmup 0` times the first mode cold (the speedup then errs low).

On a GPU, where a small model's engine start outweighs its work, packing overlaps the starts. On a
CPU the engines split its cores between them, so the speedup is what overlapping the starts gains
over slower work.

    .venv/bin/python bench/sweep_wall.py CONFIG [-V VARIANT ...] [--parallel auto|N] [--noise] [--prebuild]
        [--warmup N]
    .venv/bin/python bench/sweep_wall.py --tiny                    # CPU, tiny model, 4 variants

The last line printed is the RESULT line.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from rich.console import Console

from evalsuite.core.rundir import RunDir
from evalsuite.core.types import RunRecord, Scheduling
from evalsuite.report.names import primary_metrics
from evalsuite.report.placement import engines_at_once, placement_table
from evalsuite.stats.paired import difference_interval, pairing

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ray_fanout  # noqa: E402  (its tiny config and config wrapper)

# A few items a task reach every shape class a task sends (its items spread over lengths and
# depths), so the kernels compiled at an engine's first requests are in the caches before timing.
WARMUP_ITEMS = 8


def tiny_config(work: Path) -> Path:
    """ray_fanout's tiny CPU config, widened to four variants and two tasks, without the latency pass
    (it runs alone after the packed tasks, which would time two engine starts a variant)."""
    cfg = yaml.safe_load(ray_fanout.tiny_config(work).read_text())
    cfg["defaults"].update({"max_model_len": 2048, "engine_args": {"kv_cache_memory_bytes": 64 * 2**20}})
    cfg["engine"]["batch_size"] = 16
    cfg["variants"] = {"bf16": {}, "kv_fp8": {"kv_cache_dtype": "fp8"}, "no_prefix": {"enable_prefix_caching": False},
                       "bf16_again": {}}
    cfg["tasks"].append({"type": "needle", "lengths": [512, 1024], "depths": [0.0, 1.0]})
    cfg.pop("latency")
    cfg["tracking"] = {"enabled": False}
    path = work / "sweep.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def run(config: Path, out: Path, parallel: str | None, variants: list[str] = ()) -> tuple[float, Path]:
    wall, record = ray_fanout.run(config, list(variants), out, None, ("--parallel", parallel) if parallel else ())
    return wall, record["dir"]


def prebuild(config: Path, variants: list[str]) -> int:
    """Build the checkpoints of the selected variants that quantize (simulated INT4 builds its own
    dense copy at run time and is left to the runs), one at a time as the packed runner would; the
    number built or found cached."""
    from evalsuite.run.config import load_config

    cfg = load_config(config)
    names = [n for n, v in cfg.variants.items() if v.quantize and not v.simulate and (not variants or n in variants)]
    for name in names:
        t0 = time.perf_counter()
        res = subprocess.run([sys.executable, "-m", "evalsuite", "quantize", str(config), "--variant", name],
                             capture_output=True, text=True)
        if res.returncode != 0:
            sys.exit(f"prebuild {name} failed:\n{res.stderr[-3000:]}")
        print(f"prebuild {name}: {res.stderr.strip().splitlines()[-1] if res.stderr.strip() else 'ok'} "
              f"({time.perf_counter() - t0:.1f} s, untimed)", flush=True)
    return len(names)


def answers(run_dir: Path) -> dict[str, str]:
    """variant/task/item -> completion text, the latency pass left out."""
    rd, out = RunDir(run_dir), {}
    for f in run_dir.glob("*/samples/*.jsonl"):
        variant, task = f.parent.parent.name, f.stem
        if task == "latency":
            continue
        for row in rd.load_samples(variant, task):
            out[f"{variant}/{task}/{row['sample']['id']}"] = row["completion"]["text"]
    return out


def same_share(a: dict[str, str], b: dict[str, str]) -> float:
    return sum(a[k] == b.get(k) for k in a) / max(len(a), 1)


def score_deltas(seq: RunDir, packed: RunDir, base: RunRecord, cand: RunRecord) -> float | None:
    """Each variant's primary metrics, packed against sequential, through the suite's paired test:
    printed a line each (items whose answer changed, the difference and its 95% interval); returns
    the largest difference in points, so that changed answers are read as what they do to a score.
    (The intervals' bounds would not do as that figure: a task of 15 unchanged items bounds
    its difference only to +-20 points.)"""
    largest = None
    for v in base.variants:
        c = cand.variant(v.variant)
        for name in primary_metrics([v]) if c else []:
            metric = v.metric(name)
            if metric is None or c.metric(name) is None:
                continue
            p = pairing(seq, v.variant, packed, v.variant, metric)
            if not p.n:
                continue
            lo, hi, _ = difference_interval(p, 0.95)
            b, k = p.means()
            largest = max(largest or 0.0, 100 * abs(k - b))
            print(f"scores     {v.variant} {name}: n={p.n}, {p.changed} answers changed; sequential {b:.4f}, "
                  f"packed {k:.4f}: {100 * (k - b):+.2f} pt [{100 * lo:+.2f}, {100 * hi:+.2f}]", flush=True)
    return largest


def say_mode(name: str, wall_s: float, run_dir: Path) -> None:
    """One mode's wall time and each variant's, printed as the mode ends: a sweep cut short (a time
    limit) still tells what it measured."""
    print(f"{name}: {wall_s:.1f} s ({time.strftime('%H:%M:%S')})", flush=True)
    for v in json.loads((run_dir / "run.json").read_text())["variants"]:
        place = v.get("placement") or {}
        print(f"{name:10s} {v['variant']}: {v['status']}, {v['duration_s'] or 0:.1f} s (engine start "
              f"{v['engine'].get('startup_s') or 0:.1f} s), beside {place.get('ran_with', [])}", flush=True)
    table = placement_table(RunDir(run_dir).load_run())
    if table is not None:  # the planner's footprint against each packed engine's own figures
        Console(width=160).print(table)


def report(seq_s: float, seq: Path, packed_s: float, packed: Path, parallel: str, noise: float | None,
           prebuilt: int | None = None) -> str:
    dirs = {name: RunDir(d) for name, d in (("sequential", seq), ("packed", packed))}
    records = {name: rd.load_run() for name, rd in dirs.items()}
    ok = all(v.status == "ok" for rec in records.values() for v in rec.variants)
    a, b = answers(seq), answers(packed)
    largest = score_deltas(dirs["sequential"], dirs["packed"], records["sequential"], records["packed"])
    sched = records["packed"].scheduling or Scheduling()
    print(f"packed with --parallel {parallel}: {engines_at_once(sched)}, budget {sched.budget_gib} "
          f"of {sched.memory_gib} GiB; {len(a)} answers per mode; runs in {packed.parent.parent}")
    return (f"RESULT bench=sweep_wall variants={len(records['sequential'].variants)} parallel={parallel} "
            f"all_ok={int(ok)} sequential_s={seq_s:.1f} packed_s={packed_s:.1f} speedup={seq_s / packed_s:.3f} "
            f"same_answers={same_share(a, b):.4f} noise_floor={'-' if noise is None else f'{noise:.4f}'} "
            f"prebuilt={'-' if prebuilt is None else prebuilt} "
            f"score_delta_max_pt={'-' if largest is None else f'{largest:.2f}'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", nargs="?", type=Path, help="A config with several variants.")
    ap.add_argument("--parallel", default="auto", help="The packed mode's --parallel (default: auto).")
    ap.add_argument("--noise", action="store_true", help="Run the sequential mode twice: the answers' noise floor.")
    ap.add_argument("--tiny", action="store_true", help="The tiny random model on CPU.")
    ap.add_argument("--prebuild", action="store_true",
                    help="Build the quantized checkpoints before either mode is timed (both then find them cached).")
    ap.add_argument("--warmup", type=int, default=WARMUP_ITEMS, metavar="N",
                    help=f"Items a task in the untimed packed pass that fills the compile caches first (0: none; "
                         f"default {WARMUP_ITEMS}).")
    ap.add_argument("-V", "--variant", action="append", default=[], dest="variants",
                    help="Run only this variant of CONFIG (repeatable), as `evalsuite run -V`.")
    args = ap.parse_args()
    if not args.config and not args.tiny:
        ap.error("give CONFIG or --tiny")
    work = Path(tempfile.mkdtemp(prefix="sweep_wall-"))
    config = tiny_config(work) if args.tiny else ray_fanout.wrapped(args.config, work)
    try:
        prebuilt = prebuild(config, args.variants) if args.prebuild else None
        if args.warmup:
            warm_s = ray_fanout.run(config, args.variants, work / "warmup", None,
                                    ("--parallel", args.parallel, "--limit", str(args.warmup)))[0]
            print(f"warm-up: {warm_s:.1f} s, untimed ({time.strftime('%H:%M:%S')})", flush=True)
        packed_s, packed = run(config, work / "packed", args.parallel, args.variants)
        say_mode("packed", packed_s, packed)
        seq_s, seq = run(config, work / "sequential", None, args.variants)
        say_mode("sequential", seq_s, seq)
        again = run(config, work / "sequential-again", None, args.variants)[1] if args.noise else None
        noise = same_share(answers(seq), answers(again)) if again else None
    finally:
        if not args.tiny:
            config.unlink(missing_ok=True)
    print(report(seq_s, seq, packed_s, packed, args.parallel, noise, prebuilt) + f" warmup={args.warmup}")


if __name__ == "__main__":
    main()
