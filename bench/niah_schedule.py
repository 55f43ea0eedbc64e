"""Needle grid, naive order vs shared-prefix schedule, on the same engine settings.

What is compared, and why it is fair:
- The same prompts: both orders come from the needle task with only `schedule` changed, and
  the bench checks that every sample id maps to the same token ids in both.
- The same engine settings, prefix caching ON for both: the question is what the order buys
  on an engine that caches, not what caching buys. Without caching the order cannot matter.
- A fresh engine per order (OfflineEngine exposes no cache reset), so neither order starts
  with blocks the other computed. Each engine first answers one request of random tokens
  (no prefix in common with the grid) so first-call overheads are not charged to one order.
- The same batching for both. By default the whole grid goes in one generate call, as the
  runner sends it with its default batch size (256 >= cells): vLLM still admits requests in
  submission order and registers a request's prompt blocks in the prefix cache as soon as it
  is scheduled, so the order matters inside a batch too. `--batch-size 1` shows the
  one-request-at-a-time case (the most reuse, the least parallelism).
- Only generation is timed (engine start excluded). Greedy decoding, so the answers of the
  two orders must be identical; `same_answers` compares them per sample id.
- Eager mode by default (`--compile` to turn torch.compile on): on a shared 2-core machine the
  compile warm-up alone took minutes, and it is the same for both orders.
- The work itself is also reported as `uncached_prompt_tokens` (prompt tokens the engine really
  computed, from each request's cached-token count), which does not depend on machine load.

    .venv/bin/python bench/niah_schedule.py [--model DIR] [--lengths 1024,2048,4096]
        [--depths 0,0.25,0.5,0.75,1] [--seeds 1] [--batch-size 0] [--needle single]

The last line printed is the RESULT line.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

from evalsuite.assets import default_cache_dir
from evalsuite.engine.offline import OfflineEngine
from evalsuite.tasks.base import TaskContext
from evalsuite.tasks.needle import NeedleConfig
from evalsuite.types import Completion, Request, Sample


def default_model(cache_dir: Path) -> str:
    """SmolLM2-135M-Instruct as imported by `evalsuite`, else the tiny random Llama."""
    found = sorted((cache_dir / "models").glob("smollm2-135m-instruct*/config.json"))
    if found:
        return str(found[-1].parent)
    from evalsuite.testing import build_tiny_llama

    return str(build_tiny_llama(cache_dir / "tiny-llama"))


def build_samples(args, tokenizer, schedule: str) -> list[Sample]:
    cfg = NeedleConfig(haystack=args.haystack, lengths=args.lengths, depths=args.depths, seeds=args.seeds,
                       needle=args.needle, schedule=schedule)
    ctx = TaskContext(base_dir=Path.cwd(), cache_dir=args.cache_dir, tokenizer=tokenizer,
                      max_model_len=max(args.lengths))
    return cfg.build(ctx).samples()


def warmup_request(tokenizer, n: int = 256) -> Request:
    rng = random.Random(12345)
    ids = [rng.randrange(1000, min(len(tokenizer), 30000)) for _ in range(n)]
    return Request(prompt_token_ids=ids, max_tokens=8, ignore_eos=True)


def run_order(args, samples: list[Sample], warm: Request, log_dir: Path, label: str) -> tuple[float, dict]:
    """Seconds to answer `samples` in the given order on a fresh engine, and what it saw."""
    kwargs = {"enable_prefix_caching": True, "max_model_len": max(args.lengths), "dtype": "bfloat16",
              "kv_cache_memory_bytes": args.kv_bytes, "seed": 0, "enforce_eager": not args.compile}
    engine = OfflineEngine(args.model, kwargs, log_dir / f"engine-{label}.log")
    try:
        engine.start()
        engine.generate([warm])
        size = args.batch_size or len(samples)
        out: list[Completion] = []
        t0 = time.perf_counter()
        for i in range(0, len(samples), size):
            out += engine.generate([s.request for s in samples[i:i + size]])
        elapsed = time.perf_counter() - t0
        stats = engine.stats()
    finally:
        engine.close()
    prompt = sum(c.prompt_tokens for c in out)
    cached = sum(c.cached_prompt_tokens or 0 for c in out)
    info = {"answers": {s.id: c.text for s, c in zip(samples, out)}, "prompt_tokens": prompt,
            "uncached_prompt_tokens": prompt - cached, "hit_rate": stats.prefix_cache_hit_rate}
    return elapsed, info


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=None, help="model folder (default: SmolLM2-135M from the evalsuite cache)")
    p.add_argument("--lengths", default="1024,2048,4096", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--depths", default="0,0.25,0.5,0.75,1", type=lambda s: [float(x) for x in s.split(",")])
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--needle", default="single", choices=["single", "multikey", "multivalue"])
    p.add_argument("--haystack", default="paul_graham")
    p.add_argument("--batch-size", type=int, default=0, help="requests per generate call (0: the whole grid)")
    p.add_argument("--kv-bytes", type=int, default=2 << 30, help="fixed KV pool, same for both orders")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (default: eager)")
    p.add_argument("--cache-dir", type=Path, default=default_cache_dir())
    p.add_argument("--json", type=Path, default=None, help="also write the details here")
    return p.parse_args(argv)


def main(argv=None) -> int:
    from transformers import AutoTokenizer

    args = parse_args(argv)
    # a plain SIGTERM would skip engine.close() and leave the engine's processes running
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args.model = args.model or default_model(args.cache_dir)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    naive, sched = build_samples(args, tokenizer, "naive"), build_samples(args, tokenizer, "shared_prefix")
    if {s.id: s.request for s in naive} != {s.id: s.request for s in sched}:
        raise SystemExit("the two orders do not hold the same prompts")
    warm = warmup_request(tokenizer)
    print(f"model={args.model} cells={len(naive)} batch={args.batch_size or len(naive)} "
          f"prompt_tokens={sum(len(s.request.prompt_token_ids) for s in naive)}", flush=True)
    with tempfile.TemporaryDirectory(prefix="niah-bench-") as tmp:
        naive_s, naive_info = run_order(args, naive, warm, Path(tmp), "naive")
        print(f"naive:     {naive_s:.2f} s uncached_prompt_tokens={naive_info['uncached_prompt_tokens']} "
              f"hit_rate={naive_info['hit_rate']}", flush=True)
        sched_s, sched_info = run_order(args, sched, warm, Path(tmp), "scheduled")
        print(f"scheduled: {sched_s:.2f} s uncached_prompt_tokens={sched_info['uncached_prompt_tokens']} "
              f"hit_rate={sched_info['hit_rate']}", flush=True)
    same = naive_info["answers"] == sched_info["answers"]
    if not same:
        diff = [k for k in naive_info["answers"] if naive_info["answers"][k] != sched_info["answers"][k]]
        print(f"answers differ for {len(diff)} samples: {diff[:5]}", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps({"naive": naive_info, "scheduled": sched_info, "naive_s": naive_s,
                                         "scheduled_s": sched_s}, indent=1))
    print(f"RESULT bench=niah_schedule cells={len(naive)} naive_s={naive_s:.3f} scheduled_s={sched_s:.3f} "
          f"speedup={naive_s / sched_s:.3f} same_answers={same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
