"""Latency timed packed against alone: does the control pass, and does a busy neighbour move anyone's figures?

Runs CONFIG's variants packed (`evalsuite run --parallel auto`, twice, and once more with `--stop
decided`, where the baseline runs first and alone), then each measured variant alone on a restarted
engine (latency only, one engine at a time on the device). Per packed run it reads the gate's latency
checks of the control (the config's `controls:`) against the baseline, through the gate itself: an
interval from each side's repeats (evalsuite.stats.timing), judged only between passes timed alike.
Per packed run, variant, figure (TTFT and ITL p50) and prompt length it sets the packed figure against
the alone one with the same interval. The evidence that isolation was put to the test is each pass's
own record (result.json `timing`): which neighbours it paused, what each had in flight then (requests,
longest prompt), how long the card took to drain (NVML) and the warm-up.

Each phase is one `evalsuite run` of a few minutes, saved as WORK/parts/<phase>-<k>.json and skipped
once saved (a phase cut by a time limit is resumed with `run --resume`), so that a lease of commands
of at most 10 minutes runs it piece by piece; --report combines whatever parts are saved:

    bench/latency_isolation.py CONFIG -w WORK --phase packed     # packed-1; again: packed-2
    bench/latency_isolation.py CONFIG -w WORK --phase stop       # stop-1: --parallel auto --stop decided
    bench/latency_isolation.py CONFIG -w WORK --phase alone      # each measured variant alone, latency only
    bench/latency_isolation.py CONFIG -w WORK --report
    bench/latency_isolation.py CONFIG -w WORK                    # every phase left, then the report
    bench/latency_isolation.py --demo [--model DIR] -w WORK      # CPU: a small model, small passes

`--busy VARIANT` names a variant that is there to keep the card busy (a slow attention backend in
long prefills), not measured. `--long N`: the prompt tokens a neighbour's request in flight must reach
to count as busy in a long prefill (default: 90% of the config's longest task length, 32K at most).
The last line printed is the RESULT line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

FIGURES = ("ttft_ms", "itl_ms")
PACKED_RUNS = 2  # `--parallel auto` runs; with the `--stop decided` one, three packed runs
TARGET_PCT = 10.0


# ---------------------------------------------------------------- configs


def demo_config(work: Path, model: Path | None) -> Path:
    """On a CPU: a small model as bf16 and its repeat (the control), packed with every engine on every
    core (a paused neighbour leaves the timed engine what an engine alone has), a needle grid for the
    neighbour to be busy in, and a latency pass of two lengths, 2 warm-up and 5 timed requests each."""
    cores = ",".join(map(str, sorted(os.sched_getaffinity(0))))
    cfg: dict[str, Any] = {
        "variants": {"bf16": {}, "bf16_repeat": {}}, "baseline": "bf16", "controls": ["bf16_repeat"],
        "tasks": [{"type": "needle", "lengths": [1024], "depths": [0.0, 0.25, 0.5, 0.75, 1.0], "seeds": 2}],
        "latency": {"prompt_tokens": [64, 512], "output_tokens": 8, "repeats": 5, "warmup": 2},
        "timing": {"quiet": "pause"}, "tracking": {"enabled": False}, "gate_rules": "smoke",
        "engine": {"batch_size": 2, "env": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_OMP_THREADS_BIND": cores}}}
    if model is None:
        cfg["include"] = str(ROOT / "configs" / "base" / "cpu.yaml")
    else:
        cfg.update(model={"path": str(model)}, defaults={
            "dtype": "bfloat16", "max_model_len": 2048, "enforce_eager": True, "enable_prefix_caching": True,
            "engine_args": {"kv_cache_memory_bytes": 64 * 2**20}})
    path = work / "demo.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def derived(config: Path, name: str, extra: dict) -> Path:
    """CONFIG with `extra` over it, beside it (its includes and paths are relative to its folder)."""
    path = config.resolve().parent / f".{config.stem}-latency_isolation-{name}.yaml"
    path.write_text(yaml.safe_dump({"include": config.name, **extra}))
    return path


def roles(config: Path, busy: list[str]) -> tuple[list[str], str, str | None]:
    """(measured variants, baseline, control) of CONFIG."""
    from evalsuite.run.config import load_config

    cfg = load_config(config)
    measured = [v for v in cfg.variants if v not in busy]
    controls = [c for c in (cfg.controls or []) if c in measured]
    return measured, cfg.baseline or measured[0], controls[0] if controls else None


def long_prompt(config: Path) -> int:
    """What counts as a long prompt in flight: 90% of the longest length a task of CONFIG asks for (its
    needle or RULER lengths include the answer's budget), at most 28,800 (a 32K prefill)."""
    from evalsuite.run.config import load_config

    cfg = load_config(config)
    lengths = [n for t in cfg.tasks for n in (getattr(t, "lengths", None) or [])]
    return int(0.9 * min(max(lengths, default=0), 32000))


# ---------------------------------------------------------------- phases


def _subprocess(argv: list[str]) -> tuple[int, str]:
    res = subprocess.run([sys.executable, "-m", "evalsuite", *argv], capture_output=True, text=True)
    return res.returncode, res.stdout[-2000:] + "\n" + res.stderr[-3000:]


EVALSUITE = _subprocess  # argv -> (exit code, output tail); a test runs it in-process


def evalsuite_run(config: Path, out: Path, args: list[str]) -> tuple[float, Path]:
    """`evalsuite run` into `out` (resumed where a cut phase left a run there): its wall time and folder."""
    resume = out.is_dir() and any((p / "run.json").exists() for p in out.iterdir())
    argv = ["run", str(config), "--no-progress", "-o", str(out), *args, *(["--resume"] if resume else [])]
    t0 = time.perf_counter()
    code, tail = EVALSUITE(argv)
    wall = time.perf_counter() - t0
    if code not in (0, 1):  # 1: every variant failed, which the parts say
        sys.exit(f"evalsuite {' '.join(argv)} failed ({code}):\n{tail}")
    runs = sorted(p for p in out.iterdir() if (p / "run.json").exists())
    return wall, runs[-1]


def requests_of(run_dir: Path, variant: str) -> dict[str, dict[str, list[float]]]:
    """figure -> prompt length -> the per-request values, in request order (evalsuite.stats.timing.series)."""
    from evalsuite.core.rundir import RunDir
    from evalsuite.stats.timing import series

    rows = RunDir(run_dir).load_samples(variant, "latency")
    out: dict[str, dict[str, list[float]]] = {}
    for fig in FIGURES:
        for row in rows:
            score = row["score"]
            out.setdefault(fig, {}).setdefault(str(score["group"]), []).extend(series(fig, [score.get("extra") or {}]))
    return out


def control_checks(run_dir: Path, baseline: str, control: str | None) -> list[dict]:
    """The gate's latency and throughput checks of the control against the baseline, in this run."""
    if control is None:
        return []
    from evalsuite.core.rundir import RunDir
    from evalsuite.verdict.compare import is_latency
    from evalsuite.verdict.gate import run_gate
    from evalsuite.verdict.sides import Side
    from evalsuite.verdict.rules import load_rules, run_rules_path

    rd = RunDir(run_dir)
    path = run_rules_path(rd.read_config())
    report = run_gate(Side(rd, baseline), [Side(rd, control)], load_rules(path), str(path))
    return [{"metric": c.metric, "status": c.status, "change": c.change, "low": c.low, "high": c.high,
             "detail": c.detail} for c in report.checks
            if is_latency(c.metric) and (c.status != "skip" or c.detail.startswith("not comparable"))]


def part_of(phase: str, k: int, run_dir: Path, wall: float, baseline: str, control: str | None) -> dict:
    record = json.loads((run_dir / "run.json").read_text())
    variants = {}
    for v in record["variants"]:
        variants[v["variant"]] = {"status": v["status"], "timing": v.get("timing"), "host_load": v.get("host_load"),
                                  "requests": requests_of(run_dir, v["variant"])}
    return {"phase": phase, "run": k, "dir": str(run_dir), "wall_s": round(wall, 1), "baseline": baseline,
            "control": control, "control_checks": control_checks(run_dir, baseline, control), "variants": variants}


def next_k(work: Path, phase: str) -> int:
    """The first run of `phase` not yet saved."""
    k = 1
    while (work / "parts" / f"{phase}-{k}.json").exists():
        k += 1
    return k


def run_phase(config: Path, work: Path, phase: str, busy: list[str]) -> Path | None:
    """One phase's run and its part; None where this phase is already saved in full."""
    measured, baseline, control = roles(config, busy)
    limit = {"packed": PACKED_RUNS, "stop": 1, "alone": 1}[phase]
    k = next_k(work, phase)
    if k > limit:
        print(f"{phase}: already saved ({limit} run(s))")
        return None
    if phase == "alone":
        cfg = derived(config, "alone", {"tasks": [], "scheduler": {"parallel": 1}})
        args = ["--parallel", "1", *(a for v in measured for a in ("-V", v))]
    else:
        cfg, args = config, ["--parallel", "auto", *(["--stop", "decided"] if phase == "stop" else [])]
    try:
        wall, run_dir = evalsuite_run(cfg, work / f"{phase}-{k}", args)
    finally:
        if cfg is not config:
            cfg.unlink(missing_ok=True)
    part = part_of(phase, k, run_dir, wall, baseline, control)
    path = work / "parts" / f"{phase}-{k}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(part, indent=1))
    print(f"{phase}-{k}: {wall:.1f} s, {run_dir}", flush=True)
    for name, v in part["variants"].items():
        print(f"  {name}: {v['status']}; timed {describe(v['timing'])}", flush=True)
    return path


# ---------------------------------------------------------------- the report


def describe(timing: dict | None) -> str:
    from evalsuite.core.types import TimingCondition

    return "-" if timing is None else TimingCondition.model_validate(timing).describe()


def busy_evidence(parts: list[dict], long: int) -> tuple[list[str], int, int]:
    """Each pass timed with a paused neighbour that had requests in flight: (lines, the longest prompt
    in flight, how many passes had one of at least `long` tokens)."""
    lines, longest, beside_long = [], 0, 0
    for part in parts:
        for name, v in part["variants"].items():
            t = v.get("timing") or {}
            for other, flight in (t.get("paused") or {}).items():
                if not flight.get("requests"):
                    continue
                longest = max(longest, flight["longest_prompt"])
                beside_long += flight["longest_prompt"] >= long
                drained = f", the device idle after {t['drain_s']:.2f} s ({t['idle']})" if t.get("idle_ok") else \
                    f", the device not found idle ({t.get('idle')})"
                lines.append(f"{part['phase']}-{part['run']}: {name} timed with {other} paused mid-{flight['task']} "
                             f"({flight['requests']} request(s) in flight, up to {flight['longest_prompt']:,} prompt "
                             f"tokens){drained}")
    return lines, longest, beside_long


def packed_vs_alone(parts: list[dict], alone: dict, measured: list[str]) -> tuple[list[str], float | None, int]:
    """Per packed run, variant, figure and length: the packed p50 against the alone one, its interval
    (stats.timing.ratio_test), or why the two do not compare; (lines, the largest |change| %, pairs
    not comparable)."""
    from evalsuite.core.types import HostLoad, TimingCondition, timing_unlike
    from evalsuite.stats.timing import ratio_test

    def cond(v: dict) -> TimingCondition | None:
        return TimingCondition.model_validate(v["timing"]) if v.get("timing") else None

    def loaded(v: dict) -> bool:
        return bool(v.get("host_load")) and HostLoad.model_validate(v["host_load"]).loaded

    lines, worst, apart = [], None, 0
    for part in parts:
        for name in measured:
            p, a = part["variants"].get(name), alone["variants"].get(name)
            if not p or not a or p["status"] != "ok" or a["status"] != "ok":
                continue
            why = timing_unlike(cond(a), cond(p)) or ("timed on a loaded host" if loaded(a) or loaded(p) else None)
            for fig in FIGURES:
                for length, values in sorted(p["requests"].get(fig, {}).items(), key=lambda kv: int(kv[0])):
                    base = a["requests"].get(fig, {}).get(length, [])
                    test = ratio_test(base, values, 0.95)
                    head = f"{part['phase']}-{part['run']} {name} {fig} @{length}"
                    if test is None:
                        apart += 1
                        lines.append(f"{head}: no interval (too few repeats)")
                        continue
                    change = (test.ratio - 1) * 100
                    figures = (f"packed {_median(values):.2f} vs alone {_median(base):.2f}: {change:+.1f}% "
                               f"[{(test.low - 1) * 100:+.1f}, {(test.high - 1) * 100:+.1f}]")
                    if why:  # shown, not counted: the two were not timed alike
                        apart += 1
                        lines.append(f"{head}: not comparable ({why}); {figures}")
                        continue
                    worst = max(worst or 0.0, abs(change))
                    lines.append(f"{head}: {figures}")
    return lines, worst, apart


def _median(xs: list[float]) -> float:
    import statistics

    return statistics.median(xs)


def control_summary(parts: list[dict]) -> tuple[list[str], float | None, int]:
    """Per packed run the control's latency checks: (lines, the largest |change| %, runs where every
    latency check of the control passed)."""
    lines, worst, passed = [], None, 0
    for part in parts:
        checks = part["control_checks"]
        ok = bool(checks) and all(c["status"] == "pass" for c in checks)
        passed += ok
        head = f"{part['phase']}-{part['run']} control {part['control']}"
        skipped: dict[str, int] = {}
        for c in checks:
            if c["status"] == "skip":  # not comparable: one line for every check of the run with that reason
                skipped[c["detail"]] = skipped.get(c["detail"], 0) + 1
                continue
            worst = max(worst or 0.0, abs(c["change"])) if c["change"] is not None else worst
            lines.append(f"{head} {c['metric']}: {c['status']}: {c['detail']}")
        lines += [f"{head}: {n} latency check(s) {why}" for why, n in skipped.items()]
    return lines, worst, passed


def cut_parts(work: Path, baseline: str, control: str | None) -> dict[str, dict]:
    """The parts of phases whose run a time limit cut before the bench saved them, from what their run
    folders hold: the variants that finished count, the rest (not "ok") are left out as any failed one is;
    the wall is the span of the run's recorded phases."""
    out = {}
    for folder in sorted(p for p in work.glob("*-[0-9]*") if p.is_dir()):
        phase, _, k = folder.name.rpartition("-")
        runs = sorted(p for p in folder.iterdir() if (p / "run.json").exists())
        if phase not in ("packed", "stop", "alone") or not runs or (work / "parts" / f"{folder.name}.json").exists():
            continue
        spans = [json.loads(line) for line in (runs[-1] / "phases.jsonl").read_text().splitlines() if line.strip()]
        wall = max(r["end"] for r in spans) - min(r["start"] for r in spans) if spans else float("nan")
        judged = control if phase != "alone" else None  # the alone phase's control is not judged there
        out[folder.name] = {**part_of(phase, int(k), runs[-1], wall, baseline, judged), "cut": True}
        states = ", ".join(f"{n} {v['status']}" for n, v in out[folder.name]["variants"].items())
        print(f"{folder.name}: cut before the bench saved it; read from its run folder ({states})")
    return out


def report(work: Path, measured: list[str], long: int, baseline: str, control: str | None) -> str:
    parts = {p.stem: json.loads(p.read_text()) for p in sorted((work / "parts").glob("*.json"))}
    parts = dict(sorted({**parts, **cut_parts(work, baseline, control)}.items()))
    packed = [v for k, v in parts.items() if not k.startswith("alone")]
    alone = parts.get("alone-1")
    for part in packed + ([alone] if alone else []):
        print(f"{part['phase']}-{part['run']}: {part['wall_s']} s; " + "; ".join(
            f"{n} {describe(v['timing'])}" for n, v in part["variants"].items()))
    lines, control_max, passed = control_summary(packed)
    evidence, busiest, beside_long = busy_evidence(packed, long)
    pairs, worst, apart = packed_vs_alone(packed, alone, measured) if alone else ([], None, 0)
    for line in lines + evidence + pairs:
        print(line)
    ran = [n for n in measured if alone and alone["variants"].get(n, {}).get("status") == "ok"] if alone else \
        [n for n in measured if any(p["variants"].get(n, {}).get("status") == "ok" for p in packed)]
    met = (passed == len(packed) > 0 and control_max is not None and control_max <= TARGET_PCT
           and worst is not None and worst <= TARGET_PCT and apart == 0 and beside_long > 0)
    fmt = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
    print(f"runs in {work}")
    return (f"RESULT bench=latency_isolation variants={len(ran)} control_max_change_pct={fmt(control_max)} "
            f"packed_vs_alone_max_pct={fmt(worst)} runs={len(packed)} control_passed={passed}/{len(packed)} "
            f"not_comparable={apart} busy_prefill_tokens={busiest} timed_beside_long={beside_long} target_met={met}")


# ---------------------------------------------------------------- command line


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", nargs="?", type=Path)
    ap.add_argument("-w", "--work-dir", type=Path, required=True, help="where runs and parts are kept")
    ap.add_argument("--phase", choices=["packed", "stop", "alone"], help="run this phase only (its next run)")
    ap.add_argument("--report", action="store_true", help="combine the saved parts, run nothing")
    ap.add_argument("--busy", action="append", default=[], metavar="VARIANT", help="a neighbour, not measured")
    ap.add_argument("--long", type=int, help="prompt tokens a neighbour's request in flight counts as long from")
    ap.add_argument("--demo", action="store_true", help="on this CPU: a small model, two variants")
    ap.add_argument("--model", type=Path, help="--demo's model folder (default: configs/base/cpu.yaml's)")
    args = ap.parse_args(argv)
    if not args.config and not args.demo:
        ap.error("give CONFIG or --demo")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work = args.work_dir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    config = demo_config(work, args.model) if args.demo else args.config
    measured, baseline, control = roles(config, args.busy)
    long = args.long or long_prompt(config)
    if not args.report:
        phases = [args.phase] if args.phase else ["packed"] * PACKED_RUNS + ["stop", "alone"]
        for phase in phases:
            run_phase(config, work, phase, args.busy)
    if args.report or not args.phase:
        print(report(work, measured, long, baseline, control))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
