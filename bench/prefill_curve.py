"""Throughput against requests at once: where an engine's throughput flattens, measured once per model and device.

One engine of CONFIG's variant (its engine arguments as `evalsuite run` builds them, a KV pool that
holds the most requests asked, prefix caching off so that no request borrows another's prefill),
one shape of request at a time: PROMPT random tokens (distinct per request) and OUTPUT generated
tokens (ignore_eos: every request generates them all). For each concurrency C, C requests are sent
in one call and timed from the call to its last answer: requests a second = C / wall. The
concurrencies are visited in a shuffled order every round (`--rounds`, median kept), so that a
load drifting on a shared machine favours none. `saturation` is the fewest requests at once that
reach 95% of the best (evalsuite.memory.throughput.saturation), the largest C measured when none
before it does; `estimate` is the roofline's for the same shape, up to the largest C (none on a CPU, whose roofline figures are placeholders).

`--save` keeps the curves in `<cache>/throughput/`, where `run --parallel` sizes each engine's KV
pool from them (evalsuite.run.pools) instead of the roofline; `--out FILE` writes them as JSON.

    .venv/bin/python bench/prefill_curve.py CONFIG [-V VARIANT] [--shape PROMPT:OUTPUT[@C,...] ...]
        [--concurrency 1,2,4,8,16] [--rounds 3] [--save] [--out FILE]

The last line printed is the RESULT line.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path


def shape_arg(text: str):
    """PROMPT:OUTPUT[@C1,C2,...]: a shape, and the concurrencies it is measured at (else --concurrency's)."""
    from evalsuite.memory.throughput import Shape

    spec, _, at = text.partition("@")
    prompt, _, output = spec.partition(":")
    try:
        return Shape(int(prompt), int(output or 1)), sorted({int(c) for c in at.split(",")}) if at else None
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shape wants PROMPT:OUTPUT[@C1,C2,...], got {text!r}") from None


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("config", type=Path, help="a run config; its variant's engine is the one measured")
    p.add_argument("-V", "--variant", help="the variant (default: the config's baseline)")
    p.add_argument("--shape", action="append", type=shape_arg, metavar="PROMPT:OUTPUT[@C,...]",
                   help="request shape, repeatable, with its own concurrencies after @ (default 1024:16)")
    p.add_argument("--concurrency", default="1,2,4,8,16", help="requests at once, comma-separated")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--save", action="store_true", help="keep the curves where run --parallel reads them")
    p.add_argument("--out", type=Path, help="also write the curves here (JSON list)")
    args = p.parse_args(argv)
    default = sorted({int(c) for c in args.concurrency.split(",")})
    args.shape = [(shape, at or default) for shape, at in args.shape or [shape_arg("1024:16")]]
    return args


def requests(shape, n: int, rng: random.Random, vocab: int):
    from evalsuite.core.types import Request

    return [Request(prompt_token_ids=[rng.randrange(100, vocab) for _ in range(shape.prompt_tokens)],
                    max_tokens=shape.output_tokens, ignore_eos=True) for _ in range(n)]


def variant_plan(model_dir: str, variant, gpu: str):
    """The planner's layout of this variant's engine (its max_model_len and KV blocks)."""
    import psutil

    from evalsuite.core.units import GIB
    from evalsuite.memory.planner import plan
    from evalsuite.run.footprint import plan_inputs

    config = json.loads((Path(model_dir) / "config.json").read_text())
    memory = psutil.virtual_memory().total / GIB if gpu == "cpu" else None
    return plan(config, **plan_inputs(variant), gpu=gpu, device_memory_gib=memory)


def pool_bytes(p, tokens: int) -> int:
    """KV bytes for `tokens` tokens in whole blocks, as the plan `p` lays the cache out, and never
    less than two requests at max_model_len (vLLM refuses to start below one)."""
    import math

    return math.ceil(max(tokens, 2 * p.max_model_len) / p.block_size) * p.kv_bytes_per_block


def refuse_long_shapes(args, name: str, limit: int | None) -> None:
    """One line, before any engine starts, for a shape whose prompt and output exceed the variant's
    max_model_len: vLLM refuses such a request only once the engine is up and a curve half measured."""
    over = [f"{s.prompt_tokens}:{s.output_tokens}" for s, _ in args.shape
            if limit and s.prompt_tokens + s.output_tokens > limit]
    if over:
        from evalsuite.core.errors import ConfigError

        raise ConfigError(f"{args.config}: --shape {', '.join(over)}: prompt + output exceeds variants.{name}."
                          f"max_model_len {limit} (allowed: PROMPT + OUTPUT <= {limit})")


def start_engine(args, work: Path):
    """The variant's engine as a run builds it, with a pool for twice the most requests asked at once
    (a hybrid model's sliding layers make a block hold fewer tokens than the plan's full ones), or
    the variant's own fixed pool where that is larger."""
    from evalsuite.core import env as envmod
    from evalsuite.engine.factory import make_engine
    from evalsuite.run.config import load_config, variant_max_len
    from evalsuite.run.engine_args import engine_args
    from evalsuite.run.footprint import planner_gpu
    from evalsuite.run.session import resolve_model

    cfg = load_config(args.config)
    name = args.variant or cfg.baseline or next(iter(cfg.variants))
    variant = cfg.variants[name]
    refuse_long_shapes(args, name, variant_max_len(variant))  # before the model is imported
    model_dir = resolve_model(cfg, args.config.resolve().parent, args.cache_dir)
    gpu = planner_gpu(envmod.device_name())
    p = variant_plan(model_dir, variant, gpu)
    refuse_long_shapes(args, name, p.max_model_len)  # where the model's own limit sets it
    most = max(max(at) * (s.prompt_tokens + s.output_tokens) for s, at in args.shape)
    pool = max(pool_bytes(p, 2 * most + 1024), variant.engine_args.get("kv_cache_memory_bytes", 0))
    variant = variant.model_copy(update={"enable_prefix_caching": False, "engine_args": {
        **variant.engine_args, "kv_cache_memory_bytes": pool}})
    model, kwargs = engine_args(cfg, variant, model_dir)
    engine = make_engine(cfg.engine, model, kwargs, work / "engine.log", args.cache_dir)
    engine.start()
    return engine, Path(model_dir).name, gpu, model_dir, variant


def measure(engine, shape, concurrency: list[int], rounds: int, vocab: int) -> dict[int, float]:
    """Median requests a second per concurrency, over shuffled rounds, after one untimed call."""
    rng = random.Random(0)
    engine.generate(requests(shape, max(concurrency), rng, vocab))  # first-call costs, kernels for the shape
    walls: dict[int, list[float]] = {c: [] for c in concurrency}
    for _ in range(rounds):
        for c in rng.sample(concurrency, len(concurrency)):
            batch = requests(shape, c, rng, vocab)
            t0 = time.perf_counter()
            engine.generate(batch)
            walls[c].append(time.perf_counter() - t0)
    return {c: c / statistics.median(w) for c, w in walls.items()}


def estimate(model_dir: str, variant, gpu: str, shape, most: int) -> int | None:
    from evalsuite.memory.planner import plan
    from evalsuite.memory.throughput import estimate as roofline_estimate
    from evalsuite.run.footprint import plan_inputs

    config = json.loads((Path(model_dir) / "config.json").read_text())
    if gpu == "cpu":
        return None
    p = plan(config, **plan_inputs(variant), gpu=gpu)
    settings = {k: v for k, v in plan_inputs(variant).items()
                if k in ("quantization", "kv_cache_dtype", "dtype", "kv_cache_dtype_skip_layers") and v is not None}
    return roofline_estimate(config, shape, gpu, p.max_num_batched_tokens, most, settings)


def main(argv=None) -> int:
    from evalsuite.core.errors import ConfigError
    from evalsuite.data.assets import default_cache_dir
    from evalsuite.memory.throughput import CURVES_DIR, Curve, CurvePoint, saturation

    args = parse_args(argv)
    args.cache_dir = default_cache_dir()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that engine.close() still runs
    curves, results = [], []
    with tempfile.TemporaryDirectory(prefix="prefill-curve-") as tmp:
        try:
            engine, model, gpu, model_dir, variant = start_engine(args, Path(tmp))
        except ConfigError as e:
            print(e, file=sys.stderr)
            return 2
        try:
            vocab = int(json.loads((Path(model_dir) / "config.json").read_text()).get("vocab_size", 32000))
            for shape, concurrency in args.shape:
                rates = measure(engine, shape, concurrency, args.rounds, min(vocab, 32000))
                source = (f"bench/prefill_curve.py {args.config} -V {args.variant or 'baseline'} --shape "
                          f"{shape.prompt_tokens}:{shape.output_tokens} --rounds {args.rounds} on {gpu}, "
                          f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC")
                curve = Curve(model=model, device=gpu, prompt_tokens=shape.prompt_tokens,
                              output_tokens=shape.output_tokens, source=source,
                              points=[CurvePoint(concurrency=c, requests_per_s=round(r, 4)) for c, r in rates.items()])
                curves.append(curve)
                est = estimate(model_dir, variant, gpu, shape, max(concurrency))
                print(f"# {shape.prompt_tokens}:{shape.output_tokens} " + ", ".join(
                    f"{c}: {r:.3f}/s" for c, r in rates.items()) + f"; flat from {saturation(curve)}, roofline {est}",
                    flush=True)
                results.append(f"{shape.prompt_tokens}x{shape.output_tokens}:{saturation(curve)}/{est if est else '-'}")
        finally:
            engine.close()
    payload = [c.model_dump() for c in curves]
    if args.out:
        args.out.write_text(json.dumps(payload, indent=2))
    if args.save:
        folder = args.cache_dir / CURVES_DIR
        folder.mkdir(parents=True, exist_ok=True)
        for c in curves:
            (folder / f"{c.model}-{c.device}-{c.prompt_tokens}x{c.output_tokens}.json").write_text(c.model_dump_json(indent=2))
    print(f"RESULT bench=prefill_curve model={model} device={gpu} saturation_vs_roofline={','.join(results)} "
          f"rounds={args.rounds}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
