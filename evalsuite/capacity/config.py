"""The `capacity:` section of a run config: the workload, the load levels and the SLO."""

from __future__ import annotations

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
MIN_REQUESTS = 100  # per level: the percentiles rest on at least this many requests
# Bounds no real load reaches: a config beyond them is a typo or an attack on the machine running it
MAX_TOKENS, MAX_USERS, MAX_RATE, MAX_REQUESTS = 1 << 24, 100_000, 1e6, 10_000_000
MAX_SLO_MS = 86_400_000.0  # a day
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


class CapacityConfig(Strict):
    """Each prompt length is one sweep over the levels, each level one run of `vllm bench serve`
    over `requests` random-token prompts that share no prefix, each asking for `output_tokens`
    (ignoring end of sequence, so every request decodes as many). Every number is finite and below a
    bound no real load reaches (a level of 10^12 users would only exhaust the machine)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    prompt_tokens: list[Annotated[int, Field(gt=0, le=MAX_TOKENS)]] = Field(default_factory=lambda: [512], min_length=1)
    output_tokens: int = Field(default=128, gt=1, le=MAX_TOKENS)  # at least two, or a request has no inter-token latency
    # lengths drawn uniformly from [L(1-r), L(1+r)] for prompts and outputs (`--random-range-ratio`); 0: fixed
    range_ratio: float = Field(default=0.0, ge=0, lt=1)
    # closed loop: this many users, each sending its next request when the last one ends
    concurrency: list[Annotated[int, Field(gt=0, le=MAX_USERS)]] | None = None
    # open loop: requests arrive at this many a second, whatever the server keeps up with
    request_rate: list[Annotated[float, Field(gt=0, le=MAX_RATE)]] | None = None
    burstiness: float = Field(default=1.0, gt=0, le=1000)  # request_rate arrivals: 1 Poisson, <1 burstier (gamma)
    requests: int = Field(default=200, ge=MIN_REQUESTS, le=MAX_REQUESTS)  # per level
    warmups: int = Field(default=2, ge=0, le=MAX_REQUESTS)  # per level, before its timed requests (the load generator's own)
    timeout_s: float = Field(default=1800, gt=0, le=7 * 86400)  # per level; one that runs longer is recorded as broken
    # levels run above the first that missed the SLO (a length's sweep stops after them); None: every
    # level. Levels that errored never stop a sweep. Above the break a level only draws the curve on.
    stop_after: int | None = Field(default=None, ge=0, le=1000)
    metrics_interval_s: float = Field(default=1.0, gt=0, le=3600)  # how often /metrics is read during a level
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
        if self.concurrency is None and self.request_rate is None:
            self.concurrency = [1, 2, 4, 8, 16, 32]
        for key in self.slo:  # a per-request tail needs that many requests to be more than the largest one
            metric, q = slo_term(key)
            if metric != "itl" and min_samples(q) > self.requests:
                raise ValueError(f"slo.{key}: p{q:g} needs >= {min_samples(q)} requests a level, requests is "
                                 f"{self.requests}")
        return self

    @property
    def mode(self) -> Mode:
        return "concurrency" if self.concurrency is not None else "request_rate"

    @property
    def levels(self) -> list[float]:
        return [float(x) for x in (self.concurrency if self.concurrency is not None else self.request_rate or [])]

    @property
    def percentiles(self) -> list[float]:
        """Every percentile recorded: the usual three and the SLO's own."""
        return sorted({*REPORTED_PERCENTILES, *(slo_term(k)[1] for k in self.slo)})
