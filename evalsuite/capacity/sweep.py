"""Level records, their SLO verdicts, and the capacity bracket a sweep of them gives.

A level is `ok` when the load generator ran to its end with every request answered; it `met` the
SLO when each SLO percentile, as the load generator computed it from that level's requests, is at
most its limit. A level that errored, timed out, lost requests or was preempted over and over is
`broken`, with the reason. A searched level (evalsuite.capacity.search) also keeps its place in
its length's search, why it was tried, and the prediction the search started from.

The capacity of one prompt length is a bracket on the declared levels: `at_slo`, the highest level
that met the SLO with every lower level meeting it too (0 where the lowest did not), and `broke_at`,
the level above it (None where every level met it: the capacity lies beyond the sweep). A level that
met the SLO above one that broke it is noted, never counted: a sweep is read from the bottom up.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from evalsuite.capacity.config import Mode, slo_term
from evalsuite.capacity.scrape import ServerView
from evalsuite.core.types import HostLoad
from evalsuite.stats.metrics import min_samples

UNITS = {"concurrency": "users", "request_rate": "req/s"}


class Prediction(BaseModel):
    """Where a length's search started: the users predicted and what from."""

    model_config = ConfigDict(extra="forbid")

    users: int
    kv_bound: int | None = None  # requests whose whole KV the engine's pool holds at once
    prefill_bound: int | None = None  # users prefilled within the TTFT limit, by the curve below
    prefill_s: list[list[float]] = Field(default_factory=list)  # [requests sent at once, s to the last first token]
    basis: str = ""


class Level(BaseModel):
    """One load level of one prompt length, as recorded (a row of samples/capacity.jsonl keeps it)."""

    model_config = ConfigDict(extra="forbid")

    length: int  # prompt tokens asked
    output_tokens: int
    mode: Mode
    level: float  # users, or requests a second
    requests: int  # asked
    status: str = "ok"  # ok | broken
    reason: str | None = None  # why broken
    met: bool | None = None  # the SLO held (None: broken, no verdict)
    slo: dict[str, float] = Field(default_factory=dict)  # key -> limit ms
    misses: list[str] = Field(default_factory=list)  # the SLO terms it broke, each with its value
    completed: int = 0
    failed: int = 0
    tokens_in: int = 0  # prompt and output tokens over the completed requests, as the load generator counted them
    tokens_out: int = 0
    duration_s: float | None = None
    req_per_s: float | None = None
    output_tok_per_s: float | None = None
    total_tok_per_s: float | None = None
    peak_concurrent: int | None = None  # the load generator's most requests in flight in one second
    # metric (ttft, itl, tpot, e2el) -> percentile as text ("90") -> ms, as the load generator reported them
    percentiles: dict[str, dict[str, float]] = Field(default_factory=dict)
    mean_ms: dict[str, float] = Field(default_factory=dict)
    server: ServerView = Field(default_factory=ServerView)
    host_load: HostLoad | None = None
    kv_cache_tokens: int | None = None  # the engine's pool, which the KV bound is computed from
    block_size: int | None = None
    loadgen: dict[str, Any] = Field(default_factory=dict)  # tool, version, command (no key), files, wall time
    needed: int | None = None  # completed requests its reported percentiles need (p90: 10, p99: 100)
    order: int | None = None  # searched: its place in its length's search (1: first)
    chosen: str | None = None  # searched: why the search tried it
    predicted: Prediction | None = None  # searched: where its length's search started

    @property
    def key(self) -> tuple[int, float]:
        return self.length, self.level

    @property
    def loaded(self) -> bool:
        return self.host_load is not None and self.host_load.loaded

    def percentile(self, metric: str, q: float) -> float | None:
        return self.percentiles.get(metric, {}).get(f"{q:g}")


def judge(level: Level) -> Level:
    """The level with its SLO verdict: every term within its limit, each miss said with its value."""
    if level.status != "ok":
        level.met, level.misses = None, []
        return level
    misses = []
    for key, limit in level.slo.items():
        metric, q = slo_term(key)
        value = level.percentile(metric, q)
        if value is None:
            misses.append(f"{key} not reported")
        elif value > limit:
            misses.append(f"{key} {value:,.1f} > {limit:g}")
    level.met, level.misses = not misses, misses
    return level


def from_summary(base: Level, summary: dict[str, Any], percentiles: list[float]) -> Level:
    """A level's figures from the load generator's saved summary (`vllm bench serve --save-result`):
    a per-request percentile only where its completed requests are enough for it (ITL pools every
    gap of every request, so it has them)."""
    out = base.model_copy(update={
        "completed": int(summary.get("completed") or 0), "failed": int(summary.get("failed") or 0),
        "tokens_in": int(summary.get("total_input_tokens") or 0),
        "tokens_out": int(summary.get("total_output_tokens") or 0),
        "duration_s": summary.get("duration"), "req_per_s": summary.get("request_throughput"),
        "output_tok_per_s": summary.get("output_throughput"), "total_tok_per_s": summary.get("total_token_throughput"),
        "peak_concurrent": summary.get("max_concurrent_requests")})
    for metric in ("ttft", "itl", "tpot", "e2el"):
        got = {f"{q:g}": summary[f"p{q:g}_{metric}_ms"] for q in percentiles if f"p{q:g}_{metric}_ms" in summary
               and (metric == "itl" or min_samples(q) <= out.completed)}
        if got:
            out.percentiles[metric] = got
        if f"mean_{metric}_ms" in summary:
            out.mean_ms[metric] = summary[f"mean_{metric}_ms"]
    return out


class Bracket(BaseModel):
    """The capacity of one prompt length: [at_slo, broke_at) on the sweep's levels."""

    model_config = ConfigDict(extra="forbid")

    length: int
    mode: Mode
    levels: list[float]  # declared
    at_slo: float = 0.0  # 0: not even the lowest level met the SLO
    broke_at: float | None = None  # None: every level up to the last one run met it
    why: str = ""  # what broke at broke_at
    missing: list[float] = Field(default_factory=list)  # declared levels with no record (a cut pass)
    notes: list[str] = Field(default_factory=list)
    at: Level | None = None  # the record of the level at_slo names
    loaded: bool = False  # a level up to broke_at was timed on a loaded host: the bracket is marked
    searched: bool = False  # found by a search (`levels` its grid), not a sweep
    tried: list[float] = Field(default_factory=list)  # searched: the levels, in the order tried
    stopped: str = ""  # searched: why the search stopped
    predicted: Prediction | None = None  # searched: where it started
    spent_s: float = 0.0  # searched: its levels' wall time

    @property
    def unit(self) -> str:
        return UNITS[self.mode]

    @property
    def censored(self) -> bool:
        """Capacity beyond what was measured: every level run met the SLO (or the rest were not run)."""
        return self.broke_at is None

    @property
    def steps(self) -> int | None:
        """Grid steps between at_slo and broke_at (1: as narrow as the grid); None where open above."""
        if self.broke_at is None or self.broke_at not in self.levels:
            return None
        return self.levels.index(self.broke_at) - (self.levels.index(self.at_slo) if self.at_slo in self.levels else -1)

    def text(self) -> str:
        """e.g. `8 users (16 broke it: ttft_p90_ms 2,410.3 > 2000)`, `>= 32 users (every level met the SLO)`."""
        value = f"{self.at_slo:g} {self.unit}"
        if self.censored:
            if self.searched:
                return f">= {value} ({self.stopped})"
            rest = "levels " + ", ".join(f"{x:g}" for x in self.missing) + " not run" if self.missing else \
                "every level met the SLO"
            return f">= {value} ({rest})"
        return f"{value} ({self.broke_at:g} broke it: {self.why})"


def bracket(levels: list[Level], declared: list[float], length: int, mode: Mode) -> Bracket:
    """The bracket of one prompt length from its level records, read from the lowest level up."""
    by_level = {lv.level: lv for lv in levels if lv.length == length}
    out = Bracket(length=length, mode=mode, levels=declared,
                  missing=[x for x in declared if x not in by_level])
    for x in declared:
        lv = by_level.get(x)
        if lv is None:
            break  # a gap: what lies above it is not known to hold
        out.loaded = out.loaded or lv.loaded
        if not lv.met:
            out.broke_at = x
            out.why = lv.reason if lv.status != "ok" else "; ".join(lv.misses)
            break
        out.at_slo, out.at = x, lv
    above = [x for x in declared if out.broke_at is not None and x > out.broke_at and by_level.get(x)
             and by_level[x].met]
    if above:
        out.notes.append(f"met the SLO again above the level that broke it, at {', '.join(f'{x:g}' for x in above)}; "
                         f"not counted (the bracket is read from the lowest level up)")
    return out
