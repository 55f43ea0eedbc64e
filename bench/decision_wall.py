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

The GPU's own clock: NVML's utilization is read through the run and the report (evalsuite.memory.busy)
and `gpu_idle_frac` is the share of that wall in which no kernel ran on the cards the run may use,
also per phase (the share of the phase's wall); the run's own record of it (run.json's `wall`) is
printed beside. Without NVML it says so, and the share is nan.

`--fresh-cache` runs with a cache folder of its own that holds only the imported models, the
extracted data, the downloaded wheels and the throughput curves measured on this machine
(bench/prefill_curve.py --save) of the current one: items, W4A16 checkpoints and vLLM's
compile caches start empty, as on a fresh machine with the model imported. Arguments after `--`
go to `evalsuite run` as they are (`-- --stop decided`); with `--full RUN_DIR` (a run of the same
config without them) the bench also reports the items answered against that run's and whether
every variant's verdict (the summary's gate, the suite's one statistics path) is the same. With
`--before-ref REF` (a commit of this repository, extracted by `git archive`) or `--before-src DIR` (such
a tree already extracted) the same config, flags and cache treatment run a second time on that code,
and its wall is `before_s`; without either, before_s=nan. Where both do not fit one stretch of a card,
`--before-only` runs only that code (its RESULT line says `code=before`), and a later run of the current
code takes `--before-log LOG`, that run's output, as before_s (same variants, items and stop, or exit 2).

    .venv/bin/python bench/decision_wall.py CONFIG [-V VARIANT ...] [--parallel auto] [--fresh-cache
        [--cache-root DIR]] [--full RUN_DIR] [--work-dir DIR] [--before-ref REF | --before-src DIR
        [--before-only] | --before-log LOG] [-- RUN ARGS ...]

The last line printed is the RESULT line.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
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
    before = ap.add_mutually_exclusive_group()
    before.add_argument("--before-ref", metavar="REF", help="run the same config a second time on this commit's code "
                        "(git archive of this repository): its wall is before_s")
    before.add_argument("--before-src", type=Path, metavar="DIR", help="as --before-ref, on a tree already extracted "
                        "(a folder holding the evalsuite package)")
    before.add_argument("--before-log", type=Path, metavar="LOG", help="before_s from an earlier --before-only run's "
                        "output (its RESULT line)")
    ap.add_argument("--before-only", action="store_true", help="run only the --before-ref/--before-src code")
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    args.run_args = extra
    if args.before_only and args.before_ref is None and args.before_src is None:
        ap.error("--before-only needs --before-ref or --before-src")
    return args


def result_fields(line: str) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)


def logged_before(log: Path, mine: dict[str, str]) -> dict[str, str]:
    """The RESULT line of an earlier --before-only run, which must match this run's variants, items and stop."""
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.startswith("RESULT bench=decision_wall ")] \
        if log.is_file() else []
    if not lines or result_fields(lines[-1]).get("code", "").split("@")[0] != "before":
        sys.exit(f"--before-log {log}: no RESULT line of a --before-only run (allowed: that run's output)")
    found = result_fields(lines[-1])
    differ = [f"{k} {found.get(k)} there, {v} here" for k, v in mine.items() if found.get(k) != v]
    if differ:
        sys.exit(f"--before-log {log}: not the same decision ({'; '.join(differ)}); allowed: a run of the same config")
    return found


def flag(run_args: list[str], name: str, default: str) -> str:
    """The value `evalsuite run` is given for `name` among the arguments after `--` (`--x v` or `--x=v`)."""
    for i, a in enumerate(run_args):
        if a == name and i + 1 < len(run_args):
            return run_args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return default


def before_tree(args: argparse.Namespace, work: Path) -> Path | None:
    """The code the "before" run imports: --before-src as given, --before-ref extracted from this
    repository's history into WORK_DIR/before-src; None where neither is given."""
    if args.before_src is not None:
        if not (args.before_src / "evalsuite" / "__main__.py").is_file():
            sys.exit(f"--before-src {args.before_src}: no evalsuite package in it (allowed: a tree of this repository)")
        return args.before_src.resolve()
    if args.before_ref is None:
        return None
    dest = work / "before-src"
    dest.mkdir(parents=True, exist_ok=True)
    repo = HERE.parent
    archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", args.before_ref],
                             capture_output=True)
    if archive.returncode != 0:
        sys.exit(f"--before-ref {args.before_ref}: {archive.stderr.decode(errors='replace').strip()} "
                 f"(allowed: a commit, branch or tag of {repo.name})")
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", args.before_ref], capture_output=True, text=True)
    (dest / ".commit").write_text(commit.stdout.strip())
    return dest


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


def timed(args: list[str], env: dict[str, str], cwd: Path | None = None) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    res = subprocess.run(args, capture_output=True, text=True, env=env, cwd=cwd)
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
    from evalsuite.core.rundir import RunDir

    rd = RunDir(run_dir)
    return sum(len(rd.load_samples(f.parent.parent.name, f.stem)) for f in run_dir.glob("*/samples/*.jsonl")
               if f.stem != "latency")


def verdicts(run_dir: Path) -> dict[str, str]:
    """Each variant's verdict as the run's summary gives it (its gate against the baseline)."""
    from evalsuite.core.rundir import RunDir
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


@dataclass
class Timed:
    """One `evalsuite run` and `evalsuite report` of the bench, timed, with NVML read through both."""

    run_dir: Path
    wall_run: float
    run_start: float
    wall_report: float
    report_rc: int
    busy: object  # evalsuite.memory.busy.BusySampler, its readings on time.time()'s clock

    @property
    def wall_s(self) -> float:
        return self.wall_run + self.wall_report


def decide(args: argparse.Namespace, work: Path, src: Path | None = None) -> Timed | int:
    """The config run and reported on the code in `src` (None: this checkout); the exit code where it failed."""
    from evalsuite.memory.busy import gpu_sampler

    work.mkdir(parents=True, exist_ok=True)
    cache = {"EVALSUITE_CACHE": str(fresh_cache(args.cache_root or work / "cache"))} if args.fresh_cache else {}
    env = {**os.environ, **cache}
    if src is not None:  # `python -m` puts the working folder first: the run starts in that tree
        env["PYTHONPATH"] = os.pathsep.join([str(src), *filter(None, [os.environ.get("PYTHONPATH")])])
        # its records name its commit, not that of a repository the work folder may sit in
        env["GIT_CEILING_DIRECTORIES"] = str(src.parent)
        if (src / ".commit").is_file():
            env["EVALSUITE_COMMIT"] = (src / ".commit").read_text().strip()
    config = ray_fanout.wrapped(args.config, work / "runs")
    cmd = [sys.executable, "-m", "evalsuite", "run", str(config), "--no-progress", "-o", str(work / "runs"),
           "--parallel", args.parallel, *[a for v in args.variants for a in ("-V", v)], *args.run_args]
    busy = gpu_sampler()
    busy.clock = time.time  # readings on the clock phases.jsonl's spans are on
    try:
        with busy:
            run_start = time.time()
            wall_run, res = timed(cmd, env, src)
            (work / "run.log").write_text(res.stdout + res.stderr)
            found = [p for p in (work / "runs").glob("*") if (p / "run.json").exists()]
            if res.returncode != 0 or len(found) != 1:
                print(f"{' '.join(cmd)} exited {res.returncode}:\n{res.stderr[-3000:]}", file=sys.stderr)
                return res.returncode or 1
            wall_report, rep = timed([sys.executable, "-m", "evalsuite", "report", str(found[0]), "--out",
                                      str(work / "report")], env, src)
    finally:
        config.unlink(missing_ok=True)
    (work / "report.log").write_text(rep.stdout + rep.stderr)
    return Timed(found[0], wall_run, run_start, wall_report, rep.returncode, busy)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work = (args.work_dir or Path(tempfile.mkdtemp(prefix="decision_wall-"))).resolve()
    src = before_tree(args, work)
    if args.before_log is not None:
        logged_before(args.before_log, {})  # a wrong log is said before the run, not after it
    if args.before_only:
        only = decide(args, work / "before", src)
        return only if isinstance(only, int) else report(only, None, args, code=f"before@{commit_of(src)}")
    after = decide(args, work)
    if isinstance(after, int):
        return after
    before = None
    if src is not None:
        before = decide(argparse.Namespace(**{**vars(args), "cache_root": args.cache_root and
                                              args.cache_root.with_name(args.cache_root.name + "-before")}),
                        work / "before", src)
        if isinstance(before, int):
            print("the before run failed: no before_s", file=sys.stderr)
            return before
    return report(after, before, args)


def merged(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The spans' union as disjoint spans."""
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def idle_within(readings: dict[str, list[tuple[float, float]]], spans: list[tuple[float, float]]) -> float:
    """The GPU-idle share of the spans' union (evalsuite.memory.busy, per card, then the mean over
    cards); nan where no reading covers it."""
    from evalsuite.memory.busy import idle_share, mean_share

    shares = []
    for card in readings.values():
        parts = [(b - a, x) for a, b in merged(spans) if b > a and (x := idle_share(card, a, b)) is not None]
        weight = sum(w for w, _ in parts)
        shares.append(sum(w * x for w, x in parts) / weight if weight else None)
    found = mean_share(shares)
    return float("nan") if found is None else found


def phase_spans(rows: list[dict]) -> dict[str, list[tuple[float, float]]]:
    spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in rows:
        spans[r.get("task") if r["phase"] == "task" else PHASES.get(r["phase"], r["phase"])].append((r["start"], r["end"]))
    return spans


def fmt(x: float | None, digits: int = 4) -> str:
    return "nan" if x is None or math.isnan(x) else f"{x:.{digits}f}"


def commit_of(src: Path) -> str:
    return (src / ".commit").read_text().strip()[:12] if (src / ".commit").is_file() else "src"


def report(after: Timed, before: Timed | None, args: argparse.Namespace, code: str = "current") -> int:
    from evalsuite.core.rundir import RunDir
    from evalsuite.core.types import Scheduling

    rd = RunDir(after.run_dir)
    record = rd.load_run()
    rows = rd.load_phases()
    table = phase_table(rows, after.wall_run, after.run_start)
    table["report"] = {"wall_s": after.wall_report, "sum_s": after.wall_report, "n": 1}
    readings = after.busy.readings
    spans = {**phase_spans(rows), "report": [(after.run_start + after.wall_run, after.run_start + after.wall_s)]}
    whole = after.busy.result()
    idle = float("nan") if whole.gpu_idle_frac is None else whole.gpu_idle_frac
    sched = record.scheduling or Scheduling()
    print(f"run {after.run_dir}: {after.wall_run:.1f} s; report {after.wall_report:.1f} s (exit {after.report_rc}); "
          f"{sched.most_at_once or 1} engines at most at once, latency pass: {sched.latency_pass or '-'}")
    print("GPU idle over the bench's wall: " + (f"{idle:.1%} ({len(whole.devices)} card(s), {whole.readings} NVML "
          "readings)" if whole.gpu_idle_frac is not None else f"not sampled ({whole.sampled})")
          + f"; the run's own record: {record.wall.idle_text() if record.wall else 'none'}")
    print(f"{'phase':24s} {'wall s':>9s} {'sum s':>9s} {'spans':>6s} {'paused s':>9s} {'GPU idle':>9s}")
    for name, t in table.items():
        share = idle_within(readings, spans[name]) if name in spans else float("nan")
        print(f"{name:24s} {t['wall_s']:9.1f} {t['sum_s']:9.1f} {t['n']:6d} {t.get('paused_s', 0.0):9.1f} "
              f"{fmt(share, 3):>9s}")
    for v in record.variants:
        print(f"variant {v.variant}: {v.status} {v.reason or ''}".rstrip())
        print("  " + per_variant(rows, v.variant))
    if before is not None:
        b = before.busy.result()
        print(f"before ({before.run_dir}): run {before.wall_run:.1f} s, report {before.wall_report:.1f} s, GPU idle "
              + (f"{b.gpu_idle_frac:.1%}" if b.gpu_idle_frac is not None else f"not sampled ({b.sampled})"))
    phases = ",".join(f"{name}:{t['wall_s']:.1f}" for name, t in table.items())
    ok = all(v.status == "ok" for v in record.variants) and after.report_rc == 0
    extra = against_full(after.run_dir, args.full) if args.full else ""
    limit = flag(args.run_args, "--limit", "")
    run_idle = record.wall.gpu_idle_frac if record.wall else None
    same = {"variants": str(len(record.variants)), "items": f"limit{limit}" if limit else "full",
            "stop": flag(args.run_args, "--stop", "") or str((rd.read_config() or {}).get("stop") or "full")}
    if before is not None:
        before_part = (f" before_s={before.wall_s:.1f} before_gpu_idle_frac={fmt(before.busy.result().gpu_idle_frac)}"
                       f" before_all_ok={int(before_ok(before))}")
    elif args.before_log is not None:
        found = logged_before(args.before_log, same)
        before_part = (f" before_s={found['wall_s']} before_gpu_idle_frac={found.get('gpu_idle_frac', 'nan')}"
                       f" before_all_ok={found.get('all_ok', 'nan')} before_code={found['code']}")
    else:
        before_part = " before_s=nan"
    print(f"RESULT bench=decision_wall {' '.join(f'{k}={v}' for k, v in same.items())} wall_s={after.wall_s:.1f} "
          f"gpu_idle_frac={fmt(idle)}{before_part} answered={answered(after.run_dir)} "
          f"run_gpu_idle_frac={fmt(run_idle)} all_ok={int(ok)} code={code} "
          f"parallel={args.parallel} run_args={'_'.join(a.lstrip('-') for a in args.run_args) or '-'} "
          f"phases={phases}{extra}")
    return 0


def before_ok(before: Timed) -> bool:
    from evalsuite.core.rundir import RunDir

    return all(v.status == "ok" for v in RunDir(before.run_dir).load_run().variants) and before.report_rc == 0


if __name__ == "__main__":
    raise SystemExit(main())
