"""evalsuite's own overhead: `evalsuite run` against a bare `vllm.LLM.generate` loop, same requests.

Both sides run the same config (one bf16 variant, MMLU and a needle grid, no latency pass, no
MLflow) with the same engine arguments and environment (evalsuite's `make_engine` computes them
once; the bare side only reads them, so both compile the same graphs and find the same kernel
cache). Each side runs in its own process, one after the other, never both at once:
- evalsuite: `python -m evalsuite run CONFIG` as a subprocess. Its time is the sum of the runner's
  per-task `<task>/wall_s` (first request to last sample written: the engine child's IPC,
  scoring, the JSONL records, progress); engine start is `engine.startup_s` from result.json.
  Preflight, tracking and process start are printed apart (`other_s`): they do not grow with
  the item count.
- bare: a child of this script builds the same samples (untimed), constructs `vllm.LLM` in its
  own process (timed: start) and calls `llm.generate` once per task and batch of the same size
  (timed: the work), reading each output's text and nothing else.
`--rounds 2` runs evalsuite, bare, bare, evalsuite and sums, so drift in the load of a shared
machine favours neither side. Before them, `--warmup 1` (the default) runs evalsuite once, untimed:
the first engine of a shape on a machine compiles kernels for the shapes it first meets during the
work, not at start, and the caches it fills on disk serve both sides after it; without the warm-up
that one-time cost falls on whichever side runs first (a tiny model's 2,850 MMLU items: 75.3 s of
work in the first evalsuite round, 11.8 s in the last, the bare rounds between them 11.0-11.4 s).
Greedy decoding, so both sides must give the same text per sample (`same_answers`). The target is ratio = evalsuite_s / bare_s <= 1.05. evalsuite's engine runs with
vLLM's stat logging on (the latency pass's TTFT/ITL and the preemption, prefix-cache and KV-usage
figures come from it); `--bare-log-stats` turns it on in the bare loop too, which separates what vLLM's
own bookkeeping costs from what evalsuite's code costs.

The default size, 57 MMLU items 0-shot (one per subject) and 2 needle cells at 1,024 tokens,
is one engine call per task on each side and minutes of engine work on 2 shared cores, so a
per-call or per-item cost of evalsuite's (IPC, scoring, records) of even 1% shows; on a GPU,
where the same work takes seconds, raise `--mmlu-per-subject` and the needle grid.

    .venv/bin/python bench/overhead.py [--model DIR] [--mmlu-per-subject 1] [--needle-lengths 1024]
        [--needle-depths 0,1] [--needle-seeds 1] [--rounds 1] [--bare-log-stats] [--engine-arg KEY=VALUE]

The last line printed is the RESULT line.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from mmlu_vs_lmeval import default_model  # noqa: E402  (the same model choice as the lm-eval bench)
from niah_schedule import engine_arg  # noqa: E402  (one KEY=VALUE parser for the benches)


def write_config(args, work: Path) -> Path:
    cfg = {
        "model": {"path": args.model, "name": Path(args.model).name},
        "defaults": {"dtype": "bfloat16", "max_model_len": max(args.needle_lengths) + 512,
                     "enable_prefix_caching": True, "max_num_batched_tokens": 512,
                     "engine_args": {"kv_cache_memory_bytes": 1 << 30, **dict(args.engine_arg)}},
        "engine": {"env": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}},
        "variants": {"bf16": {}},
        "baseline": "bf16",
        "tasks": [{"type": "mmlu", "num_fewshot": args.mmlu_shots, "limit_per_subject": args.mmlu_per_subject},
                  {"type": "needle", "lengths": args.needle_lengths, "depths": args.needle_depths,
                   "seeds": args.needle_seeds}],
        "tracking": {"enabled": False},
        "output_dir": str(work / "runs"),
        "seed": 0,
    }
    path = work / "overhead.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def run_evalsuite(config: Path, work: Path, round_no: int) -> dict:
    out = work / f"runs-{round_no}"
    log = work / f"evalsuite-{round_no}.log"
    t0 = time.perf_counter()
    with log.open("w") as fh:
        proc = subprocess.run([sys.executable, "-m", "evalsuite", "run", str(config), "-o", str(out), "--no-progress"],
                              stdout=fh, stderr=subprocess.STDOUT)
    total = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"evalsuite run failed (exit {proc.returncode}); log {log}")
    (run_dir,) = [p for p in out.iterdir() if (p / "run.json").exists()]
    result = json.loads((run_dir / "bf16" / "result.json").read_text())
    if result["status"] != "ok":
        sys.exit(f"evalsuite variant bf16 {result['status']}: {result.get('reason')}")
    walls = {m["name"].split("/")[0]: m["value"] for m in result["metrics"] if m["name"].endswith("/wall_s")}
    answers = {}
    for path in (run_dir / "bf16" / "samples").glob("*.jsonl"):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            answers[row["sample"]["id"]] = row["completion"]["text"]
    work_s = sum(walls.values())
    start = result["engine"]["startup_s"]
    return {"work_s": work_s, "start_s": start, "total_s": total, "other_s": total - work_s - start,
            "tasks": walls, "answers": answers}


def run_bare(config: Path, work: Path, round_no: int, log_stats: bool = False) -> dict:
    out = work / f"bare-{round_no}.json"
    log = work / f"bare-{round_no}.log"
    with log.open("w") as fh:
        proc = subprocess.run([sys.executable, __file__, "--bare-worker", str(config), "--bare-out", str(out),
                               *(["--bare-log-stats"] if log_stats else [])],
                              stdout=fh, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        sys.exit(f"bare loop failed (exit {proc.returncode}); log {log}:\n{tail}")
    return json.loads(out.read_text())


def bare_worker(config: Path, out: Path, log_stats: bool = False) -> None:
    """The bare side. evalsuite code only prepares (requests, engine arguments), untimed."""
    from evalsuite.data.assets import default_cache_dir
    from evalsuite.run.config import load_config
    from evalsuite.engine.factory import make_engine
    from evalsuite.run.engine_args import engine_args
    from evalsuite.run.items import preflight
    from evalsuite.run.session import load_tokenizer, resolve_model
    from evalsuite.tasks.base import TaskContext

    cfg = load_config(config)
    cache = default_cache_dir()
    model_dir = resolve_model(cfg, config.parent, cache)
    ctx = TaskContext(base_dir=config.parent, cache_dir=cache, seed=cfg.seed, tokenizer=load_tokenizer(cfg, model_dir),
                      max_model_len=cfg.variants["bf16"].max_model_len)
    tasks, samples = preflight(cfg, ctx)
    spec = make_engine(cfg.engine, *engine_args(cfg, cfg.variants["bf16"], model_dir), out.with_suffix(".unused"), cache)
    os.environ.update(spec.env)
    from vllm import LLM

    # evalsuite's own request-to-vLLM conversion, so that both sides send vLLM the same prompts and
    # parameters by construction
    from evalsuite.engine.vllm_offline import _prompt, _sampling

    t0 = time.perf_counter()
    llm = LLM(model=spec.model, disable_log_stats=not log_stats, **spec.kwargs)
    start = time.perf_counter() - t0
    size, walls, answers = cfg.engine.batch_size, {}, {}
    for task in tasks:
        reqs = [s.request for s in samples[task.name]]
        t1 = time.perf_counter()
        texts = []
        for i in range(0, len(reqs), size):
            batch = reqs[i:i + size]
            prompts, params = [_prompt(r) for r in batch], [_sampling(r) for r in batch]
            texts += [o.outputs[0].text for o in llm.generate(prompts, params, use_tqdm=False)]
        walls[task.name] = time.perf_counter() - t1
        answers.update({s.id: t for s, t in zip(samples[task.name], texts, strict=True)})
    out.write_text(json.dumps({"work_s": sum(walls.values()), "start_s": start, "tasks": walls, "answers": answers,
                               "items": {t.name: len(samples[t.name]) for t in tasks}}))
    sys.stdout.flush()
    os._exit(0)  # vLLM's atexit teardown is not part of either side


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bare-worker", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--bare-out", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--model", help="model folder (default: as bench/mmlu_vs_lmeval.py, SmolLM2-135M on a fresh machine)")
    p.add_argument("--mmlu-per-subject", type=int, default=1, help="MMLU items per subject (57 subjects)")
    p.add_argument("--mmlu-shots", type=int, default=0)
    p.add_argument("--needle-lengths", default="1024", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--needle-depths", default="0,1", type=lambda s: [float(x) for x in s.split(",")])
    p.add_argument("--needle-seeds", type=int, default=1)
    p.add_argument("--rounds", type=int, default=1, choices=[1, 2], help="2: evalsuite, bare, bare, evalsuite")
    p.add_argument("--warmup", type=int, default=1, choices=[0, 1],
                   help="1: one untimed evalsuite run first, so that one-time compilation counts for neither side")
    p.add_argument("--engine-arg", action="append", default=[], metavar="KEY=VALUE", type=engine_arg,
                   help="vLLM engine argument for both sides, VALUE as JSON where it parses; repeatable")
    p.add_argument("--bare-log-stats", action="store_true",
                   help="the bare loop keeps vLLM's stat logging on, as evalsuite's engine does (its TTFT/ITL, "
                        "preemption and prefix-cache figures need it): separates that cost from evalsuite's own")
    p.add_argument("--work-dir", type=Path, help="keep config, runs and logs here (default: a temp dir)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.bare_worker:
        bare_worker(args.bare_worker, args.bare_out, args.bare_log_stats)
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args.model = args.model or default_model()
    with tempfile.TemporaryDirectory(prefix="overhead-bench-") as tmp:
        work = args.work_dir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        config = write_config(args, work)
        sequence = ["warmup"] * args.warmup + ["evalsuite", "bare"] + (["bare", "evalsuite"] if args.rounds > 1 else [])
        runs: dict[str, list[dict]] = {"evalsuite": [], "bare": [], "warmup": []}
        for i, side in enumerate(sequence):
            r = run_bare(config, work, i, args.bare_log_stats) if side == "bare" else run_evalsuite(config, work, i)
            tasks = " ".join(f"{k}={v:.2f}" for k, v in r["tasks"].items())
            extra = f" items {r['items']}" if side == "bare" else f" other {r['other_s']:.1f} s"
            what = "warm-up, not counted" if side == "warmup" else side
            print(f"# {what}: start {r['start_s']:.1f} s, work {r['work_s']:.2f} s ({tasks}){extra}", flush=True)
            runs[side].append(r)
    runs.pop("warmup")
    return report(args, runs)


def report(args, runs: dict[str, list[dict]]) -> int:
    answers = [r["answers"] for rs in runs.values() for r in rs]
    same = all(a == answers[0] for a in answers)
    if not same:
        ids = [k for k in answers[0] if any(a.get(k) != answers[0][k] for a in answers[1:])]
        print(f"# answers differ on {len(ids)} of {len(answers[0])} samples, e.g. {ids[:3]}")
    es = sum(r["work_s"] for r in runs["evalsuite"])
    bare = sum(r["work_s"] for r in runs["bare"])
    start_es = sum(r["start_s"] for r in runs["evalsuite"]) / len(runs["evalsuite"])
    start_bare = sum(r["start_s"] for r in runs["bare"]) / len(runs["bare"])
    print(f"RESULT bench=overhead items={len(answers[0])} evalsuite_s={es:.2f} bare_s={bare:.2f} ratio={es / bare:.3f} "
          f"start_evalsuite_s={start_es:.1f} start_bare_s={start_bare:.1f} same_answers={same} "
          f"bare_log_stats={args.bare_log_stats}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
