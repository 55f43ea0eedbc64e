"""The capacity search against the sweep it replaces, on one server: the same bracket, in what share of the time.

One `vllm serve` (evalsuite's server engine, loopback, with its key) serves both sides, each the
capacity pass (evalsuite.capacity) on one prompt length and one grid of users:
- search: the pass's search, from its prediction (the engine's KV pool and the prefill curve it
  measures first), `rounds` requests a user and at least `--min-requests` a level;
- sweep: every level of the same grid, `--requests` each, read from the bottom up (the pass with
  `concurrency:` listing the grid). `--spot` (for a GPU, where the whole sweep costs the card's
  half hour) runs instead 3 of its levels around the bracket the search found: the grid level
  below at_slo, at_slo and broke_at, each with the sweep's requests; its time is then estimated
  from the levels' measured rates (`sweep_s_est`).
same_bracket=1 where the sweep (or its spot check, read the same way) gives the search's
[at_slo, broke_at); time_ratio is the search's wall time over the sweep's, the prefill curve in it.
An untimed level first warms the server (a CPU engine compiles for the shapes it first meets).

The CPU workload has a knee of its own making, so that the comparison is of the search, not of a
noisy host: the engine takes at most `--max-num-seqs` requests at once (4), so above 4 users a
request waits for a slot about a whole request long, and the SLO's TTFT p90 is set from a pilot
level of one user to `--slo-share` (0.5) of its whole request (E2EL p50, `--output-tokens` 64
decode steps): well above an admitted request's first token, well below a queued one's. `--slo KEY=MS` sets an SLO outright (repeatable); `--max-num-seqs 0` leaves
the engine's own cap.

    .venv/bin/python bench/capacity_search.py [--model DIR] [--prompt-tokens 32] [--output-tokens 64]
        [--lowest 1] [--highest 8] [--step 1.41421356] [--requests 100] [--min-requests 20]
        [--max-num-seqs 4] [--slo KEY=MS] [--spot] [--engine-arg KEY=VALUE]

The last line printed is the RESULT line.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from capacity_overhead import start_server  # noqa: E402  (the same server as the overhead bench)
from niah_schedule import engine_arg  # noqa: E402  (one KEY=VALUE parser for the benches)


def slo_arg(text: str) -> tuple[str, float]:
    key, sep, value = text.partition("=")
    try:
        return key, float(value) if sep else float("nan")
    except ValueError:
        raise argparse.ArgumentTypeError(f"--slo wants KEY=MS, e.g. ttft_p90_ms=2000, got {text!r}") from None


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="model folder (default: the tests' tiny Llama, built once)")
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--lowest", type=int, default=1)
    ap.add_argument("--highest", type=int, default=8)
    ap.add_argument("--step", type=float, default=math.sqrt(2))
    ap.add_argument("--requests", type=int, default=100, help="a swept level's requests")
    ap.add_argument("--min-requests", type=int, default=20, help="a searched level's fewest")
    ap.add_argument("--rounds", type=float, default=4, help="a searched level's requests per user")
    ap.add_argument("--max-num-seqs", type=int, default=4, help="the engine's cap on requests at once; 0: its own")
    ap.add_argument("--slo", type=slo_arg, action="append", default=[], metavar="KEY=MS")
    ap.add_argument("--slo-share", type=float, default=0.5,
                    help="without --slo: TTFT p90 <= this share of one user's whole request (its E2EL p50)")
    ap.add_argument("--spot", action="store_true", help="3 levels of the sweep around the bracket, not all")
    ap.add_argument("--engine-arg", type=engine_arg, action="append", default=[])
    args = ap.parse_args(argv)
    for key, value in args.slo:
        if math.isnan(value):
            ap.error(f"--slo {key}: wants KEY=MS")
    return args


def capacity(args, slo: dict[str, float], **levels):
    from evalsuite.capacity.config import CapacityConfig

    return CapacityConfig(prompt_tokens=[args.prompt_tokens], output_tokens=args.output_tokens, requests=args.requests,
                          slo=slo, **levels)


def search_config(args, slo: dict[str, float]):
    return capacity(args, slo, search={"lowest": args.lowest, "highest": args.highest, "step": args.step,
                                       "min_requests": args.min_requests, "rounds": args.rounds})


def one_level(args, slo: dict[str, float], users: int):
    """A pass of one level of `min_requests` requests (the warm-up, the pilot): a search of a one-level grid."""
    return capacity(args, slo, search={"lowest": users, "highest": users, "min_requests": args.min_requests,
                                       "rounds": 1})


def sweep_config(args, slo: dict[str, float], levels: list[float] | None = None):
    grid = search_config(args, slo).levels
    return capacity(args, slo, concurrency=[int(x) for x in (levels or grid)])


def through_pass(cfg, engine, work: Path, tag: str):
    """The capacity pass of `cfg` on the running server, recorded in `work` as a run's variant `tag`:
    (wall s, its levels, its bracket)."""
    from evalsuite.capacity.sweep import Level
    from evalsuite.capacity.task import CapacityTask
    from evalsuite.core.rundir import RunDir
    from evalsuite.tasks.base import TaskContext
    from evalsuite.verdict.capacity import brackets_of

    (work / tag).mkdir()
    engine.log_path = work / tag / "engine.log"
    rd = RunDir(work)
    task = CapacityTask(cfg, TaskContext(base_dir=work, cache_dir=work))
    t0 = time.perf_counter()
    scores = task.evaluate(engine, None, lambda rows: rd.write_samples(tag, task.name, rows))
    wall = time.perf_counter() - t0
    levels = [Level.model_validate(s.extra) for s in scores]
    return wall, levels, brackets_of(cfg, levels, cfg.prompt_tokens[0])


def pilot_slo(args, engine, work: Path) -> dict[str, float]:
    """TTFT p90 <= `slo_share` of one user's whole request alone (its E2EL p50), from a level of 1 user."""
    _, levels, _ = through_pass(one_level(args, {"ttft_p90_ms": 1e9}, 1), engine, work, "pilot")
    whole_ms = levels[0].percentile("e2el", 50)
    if levels[0].status != "ok" or not whole_ms:
        raise SystemExit(f"pilot: the 1-user level gave no E2EL: {levels[0].reason}")
    return {"ttft_p90_ms": round(args.slo_share * whole_ms, 1)}


def spot_levels(grid: list[float], b) -> list[float]:
    """The sweep's levels a spot check runs: below at_slo, at_slo, broke_at (those the grid has)."""
    out = []
    if b.at_slo in grid:
        i = grid.index(b.at_slo)
        out += grid[max(0, i - 1): i + 1]
    if b.broke_at is not None:
        out.append(b.broke_at)
    return sorted(set(out))


def sweep_estimate(args, grid: list[float], broke_at: float | None, levels) -> float:
    """Seconds the whole sweep would take to one level past the break: each level's requests at the
    rate measured nearest it (log-log between measured levels)."""
    rates = sorted((lv.level, lv.req_per_s) for lv in levels if lv.status == "ok" and lv.req_per_s)
    if not rates:
        return float("nan")
    top = grid.index(broke_at) + 1 if broke_at in grid else len(grid) - 1
    total = 0.0
    for x in grid[: top + 1]:
        lower = [r for r in rates if r[0] <= x] or rates[:1]
        upper = [r for r in rates if r[0] >= x] or rates[-1:]
        (x0, r0), (x1, r1) = lower[-1], upper[0]
        rate = r0 if x1 == x0 else math.exp(math.log(r0) + (math.log(r1) - math.log(r0))
                                            * (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0)))
        total += args.requests / rate
    return total


def shown(b) -> str:
    return f"[{b.at_slo:g},{'inf' if b.broke_at is None else f'{b.broke_at:g}'})"


def main() -> None:
    args = parse_args()
    from evalsuite.core.env import gpu_names

    model = args.model or tiny_model()
    extra = dict(args.engine_arg)
    if args.max_num_seqs:
        extra.setdefault("max_num_seqs", args.max_num_seqs)
    mode = "gpu" if gpu_names() else "cpu"
    with tempfile.TemporaryDirectory(prefix="capacity-search-") as tmp:
        work = Path(tmp)
        engine = start_server(model, work, extra)
        try:
            through_pass(one_level(args, {"ttft_p90_ms": 1e9}, args.highest), engine, work, "warmup")
            slo = dict(args.slo) or pilot_slo(args, engine, work)
            load = [os.getloadavg()[0]]
            s_wall, s_levels, s_b = through_pass(search_config(args, slo), engine, work, "search")
            load.append(os.getloadavg()[0])
            grid = search_config(args, slo).levels
            spot = spot_levels(grid, s_b) if args.spot else None
            w_wall, w_levels, w_b = through_pass(sweep_config(args, slo, spot), engine, work, "sweep")
            load.append(os.getloadavg()[0])
        finally:
            engine.close()
    for name, levels in (("search", s_levels), ("sweep", w_levels)):
        print(f"{name}: " + ", ".join(f"{lv.level:g} users {'met' if lv.met else 'broken' if lv.met is None else 'missed'}"
                                      f" ({lv.completed} requests, {lv.loadgen.get('wall_s', 0):.1f} s)" for lv in levels))
    print(f"search stopped: {s_b.stopped}; predicted {s_b.predicted.users if s_b.predicted else '-'} "
          f"({s_b.predicted.basis if s_b.predicted else '-'}); SLO {slo}")
    report(args, mode, slo, grid, (s_wall, s_levels, s_b), (w_wall, w_levels, w_b), spot, load)


def report(args, mode: str, slo: dict, grid: list[float], search, sweep, spot, load: list[float]) -> None:
    s_wall, s_levels, s_b = search
    w_wall, w_levels, w_b = sweep
    if spot is None:
        same = (s_b.at_slo, s_b.broke_at) == (w_b.at_slo, w_b.broke_at)
        sweep_s, key = w_wall, "sweep_s"
    else:  # the spot check read as the sweep would: met up to at_slo, broke at broke_at
        by = {lv.level: lv for lv in w_levels}
        same = all(by[x].met for x in spot if x <= s_b.at_slo) and \
            (s_b.broke_at is None or by[s_b.broke_at].met is not True)
        sweep_s, key = sweep_estimate(args, grid, s_b.broke_at, s_levels + w_levels), "sweep_s_est"
    terms = ",".join(f"{k}:{v:g}" for k, v in slo.items())
    print(f"RESULT bench=capacity_search mode={mode} length={args.prompt_tokens} output={args.output_tokens} "
          f"grid={grid[0]:g}..{grid[-1]:g}x{args.step:.3g} slo={terms} search={shown(s_b)} "
          f"sweep={shown(w_b) if spot is None else 'spot' + ','.join(f'{x:g}' for x in spot)} "
          f"levels_search={len(s_levels)} levels_sweep={len(w_levels) if spot is None else len(grid)} "
          f"search_s={s_wall:.1f} {key}={sweep_s:.1f} same_bracket={int(same)} time_ratio={s_wall / sweep_s:.3f} "
          f"load_1m_max={max(load):.1f} cpus={os.cpu_count()}")


def tiny_model() -> str:
    from evalsuite.data.assets import default_cache_dir
    from evalsuite.models.tiny import build_tiny_llama

    return str(build_tiny_llama(default_cache_dir() / "test-models" / "tiny-llama-seed0", seed=0))


if __name__ == "__main__":
    main()
