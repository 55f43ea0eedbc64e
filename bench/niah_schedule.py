"""Needle grid, naive order vs shared-prefix schedule, on one prefix-caching engine.

What the order can and cannot buy. Both orders send the very same prompts (the needle task
builds one token stream per seed, so every context of a seed is a prefix of its longest one;
the bench checks that each sample id maps to the same token ids). With a prefix cache large
enough to keep everything, the prompt tokens an engine computes are the size of the prompts'
prefix trie, whatever the order. The order matters when the KV pool cannot keep every seed's
haystack, which is the long-context case: at 128K on one GPU a handful of running requests
fill the pool, and a prefix computed a few requests ago is already evicted. Then the
shared-prefix schedule (all cells of a seed back to back, longest and deepest first) still finds
its prefix in the cache, and the naive order (config order, seeds innermost: each cell's seeds
one after another, as a loop that fills cell by cell would send them) has lost it.

So the fair comparison, at small lengths on CPU, keeps the ratio of KV pool to context length
of that regime: the pool holds `--kv-contexts` (default 1.5) of the longest context, on both
orders. Everything else is equal too:
- one engine, prefix caching on, eager mode (`--compile` for torch.compile: on a shared 2-core
  machine the compile warm-up alone took minutes, and it is the same for both orders);
- before each order the cache is flushed by requests of random tokens that together exceed the
  pool (OfflineEngine has no reset call; LRU eviction does it) and the bench checks that the
  first prompt of the order then found nothing cached (`reset_ok`); the flush also warms up;
- the same batching: by default the whole grid in one generate call, as the runner sends it
  (its default batch of 256 holds the grid); `--batch-size 1` sends one request at a time;
- only generation is timed; `--rounds 2` runs naive, scheduled, scheduled, naive and sums, so
  drift in machine load does not favour either order;
- greedy decoding, so both orders must give the same answers (`same_answers`, per sample id).
The prompt tokens each order really computed (prompt minus cached tokens, per request) are
printed too: unlike seconds they do not depend on what else runs on the machine.

    .venv/bin/python bench/niah_schedule.py [--model DIR] [--lengths 1024,2048]
        [--depths 0,0.1,...,1] [--seeds 3] [--kv-contexts 1.5] [--batch-size 0] [--rounds 1]

The last line printed is the RESULT line.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

from evalsuite.core.types import Completion, Request, Sample
from evalsuite.data.assets import default_cache_dir
from evalsuite.engine.offline import OfflineEngine
from evalsuite.tasks.base import TaskContext
from evalsuite.tasks.needle import NeedleConfig

BLOCK = 128  # vLLM's KV block size on CPU


def default_model(cache_dir: Path) -> str:
    """The tiny random Llama: on a shared 2-core CPU a real model's prefill of the grid takes
    minutes per order. `--model` takes SmolLM2 or any other folder."""
    from evalsuite.models.tiny import build_tiny_llama

    return str(build_tiny_llama(cache_dir / "tiny-llama"))


def kv_bytes_per_token(model_dir: str) -> int:
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    cfg = cfg.get("text_config", cfg)
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    return cfg["num_hidden_layers"] * kv_heads * head_dim * 2 * 2  # K and V, bf16


def build_samples(args, tokenizer, schedule: str) -> list[Sample]:
    cfg = NeedleConfig(haystack=args.haystack, lengths=args.lengths, depths=args.depths, seeds=args.seeds,
                       needle=args.needle, schedule=schedule)
    ctx = TaskContext(base_dir=Path.cwd(), cache_dir=args.cache_dir, tokenizer=tokenizer,
                      max_model_len=max(args.lengths))
    return cfg.build(ctx).samples()


def flush_requests(tokenizer, pool_tokens: int, max_len: int, salt: int) -> list[Request]:
    """Random-token prompts that together overflow the pool, so LRU evicts every cached block."""
    rng = random.Random(salt)
    special = set(tokenizer.all_special_ids)
    vocab = [t for t in range(min(len(tokenizer), 30000)) if t not in special]
    size = max_len - 16
    count = math.ceil(1.25 * pool_tokens / size) + 1
    return [Request(prompt_token_ids=[rng.choice(vocab) for _ in range(size)], max_tokens=2) for _ in range(count)]


def run_order(engine: OfflineEngine, samples: list[Sample], flush: list[Request], batch_size: int) -> dict:
    """Flush the cache, then answer `samples` in the given order; seconds and what was cached."""
    for req in flush:
        engine.generate([req])  # one at a time: each finishes and frees its blocks for eviction
    size = batch_size or len(samples)
    out: list[Completion] = []
    t0 = time.perf_counter()
    for i in range(0, len(samples), size):
        out += engine.generate([s.request for s in samples[i:i + size]])
    elapsed = time.perf_counter() - t0
    prompt = sum(c.prompt_tokens for c in out)
    return {"seconds": elapsed, "answers": {s.id: c.text for s, c in zip(samples, out)},
            "prompt_tokens": prompt, "uncached_prompt_tokens": prompt - sum(c.cached_prompt_tokens or 0 for c in out),
            "reset_ok": (out[0].cached_prompt_tokens or 0) == 0}


def parse_args(argv=None):
    floats = lambda s: [float(x) for x in s.split(",")]  # noqa: E731
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=None, help="model folder (default: the tiny random Llama)")
    p.add_argument("--lengths", default="1024,2048", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--depths", default="0,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1", type=floats)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--needle", default="single", choices=["single", "multikey", "multivalue"])
    p.add_argument("--haystack", default="paul_graham")
    p.add_argument("--kv-contexts", type=float, default=1.5, help="KV pool size in longest contexts")
    p.add_argument("--batch-size", type=int, default=0, help="requests per generate call (0: the whole grid)")
    p.add_argument("--rounds", type=int, default=1, help="2: naive, scheduled, scheduled, naive")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (default: eager)")
    p.add_argument("--cache-dir", type=Path, default=default_cache_dir())
    p.add_argument("--log", type=Path, default=None, help="engine log (default: a temp file)")
    p.add_argument("--json", type=Path, default=None, help="also write the details here")
    p.add_argument("--engine-arg", action="append", default=[], metavar="KEY=VALUE", type=engine_arg,
                   help="vLLM engine argument over the bench's own, VALUE as JSON where it parses "
                        "(e.g. load_format=dummy, gpu_memory_utilization=0.9); repeatable")
    return p.parse_args(argv)


def engine_arg(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--engine-arg wants KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def engine_kwargs(args) -> tuple[dict, int]:
    max_len = max(args.lengths)
    pool = math.ceil(args.kv_contexts * max_len / BLOCK) * BLOCK + BLOCK
    kwargs = {"enable_prefix_caching": True, "max_model_len": max_len, "dtype": "bfloat16", "seed": 0,
              "kv_cache_memory_bytes": pool * kv_bytes_per_token(args.model), "enforce_eager": not args.compile}
    return {**kwargs, **dict(args.engine_arg)}, pool


def measure(args, tokenizer, orders: dict[str, list[Sample]], log: Path) -> dict[str, list[dict]]:
    kwargs, pool = engine_kwargs(args)
    sequence = ["naive", "shared_prefix"] + (["shared_prefix", "naive"] if args.rounds > 1 else [])
    runs: dict[str, list[dict]] = {k: [] for k in orders}
    engine = OfflineEngine(args.model, kwargs, log)
    try:
        t0 = time.perf_counter()
        stats = engine.start()
        print(f"engine started in {time.perf_counter() - t0:.1f} s, KV pool {stats.kv_cache_tokens} tokens", flush=True)
        for i, name in enumerate(sequence):
            flush = flush_requests(tokenizer, stats.kv_cache_tokens or pool, max(args.lengths), salt=i)
            r = run_order(engine, orders[name], flush, args.batch_size)
            print(f"{name:>13}: {r['seconds']:.2f} s, computed {r['uncached_prompt_tokens']} of "
                  f"{r['prompt_tokens']} prompt tokens, reset_ok={r['reset_ok']}", flush=True)
            runs[name].append(r)
    finally:
        engine.close()
    return runs


def main(argv=None) -> int:
    from transformers import AutoTokenizer

    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that engine.close() still runs
    args.model = args.model or default_model(args.cache_dir)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    orders = {name: build_samples(args, tokenizer, name) for name in ("naive", "shared_prefix")}
    if {s.id: s.request for s in orders["naive"]} != {s.id: s.request for s in orders["shared_prefix"]}:
        raise SystemExit("the two orders do not hold the same prompts")
    cells = len(orders["naive"])
    print(f"model={args.model} cells={cells} batch={args.batch_size or cells} kv_contexts={args.kv_contexts}", flush=True)
    with tempfile.TemporaryDirectory(prefix="niah-bench-") as tmp:
        runs = measure(args, tokenizer, orders, args.log or Path(tmp) / "engine.log")
    naive_s = sum(r["seconds"] for r in runs["naive"])
    sched_s = sum(r["seconds"] for r in runs["shared_prefix"])
    answers = [r["answers"] for rs in runs.values() for r in rs]
    same = all(a == answers[0] for a in answers)
    reset_ok = all(r["reset_ok"] for rs in runs.values() for r in rs)
    work = [rs[0]["uncached_prompt_tokens"] for rs in (runs["naive"], runs["shared_prefix"])]
    print(f"computed prompt tokens: naive={work[0]} scheduled={work[1]} ratio={work[0] / work[1]:.3f} "
          f"reset_ok={reset_ok}")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1))
    print(f"RESULT bench=niah_schedule cells={cells} naive_s={naive_s:.3f} scheduled_s={sched_s:.3f} "
          f"speedup={naive_s / sched_s:.3f} same_answers={same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
