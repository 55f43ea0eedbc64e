"""Two variants at once on a Ray cluster vs the same two one after another, in one run.

Both modes are `evalsuite run` as a user runs it, in a subprocess each, on the same config and
variants: `--ray ADDRESS` (each variant a Ray task on GPUs of its own) and the local path (one
after another). The wall time of each command is what a user waits for, engine starts, Ray's own
start and the driver's preparation included; the span from the first variant's start to the last
one's end (from run.json) leaves out what happens before the first engine starts. Tracking is off
in both so MLflow does not enter the timing. The concurrent mode runs first: a warm compile cache
or page cache then helps the sequential mode, so the speedup errs low. Both modes must score the
samples alike (`same_scores`, per sample id over the task items; latency rows are timings).

On two GPUs, expect near 2 minus the engine starts that do not overlap. On this CPU (no GPU) the
two engines share the cores, so expect about 1: the CPU run only checks that the bench works.

    .venv/bin/python bench/ray_fanout.py CONFIG [-V A -V B] [--ray ADDRESS]   # default: local
    .venv/bin/python bench/ray_fanout.py --tiny                               # CPU, tiny model

The last line printed is the RESULT line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import yaml


def tiny_config(work: Path) -> Path:
    from evalsuite.data.assets import default_cache_dir
    from evalsuite.models.tiny import build_tiny_llama

    model = build_tiny_llama(default_cache_dir() / "test-models" / "tiny-llama-seed0")
    cfg = {
        "model": {"path": str(model)},
        "defaults": {"dtype": "bfloat16", "max_model_len": 1024, "enforce_eager": True,
                     "engine_args": {"kv_cache_memory_bytes": 32 * 2**20}},
        "engine": {"batch_size": 8, "env": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}},
        "variants": {"a": {}, "b": {"enable_prefix_caching": False}},
        "tasks": [{"type": "mmlu", "subjects": ["abstract_algebra", "anatomy"], "limit_per_subject": 10,
                   "num_fewshot": 2}],
        "latency": {"prompt_tokens": [64], "output_tokens": 8, "repeats": 2},
    }
    path = work / "fanout.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def wrapped(config: Path, out: Path) -> Path:
    """The config with tracking off and runs under `out`. It sits beside the config (hidden, removed
    afterwards) because relative paths in a config resolve against the config file's folder."""
    path = config.resolve().parent / f".{config.stem}-ray_fanout.yaml"
    path.write_text(yaml.safe_dump({"include": config.name, "tracking": {"enabled": False}, "output_dir": str(out)}))
    return path


def run(config: Path, variants: list[str], out: Path, ray: str | None, extra: tuple[str, ...] = ()) -> tuple[float, dict]:
    """`evalsuite run` in a subprocess: its wall time, and its run.json with the run folder as `dir`."""
    args = [sys.executable, "-m", "evalsuite", "run", str(config), "--no-progress", "-o", str(out)]
    args += [a for v in variants for a in ("-V", v)] + (["--ray", ray] if ray else []) + list(extra)
    t0 = time.perf_counter()
    res = subprocess.run(args, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{res.stderr[-3000:]}")
    (run_dir,) = [p for p in out.iterdir() if (p / "run.json").exists()]
    return wall, {"dir": run_dir, **json.loads((run_dir / "run.json").read_text())}


def span_s(record: dict) -> float:
    starts, ends = [], []
    for v in record["variants"]:
        start = datetime.fromisoformat(v["started_at"].replace("Z", "+00:00"))
        starts.append(start)
        ends.append(start + timedelta(seconds=v["duration_s"] or 0))
    return (max(ends) - min(starts)).total_seconds()


def scores(run_dir: Path, variant: str) -> dict[str, float]:
    out = {}
    for f in (run_dir / variant / "samples").glob("*.jsonl"):
        if f.stem == "latency":
            continue
        for line in f.read_text().splitlines():
            row = json.loads(line)
            out[row["sample"]["id"]] = row["score"]["value"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", nargs="?", type=Path, help="A config with at least two variants.")
    ap.add_argument("-V", "--variant", action="append", default=[], help="The two variants (default: the first two).")
    ap.add_argument("--ray", default="local", help="Ray address for the concurrent run (default: start one here).")
    ap.add_argument("--tiny", action="store_true", help="The tiny random model on CPU, to check the bench runs.")
    args = ap.parse_args()
    if not args.config and not args.tiny:
        ap.error("give CONFIG or --tiny")
    work = Path(tempfile.mkdtemp(prefix="ray_fanout-"))
    config = tiny_config(work) if args.tiny else wrapped(args.config, work)
    try:
        from evalsuite.run.config import load_config

        variants = args.variant or list(load_config(config).variants)[:2]
        if len(variants) != 2:
            sys.exit(f"need two variants, got {variants}")
        conc_s, conc = run(config, variants, work / "concurrent", args.ray)
        seq_s, seq = run(config, variants, work / "sequential", None)
    finally:
        if not args.tiny:
            config.unlink(missing_ok=True)
    report(variants, conc_s, conc, seq_s, seq)


def report(variants: list[str], conc_s: float, conc: dict, seq_s: float, seq: dict) -> None:
    status = {r["variant"]: r["status"] for r in conc["variants"] + seq["variants"]}
    for name, rec in (("concurrent", conc), ("sequential", seq)):
        for v in rec["variants"]:
            print(f"{name:10s} {v['variant']}: {v['status']}, {v['duration_s'] or 0:.1f} s "
                  f"(engine start {v['engine'].get('startup_s') or 0:.1f} s) on "
                  f"{((rec.get('scheduling') or {}).get('nodes') or {}).get(v['variant'], 'this machine')}")
    agree = total = 0
    for v in variants:
        a, b = scores(conc["dir"], v), scores(seq["dir"], v)
        total += len(a)
        agree += sum(a[k] == b.get(k) for k in a)
    gpus = conc["env"].get("gpus") or []
    print(f"wall: concurrent {conc_s:.1f} s, sequential {seq_s:.1f} s; variant span: concurrent {span_s(conc):.1f} s, "
          f"sequential {span_s(seq):.1f} s; runs in {conc['dir'].parent.parent}")
    ok = all(s == "ok" for s in status.values())
    print(f"RESULT bench=ray_fanout variants={','.join(variants)} all_ok={int(ok)} gpus={len(gpus)} "
          f"sequential_s={seq_s:.1f} concurrent_s={conc_s:.1f} span_speedup={span_s(seq) / span_s(conc):.3f} "
          f"same_scores={agree / max(total, 1):.3f} speedup={seq_s / conc_s:.3f}")


if __name__ == "__main__":
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    main()
