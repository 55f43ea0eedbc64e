"""The capacity pass's own cost: the pass against the load generator alone, on one server, same levels.

One `vllm serve` (evalsuite's server engine, loopback, with its key) serves both sides:
- alone: `vllm bench serve` once per level, the very commands the pass builds, one after another
  in one resident load generator as the pass's, nothing else (no /metrics sampling, no host load,
  no records);
- pass: the capacity task's sweep over the same levels (evalsuite.capacity), which adds reading
  /metrics every interval while each level runs, the host's load at both ends, the level's record
  (fsync'd), the saved result compressed, and a health check after each level.
Its time per side is the wall time of the whole sweep, each side's load generator started within it. `--rounds 2` runs alone, pass, pass, alone,
so drift in a shared machine's load favours neither side; an untimed level first warms the server
(a CPU engine compiles for the shapes it first meets). The target: pass_s / alone_s <= 1.05.
Both sides' throughput per level is printed too: /metrics read while the engine works must not
slow it (on 2 shared cores the API server that answers it competes with the engine for a CPU).

    .venv/bin/python bench/capacity_overhead.py [--model DIR] [--levels 1,2,4] [--prompt-tokens 128]
        [--output-tokens 16] [--requests 100] [--rounds 2] [--interval 1.0] [--engine-arg KEY=VALUE]

The last line printed is the RESULT line.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from mmlu_vs_lmeval import default_model  # noqa: E402  (the same model choice as the other benches)
from niah_schedule import engine_arg  # noqa: E402  (one KEY=VALUE parser for the benches)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="model folder (default: the benches' default model)")
    ap.add_argument("--levels", default="1,2,4", help="concurrency levels, comma-separated")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--output-tokens", type=int, default=16)
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=2, choices=(1, 2))
    ap.add_argument("--interval", type=float, default=1.0, help="the pass's /metrics interval, seconds")
    ap.add_argument("--engine-arg", type=engine_arg, action="append", default=[])
    return ap.parse_args()


def start_server(model: str, work: Path, extra: dict):
    from evalsuite.engine.factory import make_engine
    from evalsuite.run.config import EngineConfig

    kwargs = {"dtype": "bfloat16", "max_model_len": 4096, "max_num_batched_tokens": 512, "seed": 0,
              "enable_prefix_caching": True, "kv_cache_memory_bytes": 1 << 30, **extra}
    from evalsuite.core.env import gpu_names
    from evalsuite.data.assets import default_cache_dir

    env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    if not gpu_names() and (os.cpu_count() or 1) > 1:  # as configs/cpu-capacity.yaml: the load generator's core apart
        env["VLLM_CPU_OMP_THREADS_BIND"] = "0"
    launch = EngineConfig(mode="server", env=env)

    engine = make_engine(launch, model, kwargs, work / "engine.log", default_cache_dir())
    engine.start()
    return engine


def task_for(args, work: Path):
    from evalsuite.capacity.config import MAX_SLO_MS, CapacityConfig  # an SLO no level can miss
    from evalsuite.capacity.task import CapacityTask
    from evalsuite.tasks.base import TaskContext

    cfg = CapacityConfig(prompt_tokens=[args.prompt_tokens], output_tokens=args.output_tokens,
                         concurrency=[int(x) for x in args.levels.split(",")], requests=args.requests,
                         metrics_interval_s=args.interval, slo={"ttft_p90_ms": MAX_SLO_MS, "itl_p90_ms": MAX_SLO_MS})
    return cfg, CapacityTask(cfg, TaskContext(base_dir=work, cache_dir=work))


def alone(cfg, engine, work: Path, tag: str) -> tuple[float, list[float]]:
    """The load generator alone: each level's command, as the pass would build it, one after another."""
    from evalsuite.capacity.loadgen import Resident, bench_command

    base_url, key, model = engine.endpoint()
    tokenizer = engine.kwargs.get("tokenizer") or engine.model
    out = work / f"alone-{tag}"
    out.mkdir()
    loadgen = Resident(key, out / "loadgen.log")  # resident, as the pass's: neither side pays vLLM's import a level
    rates, t0 = [], time.perf_counter()
    try:
        for x in cfg.levels:
            cmd = bench_command(cfg, base_url, model, tokenizer, cfg.prompt_tokens[0], x, out / f"c{x:g}.json", 0)
            run = loadgen.run(cmd, out / f"c{x:g}.log", cfg.timeout_s)
            if run.summary is None:
                raise SystemExit(f"alone: level {x:g} saved no result: {run.output_tail[-500:]}")
            rates.append(run.summary["request_throughput"])
        return time.perf_counter() - t0, rates
    finally:
        loadgen.close()


def through_pass(task, engine, work: Path, tag: str) -> tuple[float, list[float], float]:
    """The capacity pass over the same levels, recording as a run does: `work` as a run folder, each
    round a variant of it (the pass keeps its files in the folder its engine logs into).
    Returns (wall, req/s per level, seconds inside the load generator)."""
    from evalsuite.core.rundir import RunDir

    variant = f"pass-{tag}"
    (work / variant).mkdir()
    engine.log_path = work / variant / "engine.log"
    rd = RunDir(work)
    t0 = time.perf_counter()
    scores = task.evaluate(engine, None, lambda rows: rd.write_samples(variant, task.name, rows))
    wall = time.perf_counter() - t0
    levels = [s.extra for s in scores]
    if any(lv["status"] != "ok" for lv in levels):
        raise SystemExit(f"pass: a level broke: {[lv['reason'] for lv in levels if lv['status'] != 'ok']}")
    return wall, [lv["req_per_s"] for lv in levels], sum(lv["loadgen"]["wall_s"] for lv in levels)


def main() -> None:
    args = parse_args()
    model = args.model or default_model()
    with tempfile.TemporaryDirectory(prefix="capacity-overhead-") as tmp:
        work = Path(tmp)
        engine = start_server(model, work, dict(args.engine_arg))
        try:
            cfg, _ = task_for(args, work)
            warm, _ = task_for(argparse.Namespace(**{**vars(args), "levels": args.levels.split(",")[-1]}), work)
            alone(warm, engine, work, "warmup")  # untimed: first shapes compiled, caches filled
            order = ["alone", "pass"] if args.rounds == 1 else ["alone", "pass", "pass", "alone"]
            walls = {"alone": [], "pass": []}
            rates = {"alone": [], "pass": []}
            inside = []
            load = [os.getloadavg()[0]]
            for i, side in enumerate(order):
                if side == "alone":
                    wall, r = alone(cfg, engine, work, str(i))
                else:
                    _, task = task_for(args, work)  # a fresh task: nothing recorded yet
                    wall, r, gen = through_pass(task, engine, work, str(i))
                    inside.append(gen)
                walls[side].append(wall)
                rates[side].append(r)
                load.append(os.getloadavg()[0])
                print(f"{side:5s} round {i}: {wall:7.1f} s, req/s per level {[f'{x:.2f}' for x in r]}", flush=True)
        finally:
            engine.close()
    report(args, walls, rates, inside, load)


def report(args, walls: dict, rates: dict, inside: list[float], load: list[float]) -> None:
    a, p = sum(walls["alone"]), sum(walls["pass"])
    outside = p - sum(inside)
    per_level = [statistics.mean(x) for x in zip(*rates["alone"], strict=True)], \
        [statistics.mean(x) for x in zip(*rates["pass"], strict=True)]
    slowdown = max(1 - q / r for r, q in zip(*per_level, strict=True)) * 100
    overhead = (p / a - 1) * 100
    print(f"alone {a:.1f} s, pass {p:.1f} s ({outside:.1f} s of it outside the load generator); "
          f"req/s per level alone {[f'{x:.2f}' for x in per_level[0]]}, pass {[f'{x:.2f}' for x in per_level[1]]}; "
          f"1-min load {min(load):.1f}-{max(load):.1f} on {os.cpu_count()} CPUs")
    print(f"RESULT bench=capacity_overhead levels={args.levels} requests={args.requests} rounds={args.rounds} "
          f"alone_s={a:.1f} pass_s={p:.1f} overhead_pct={overhead:.2f} outside_loadgen_pct={outside / a * 100:.2f} "
          f"worst_level_req_per_s_drop_pct={slowdown:.2f} load_1m_max={max(load):.1f} cpus={os.cpu_count()} "
          f"target_pct=5 ok={overhead <= 5}")


if __name__ == "__main__":
    main()
