"""The latency pass with the neighbours paused against today's restarted engine alone: the same figures?

One packed run (`--parallel`) times each variant's latency pass in one of two ways
(`timing.quiet`): `restart`, a second engine per variant alone on the device after the
packed tasks (the figures every published page holds), or `pause`, the variant's own packed
engine with the other engines on its device stopped meanwhile (no second start). The bench runs
the same config both ways, `--rounds` times in the order restart, pause, pause, restart (a drift in
the machine's load favours neither). Per variant, figure (TTFT, ITL) and prompt length it sets the
p50 over the repeats, the figure the records, report and gate carry, paused against restarted
(each the mean over its mode's runs), beside the noise: the largest difference between two runs of
one mode. `agree=1` where no change exceeds its noise. The paired t interval over the requests of
the first run of each mode (evalsuite.stats.timing) is printed too: on a loaded host a few slow
requests move a mean far more than a median, so it informs and does not decide.

On a CPU the packed engines would each compute on a share of the cores (the run's own `auto`
restarts there for that reason): the bench binds every engine, both ways, to all the cores it
may use, so that a paused neighbour leaves the timed engine what a restarted one has.

    .venv/bin/python bench/latency_pause.py CONFIG [-V VARIANT ...] [--parallel 2] [--rounds 1] [--work-dir DIR]
    .venv/bin/python bench/latency_pause.py --demo      # CPU: the demo model, two variants

The last line printed is the RESULT line.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import ray_fanout  # noqa: E402  (run(): `evalsuite run` in a subprocess, its wall time and run.json)

FIGURES = ("ttft_ms", "itl_ms")


def demo_config(work: Path) -> tuple[Path, list[str]]:
    """The demo's model (configs/cpu-smoke.yaml) under two variants, a needle grid for the neighbour
    to be busy with, and a latency pass of two lengths and eight repeats (a p50 a burst of the
    host's other work does not move)."""
    cfg = {"include": str(ROOT / "configs" / "cpu-smoke.yaml"),
           "variants": {"bf16": {}, "bf16_again": {}},
           "tasks": [{"type": "needle", "lengths": [512, 1024], "depths": [0.0, 0.5, 1.0]}],
           "latency": {"prompt_tokens": [128, 512], "output_tokens": 8, "repeats": 8}}
    path = work / "demo.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path, ["bf16", "bf16_again"]


def mode_config(config: Path, work: Path, mode: str) -> Path:
    """CONFIG with its latency pass timed `mode`, tracking off; on a CPU every engine on every core."""
    from evalsuite.core import env as envmod
    from evalsuite.run.config import load_config

    extra: dict = {"include": config.name, "tracking": {"enabled": False}, "timing": {"quiet": mode}}
    if envmod.device_name().startswith("CPU"):
        cores = ",".join(map(str, sorted(os.sched_getaffinity(0))))
        extra["engine"] = {"env": {**load_config(config).engine.env, "VLLM_CPU_OMP_THREADS_BIND": cores}}
    path = config.resolve().parent / f".{config.stem}-latency_pause-{mode}.yaml"
    path.write_text(yaml.safe_dump(extra))
    return path


def timings(run_dir: Path) -> dict[str, dict[str, dict[str, float]]]:
    """variant -> figure -> request id -> value, from the latency pass's samples."""
    from evalsuite.core.rundir import RunDir

    rd, out = RunDir(run_dir), defaultdict(lambda: defaultdict(dict))
    for f in run_dir.glob("*/samples/latency.jsonl"):
        for row in rd.load_samples(f.parent.parent.name, "latency"):
            for fig in FIGURES:
                value = row["score"]["extra"].get(fig)
                if value is not None:
                    out[f.parent.parent.name][fig][row["sample"]["id"]] = value
    return out


def p50s(run: dict, variant: str, fig: str) -> dict[str, float]:
    """Per prompt length (a request id is len<N>-r<k>), the median over its repeats: the figure the
    run's records, report and gate give."""
    by: dict[str, list[float]] = defaultdict(list)
    for rid, value in run[variant][fig].items():
        by[rid.split("-")[0]].append(value)
    return {length: statistics.median(values) for length, values in by.items()}


def compare(runs: dict[str, list[dict]], variants: list[str]) -> tuple[bool, list[str]]:
    """Per variant, figure and prompt length: the p50 with the neighbours paused against the p50 on a
    restarted engine (each the mean over that mode's runs), and the noise, the largest difference
    between two runs of the same mode. The paired t interval over every request (evalsuite.stats.timing)
    is printed beside it; on a loaded host a few slow requests dominate a mean, so it is not what
    `agree` reads."""
    from evalsuite.stats.timing import paired_timing_interval

    agree, parts = True, []
    for v, fig in ((v, fig) for v in variants for fig in FIGURES):
        by_mode = {m: [p50s(r, v, fig) for r in runs[m]] for m in ("restart", "pause")}
        for length in sorted(by_mode["restart"][0], key=lambda x: int(x.removeprefix("len"))):
            seen = {m: [p[length] for p in ps if length in p] for m, ps in by_mode.items()}
            base = statistics.mean(seen["restart"])
            change = (statistics.mean(seen["pause"]) - base) / base * 100
            noise = max((max(x) - min(x)) / base * 100 for x in seen.values())
            ok = abs(change) <= noise
            agree &= ok
            shared = {i: r for i, r in runs["restart"][0][v][fig].items() if i.startswith(length + "-")}
            paired = paired_timing_interval("change_pct", shared, {i: runs["pause"][0][v][fig][i] for i in shared}, 0.95)
            print(f"{v} {fig} {length}: p50 restart {', '.join(f'{x:.1f}' for x in seen['restart'])}, pause "
                  f"{', '.join(f'{x:.1f}' for x in seen['pause'])}: {change:+.1f}% (noise {noise:.1f}%)"
                  + (f"; paired means, first runs: [{paired.low:+.1f}, {paired.high:+.1f}]%" if paired else "")
                  + ("" if ok else "   <- beyond the noise"))
            parts.append(f"{v}.{fig}.{length}={change:+.1f}/{noise:.1f}")
    return agree, parts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", nargs="?", type=Path)
    ap.add_argument("-V", "--variant", action="append", default=[], dest="variants")
    ap.add_argument("--parallel", default="2")
    ap.add_argument("--rounds", type=int, default=1, help="each round: restart, pause, pause, restart")
    ap.add_argument("--demo", action="store_true", help="the demo model on this CPU, two variants")
    ap.add_argument("--work-dir", type=Path, help="keep the runs here (default: a temporary folder, kept)")
    args = ap.parse_args()
    if not args.config and not args.demo:
        ap.error("give CONFIG or --demo")
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="latency_pause-"))
    work.mkdir(parents=True, exist_ok=True)
    config, variants = demo_config(work) if args.demo else (args.config, args.variants)
    configs = {m: mode_config(config, work, m) for m in ("restart", "pause")}
    runs: dict[str, list[dict]] = {"restart": [], "pause": []}
    try:
        for r in range(args.rounds):
            for i, mode in enumerate(("restart", "pause", "pause", "restart")):
                wall, record = ray_fanout.run(configs[mode], variants, work / f"{mode}-{r}-{i}", None,
                                              ("--parallel", args.parallel))
                runs[mode].append(timings(record["dir"]))
                paused = {v["variant"]: (v.get("placement") or {}).get("paused_for_latency") for v in record["variants"]}
                print(f"{mode} run {r}.{i}: {wall:.1f} s; paused for each latency pass: {paused}", flush=True)
    finally:
        for path in configs.values():
            path.unlink(missing_ok=True)
    variants = variants or sorted(runs["restart"][0])
    agree, parts = compare(runs, variants)
    print(f"runs in {work}")
    print(f"RESULT bench=latency_pause variants={len(variants)} rounds={args.rounds} agree={int(agree)} "
          f"change_over_noise_pct={','.join(parts)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
