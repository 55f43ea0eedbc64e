"""The latency pass with the neighbours paused against today's restarted engine alone: the same figures?

One packed run (`--parallel`) times each variant's latency pass in one of two ways
(`scheduler.latency_pass`): `restart`, a second engine per variant alone on the device after the
packed tasks (the figures every published page holds), or `pause`, the variant's own packed
engine with the other engines on its device stopped meanwhile (no second start). The bench runs
the same config both ways, `--rounds` times in the order restart, pause, pause, restart (a drift in
the machine's load favours neither), and pairs every timed request by id: per variant and figure
(TTFT, ITL), the change of pause against restart, a paired t interval on the per-request means
(evalsuite.stats.timing, the suite's timing intervals), beside the same change between the two
restart runs, which is the figure's noise. `agree=1` where every pause-vs-restart change is no
larger than the noise seen between restarts, or its interval holds 0.

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
    to be busy with, and a latency pass of two lengths and four repeats."""
    cfg = {"include": str(ROOT / "configs" / "cpu-smoke.yaml"),
           "variants": {"bf16": {}, "bf16_again": {}},
           "tasks": [{"type": "needle", "lengths": [512, 1024], "depths": [0.0, 0.5, 1.0]}],
           "latency": {"prompt_tokens": [128, 512], "output_tokens": 8, "repeats": 4}}
    path = work / "demo.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path, ["bf16", "bf16_again"]


def mode_config(config: Path, work: Path, mode: str) -> Path:
    """CONFIG with its latency pass timed `mode`, tracking off; on a CPU every engine on every core."""
    from evalsuite.core import env as envmod
    from evalsuite.run.config import load_config

    extra: dict = {"include": config.name, "tracking": {"enabled": False}, "scheduler": {"latency_pass": mode}}
    if envmod.device_name().startswith("CPU"):
        cores = ",".join(map(str, sorted(os.sched_getaffinity(0))))
        extra["engine"] = {"env": {**load_config(config).engine.env, "VLLM_CPU_OMP_THREADS_BIND": cores}}
    path = config.resolve().parent / f".{config.stem}-latency_pause-{mode}.yaml"
    path.write_text(yaml.safe_dump(extra))
    return path


def timings(run_dir: Path) -> dict[str, dict[str, dict[str, float]]]:
    """variant -> figure -> request id -> value, from the latency pass's samples."""
    from evalsuite.core.records import RunDir

    rd, out = RunDir(run_dir), defaultdict(lambda: defaultdict(dict))
    for f in run_dir.glob("*/samples/latency.jsonl"):
        for row in rd.load_samples(f.parent.parent.name, "latency"):
            for fig in FIGURES:
                value = row["score"]["extra"].get(fig)
                if value is not None:
                    out[f.parent.parent.name][fig][row["sample"]["id"]] = value
    return out


def mean_over(runs: list[dict], variant: str, fig: str) -> dict[str, float]:
    """Per request id, the mean over runs that timed it in all of them."""
    ids = set.intersection(*(set(r[variant][fig]) for r in runs))
    return {i: sum(r[variant][fig][i] for r in runs) / len(runs) for i in ids}


def compare(runs: dict[str, list[dict]], variants: list[str]) -> tuple[bool, list[str]]:
    from evalsuite.stats.timing import paired_timing_interval

    agree, parts = True, []
    for v in variants:
        for fig in FIGURES:
            restart, pause = mean_over(runs["restart"], v, fig), mean_over(runs["pause"], v, fig)
            shared = set(restart) & set(pause)
            change = paired_timing_interval("change_pct", {i: restart[i] for i in shared},
                                            {i: pause[i] for i in shared}, 0.95)
            first, second = (runs["restart"][k][v][fig] for k in (0, -1))
            noise = paired_timing_interval("change_pct", first, second, 0.95) if len(runs["restart"]) > 1 else None
            if change is None:
                print(f"{v} {fig}: not paired (requests differ)")
                agree = False
                continue
            mid = (change.low + change.high) / 2
            bound = max(abs(noise.low), abs(noise.high)) if noise else 0.0
            ok = change.low <= 0 <= change.high or abs(mid) <= bound
            agree &= ok
            print(f"{v} {fig}: pause vs restart {mid:+.1f}% [{change.low:+.1f}, {change.high:+.1f}] (n={change.n}); "
                  f"restart vs restart {'-' if noise is None else f'[{noise.low:+.1f}, {noise.high:+.1f}]'}"
                  f"{'' if ok else '   <- beyond the noise'}")
            parts.append(f"{v}.{fig}={mid:+.1f}")
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
                paused = {v["variant"]: v.get("placement", {}).get("paused_for_latency") for v in record["variants"]}
                print(f"{mode} run {r}.{i}: {wall:.1f} s; paused for each latency pass: {paused}", flush=True)
    finally:
        for path in configs.values():
            path.unlink(missing_ok=True)
    variants = variants or sorted(runs["restart"][0])
    agree, parts = compare(runs, variants)
    print(f"runs in {work}")
    print(f"RESULT bench=latency_pause variants={len(variants)} rounds={args.rounds} agree={int(agree)} "
          f"change_pct={','.join(parts)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
