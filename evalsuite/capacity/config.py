"""The `capacity:` section of a run config: the workload, the load levels or their search, and the SLO."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from evalsuite.core.configfile import Strict, not_allowed
from evalsuite.stats.metrics import min_samples

# The latencies the load generator reports percentiles of (`vllm bench serve --percentile-metrics`):
# ttft first token; itl every gap between two streamed tokens, pooled over requests; tpot a request's
# mean time per output token after the first; e2el the whole request.
SLO_METRICS = ("ttft", "itl", "tpot", "e2el")
SLO_KEY = re.compile(r"^(ttft|itl|tpot|e2el)_p(\d{1,2}(?:\.\d+)?)_ms$")
SLO_KEYS_ALLOWED = "<metric>_p<q>_ms with metric ttft, itl, tpot or e2el and 0 < q < 100, e.g. ttft_p90_ms"
REPORTED_PERCENTILES = (50.0, 90.0, 99.0)  # recorded for every metric, besides the SLO's own
MIN_REQUESTS = 100  # per level of a sweep: the percentiles rest on at least this many requests
TAIL_FLOOR = 90.0  # a searched level's fewest requests: what its p90 needs (stats.metrics.min_samples)
MOST_USERS = 100_000  # a grid's highest level: far beyond what one engine serves
# Bounds no real load reaches: a config beyond them is a typo or an attack on the machine running it
MAX_TOKENS, MAX_RATE, MAX_SLO_MS = 1 << 24, 1e6, 86_400_000.0  # a day
Mode = Literal["concurrency", "request_rate"]


def slo_term(key: str) -> tuple[str, float]:
    """(metric, percentile) of an SLO key such as ttft_p90_ms."""
    m = SLO_KEY.match(key)
    if m is None or not 0 < float(m[2]) < 100:
        raise ValueError(key)
    return m[1], float(m[2])


def _increasing(values: list[Any]) -> list[Any]:
    if values != sorted(set(values)):
        raise not_allowed(f"{values} are not strictly increasing (allowed: distinct levels from lowest to highest: "
                          "the level above the highest that meets the SLO is the one that broke it)")
    return values


class SearchConfig(Strict):
    """The users at the SLO found by bracketing (evalsuite.capacity.search): from a predicted level,
    up or down a geometric grid in growing steps, then halving, until the bracket is one step wide."""

    step: float = Field(default=math.sqrt(2), gt=1.05, le=4, allow_inf_nan=False)  # the grid's factor
    lowest: int = Field(default=1, ge=1, le=MOST_USERS)
    highest: int = Field(default=1024, ge=1, le=MOST_USERS)
    start: int | None = Field(default=None, ge=1, le=MOST_USERS)  # the first level; None: predicted
    # requests a level: `rounds` per user (a closed loop's first wave arrives at once; later ones show
    # its steady state), at least `min_requests`, at most the section's `requests`
    rounds: float = Field(default=4, ge=1, le=100, allow_inf_nan=False)
    min_requests: int = Field(default=20, ge=1, le=100_000)
    # per prompt length: no level starts once its levels took this long (None: until bracketed)
    budget_s: float | None = Field(default=None, gt=0, le=7 * 86400, allow_inf_nan=False)

    @model_validator(mode="after")
    def _range(self):
        if self.highest < self.lowest:
            raise ValueError(f"highest {self.highest} is below lowest {self.lowest} (allowed: lowest <= highest)")
        if self.start is not None and not self.lowest <= self.start <= self.highest:
            raise ValueError(f"start {self.start} lies outside lowest..highest ({self.lowest}..{self.highest})")
        return self

    def grid(self) -> list[float]:
        """The levels a search may try: lowest x step^k rounded to whole users, each once, up to highest
        (with step sqrt(2) from 1: 1, 2, 3, 4, 6, 8, 11, 16, 23, 32, 45, 64, ...)."""
        out: list[float] = []
        k = 0
        while (x := round(self.lowest * self.step ** k)) <= self.highest:
            if not out or x > out[-1]:
                out.append(float(x))
            k += 1
        return out


class CapacityConfig(Strict):
    """Each prompt length is one search (or sweep) over load levels, each level one run of `vllm
    bench serve` over random-token prompts that share no prefix, each asking for `output_tokens`
    (ignoring end of sequence, so every request decodes as many). Levels listed under `concurrency`
    or `request_rate` are swept, each over `requests` prompts; otherwise users are searched. Every
    number is finite and below a bound no real load reaches (10^12 users would only exhaust the machine)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    prompt_tokens: list[Annotated[int, Field(gt=0, le=MAX_TOKENS)]] = Field(default_factory=lambda: [512], min_length=1)
    output_tokens: int = Field(default=128, gt=1, le=MAX_TOKENS)  # at least two, or a request has no inter-token latency
    # lengths drawn uniformly from [L(1-r), L(1+r)] for prompts and outputs (`--random-range-ratio`); 0: fixed
    range_ratio: float = Field(default=0.0, ge=0, lt=1)
    # closed loop: this many users, each sending its next request when the last one ends
    concurrency: list[Annotated[int, Field(gt=0, le=MOST_USERS)]] | None = None
    # open loop: requests arrive at this many a second, whatever the server keeps up with
    request_rate: list[Annotated[float, Field(gt=0, le=MAX_RATE)]] | None = None
    burstiness: float = Field(default=1.0, gt=0, le=1000)  # request_rate arrivals: 1 Poisson, <1 burstier (gamma)
    requests: int = Field(default=200, ge=MIN_REQUESTS, le=1_000_000)  # per level of a sweep; a searched level's most
    warmups: int = Field(default=2, ge=0, le=1_000_000)  # per level, before its timed requests (the load generator's own)
    timeout_s: float = Field(default=1800, gt=0, le=7 * 86400)  # per level; one that runs longer is recorded as broken
    # levels run above the first that missed the SLO (a length's sweep stops after them); None: every
    # level. Levels that errored never stop a sweep. Above the break a level only draws the curve on.
    stop_after: int | None = Field(default=None, ge=0, le=1000)
    metrics_interval_s: float = Field(default=1.0, gt=0, le=3600)  # how often /metrics is read during a level
    # a level whose server preempted more than this many times per completed request is broken: it
    # recomputed prompts instead of serving them (a pool overrun), whatever its percentiles say
    max_preemptions_per_request: float = Field(default=1.0, ge=0, le=1000, allow_inf_nan=False)
    search: SearchConfig | None = None  # the default where no levels are listed
    slo: dict[str, Annotated[float, Field(gt=0, le=MAX_SLO_MS)]] = Field(
        default_factory=lambda: {"ttft_p90_ms": 2000.0, "itl_p90_ms": 50.0}, min_length=1)

    @field_validator("concurrency", "request_rate")
    @classmethod
    def _levels(cls, value: list | None) -> list | None:
        if value is not None and not value:
            raise not_allowed("[] is empty (allowed: one or more levels, lowest first)")
        return None if value is None else _increasing(value)

    @field_validator("slo")
    @classmethod
    def _slo_keys(cls, value: dict[str, float]) -> dict[str, float]:
        for key in value:
            try:
                slo_term(key)
            except ValueError:
                raise not_allowed(f"{key!r} is not an SLO term (allowed: {SLO_KEYS_ALLOWED})") from None
        return value

    @model_validator(mode="after")
    def _one_arrival_process(self):
        if self.concurrency is not None and self.request_rate is not None:
            raise ValueError("give concurrency (users) or request_rate (requests/s), not both")
        if self.search is not None and (self.concurrency is not None or self.request_rate is not None):
            raise ValueError("give search (users found by bracketing) or levels to sweep (concurrency, "
                             "request_rate), not both")
        if self.search is None and self.concurrency is None and self.request_rate is None:
            self.search = SearchConfig()
        fewest = self.requests if self.search is None else self.search.min_requests
        for key in self.slo:  # a per-request tail needs that many requests to be more than the largest one
            metric, q = slo_term(key)
            if metric != "itl" and min_samples(q) > fewest:
                what = "requests" if self.search is None else "search.min_requests"
                raise ValueError(f"slo.{key}: p{q:g} needs >= {min_samples(q)} requests a level, {what} is {fewest}")
        if self.search is not None and self.search.min_requests < min_samples(TAIL_FLOOR):
            raise ValueError(f"search.min_requests: {self.search.min_requests} is below {min_samples(TAIL_FLOOR)}, "
                             f"what a p{TAIL_FLOOR:g} needs (allowed: >= {min_samples(TAIL_FLOOR)})")
        return self

    @property
    def searching(self) -> bool:
        return self.search is not None

    @property
    def mode(self) -> Mode:
        return "request_rate" if self.request_rate is not None else "concurrency"

    @property
    def levels(self) -> list[float]:
        """The levels swept, or the grid a search moves on."""
        if self.search is not None:
            return self.search.grid()
        return [float(x) for x in (self.concurrency if self.concurrency is not None else self.request_rate or [])]

    @property
    def percentiles(self) -> list[float]:
        """Every percentile recorded: the usual three and the SLO's own."""
        return sorted({*REPORTED_PERCENTILES, *(slo_term(k)[1] for k in self.slo)})

    def percentiles_for(self, requests: int) -> list[float]:
        """The percentiles a level of `requests` reports: the SLO's own (the config made sure it has
        the requests for them) and the usual ones it has the requests for (p99 needs 100)."""
        own = {slo_term(k)[1] for k in self.slo}
        return sorted(q for q in self.percentiles if q in own or min_samples(q) <= requests)
