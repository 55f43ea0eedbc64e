"""Users at the SLO found by bracketing: a few levels where the answer lies, not a sweep of them all.

A length's search starts at a predicted level: the fewer of the users whose whole requests the
engine's KV pool holds (evalsuite.capacity.predict) and those whose prompts it prefills within the
TTFT limit, by the prefill curve measured on the server just before (requests of the length sent
at once, timed to their last first token). It then moves on the grid (SearchConfig.grid): up while
levels meet the SLO, down while they miss, in steps of 1, 2, 4, ... grid points, then halves the
bracket until the highest level that met it and the lowest that did not are neighbours. A broken
level (an error, a timeout, a preemption storm) is recorded and never counted as met: it bounds
the bracket from above as a miss does, with its reason. The next move is a pure function of the
levels recorded so far, so a resumed pass goes on where the record ends and a record always says
why its search stopped. Each level sends `rounds` requests per user, within [min_requests,
requests], fewer where the rate a lower level served says they would not end within half the
level's deadline; never fewer than its reported percentiles need.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from evalsuite.capacity.config import CapacityConfig, slo_term
from evalsuite.capacity.sweep import Bracket, Level, Prediction


@dataclass(frozen=True)
class Step:
    """The next level to try (None: the search stopped) and why."""

    level: float | None
    why: str


def _index(grid: list[float], levels: list[Level]) -> dict[int, Level]:
    where = {x: i for i, x in enumerate(grid)}
    return {where[lv.level]: lv for lv in levels if lv.level in where}


def bounds(grid: list[float], levels: list[Level]) -> tuple[int, int]:
    """(lo, hi) grid indices: hi the lowest level tried that did not meet the SLO (len(grid) where
    none), lo the highest below it that did (-1 where none). Read from the bottom up, as a sweep is."""
    tried = _index(grid, levels)
    hi = min((i for i, lv in tried.items() if not lv.met), default=len(grid))
    lo = max((i for i, lv in tried.items() if lv.met and i < hi), default=-1)
    return lo, hi


def spent(levels: list[Level]) -> float:
    """Seconds the length's levels took, by their load generator's wall time."""
    return sum(float(lv.loadgen.get("wall_s") or 0.0) for lv in levels)


def step(grid: list[float], levels: list[Level], start: float, budget_s: float | None) -> Step:
    """The next level of one length's search, from its levels recorded so far (in the order tried)."""
    if not grid:
        return Step(None, "the grid is empty")
    ordered = sorted(levels, key=lambda lv: lv.order or 0)
    first = next((i for i, x in enumerate(grid) if x == (ordered[0].level if ordered else start)), None)
    if first is None:
        first = max([i for i, x in enumerate(grid) if x <= start] or [0])
    if not ordered:
        return Step(grid[first], "predicted")
    lo, hi = bounds(grid, ordered)
    top = len(grid) - 1
    if hi == 0:
        lv = _index(grid, ordered)[0]
        return Step(None, f"the lowest level, {grid[0]:g}, did not meet the SLO" + (f" ({lv.reason})" if lv.reason else ""))
    if lo == top:
        return Step(None, f"the grid's highest level, {grid[top]:g}, met the SLO")
    if hi - lo == 1:
        return Step(None, f"bracketed: {grid[lo]:g} met the SLO, {grid[hi]:g} (the next level up the grid) did not")
    used = spent(ordered)
    if budget_s is not None and used >= budget_s:
        wide = f"{grid[lo]:g} to {grid[hi]:g}" if hi < len(grid) else f"above {grid[lo]:g}"
        return Step(None, f"budget spent: {used:,.0f} s of {budget_s:g} s, the capacity {wide}" if lo >= 0 else
                    f"budget spent: {used:,.0f} s of {budget_s:g} s, no level met the SLO")
    if hi == len(grid):  # every level tried met it: up, each step twice the last
        nxt = min(top, lo + (lo - first) + 1)
        return Step(grid[nxt], f"up: {grid[lo]:g} met the SLO")
    if lo < 0:  # every level tried missed it: down, each step twice the last
        nxt = max(0, hi - (first - hi) - 1)
        return Step(grid[nxt], f"down: {grid[hi]:g} did not meet the SLO")
    mid = (lo + hi) // 2
    return Step(grid[mid], f"halving: {grid[lo]:g} met the SLO, {grid[hi]:g} did not")


def done(cfg: CapacityConfig, levels: list[Level], length: int) -> bool:
    mine = [lv for lv in levels if lv.length == length]
    first = min(mine, key=lambda lv: lv.order or 0).level if mine else cfg.levels[0]
    return step(cfg.levels, mine, first, cfg.search.budget_s).level is None


def prefill_bound(points: list[tuple[int, float]], limit_s: float, q: float) -> int | None:
    """Users whose prompts are prefilled within `limit_s` at percentile q, from the seconds c
    requests sent at once took to their last first token: a line through the points (least
    squares), each user's prompt adding its slope; the q-th of N arriving together waits for
    about q% of their prefills. None without two distinct points or where more users cost nothing."""
    if len({c for c, _ in points}) < 2:
        return None
    n = len(points)
    mc, ms = sum(c for c, _ in points) / n, sum(s for _, s in points) / n
    slope = sum((c - mc) * (s - ms) for c, s in points) / sum((c - mc) ** 2 for c, _ in points)
    if slope <= 0:
        return None
    return max(0, math.floor((limit_s - (ms - slope * mc)) / (slope * q / 100)))


def predict(cfg: CapacityConfig, kv_bound: int | None, points: list[tuple[int, float]],
            max_num_seqs: int | None = None) -> Prediction:
    """The level a length's search starts at: `search.start` where given, else the fewest of the KV
    pool's users, the engine's cap on requests at once and the prefill curve's users within the TTFT
    limit (the grid's lowest where none is known)."""
    s = cfg.search
    ttft = [(limit, q) for key, limit in cfg.slo.items() for metric, q in [slo_term(key)] if metric == "ttft"]
    prefill = min((b for limit, q in ttft if (b := prefill_bound(points, limit / 1000, q)) is not None), default=None)
    named = [(what, x) for what, x in (("KV pool", kv_bound), ("max_num_seqs", max_num_seqs), ("prefill", prefill))
             if x is not None]
    if s.start is not None:
        users, basis = s.start, f"search.start {s.start:,}"
    elif named:
        users = min(x for _, x in named)
        basis = " and ".join(f"{what} {x:,}" for what, x in named)
    else:
        users, basis = s.lowest, "no prediction: the grid's lowest"
    users = max(s.lowest, min(s.highest, users))
    return Prediction(users=users, kv_bound=kv_bound, prefill_bound=prefill, prefill_s=[list(p) for p in points],
                      basis=basis)


def start_level(grid: list[float], users: int) -> float:
    """The highest grid level at or below `users` (the lowest where none is)."""
    return max([x for x in grid if x <= users] or grid[:1])


def requests_for(cfg: CapacityConfig, users: float, levels: list[Level]) -> int:
    """Requests a searched level sends: `rounds` per user within [min_requests, requests], and no
    more than the rate of the busiest level below it served in half the level's deadline."""
    s = cfg.search
    n = min(cfg.requests, max(s.min_requests, math.ceil(s.rounds * users)))
    below = [lv for lv in levels if lv.status == "ok" and lv.level < users and lv.req_per_s]
    if below:
        rate = max(below, key=lambda lv: lv.level).req_per_s
        n = min(n, max(s.min_requests, math.floor(rate * cfg.timeout_s / 2)))
    return n


def search_bracket(cfg: CapacityConfig, levels: list[Level], length: int) -> Bracket:
    """A length's bracket from the levels its search tried, read from the bottom up, with why it stopped."""
    grid = cfg.levels
    mine = sorted((lv for lv in levels if lv.length == length), key=lambda lv: lv.order or 0)
    first = mine[0] if mine else None
    out = Bracket(length=length, mode=cfg.mode, levels=grid, searched=True, tried=[lv.level for lv in mine],
                  predicted=first.predicted if first else None, spent_s=spent(mine))
    by_level = {lv.level: lv for lv in mine}
    for x in sorted(by_level):
        lv = by_level[x]
        out.loaded = out.loaded or lv.loaded
        if not lv.met:
            out.broke_at, out.why = x, lv.reason if lv.status != "ok" else "; ".join(lv.misses)
            break
        out.at_slo, out.at = x, lv
    above = [x for x in sorted(by_level) if out.broke_at is not None and x > out.broke_at and by_level[x].met]
    if above:
        out.notes.append(f"met the SLO again above the level that broke it, at {', '.join(f'{x:g}' for x in above)}; "
                         f"not counted (the bracket is read from the lowest level up)")
    nxt = step(grid, mine, first.level if first else grid[0], cfg.search.budget_s)
    out.stopped = nxt.why if nxt.level is None else f"not finished: {nxt.level:g} users were to be tried next"
    return out
