"""The server's own view of a level: /metrics read every interval while the load generator runs.

KV-cache usage and the running and waiting requests are gauges, so a level's peak and mean are of
the readings taken; preemptions are a counter, so a level's count is its end less its start, both
read outside the sampling (a level shorter than one interval still has them).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict

KV_USAGE, RUNNING, WAITING = "vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:num_requests_waiting"
PREEMPTIONS = "vllm:num_preemptions_total"
HITS, QUERIES = "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"


class ServerView(BaseModel):
    """What /metrics said during one level. kv_usage is vLLM's fraction of the KV pool's blocks in use
    (0-1); None where no reading had it (a server that exports no such gauge)."""

    model_config = ConfigDict(extra="forbid")

    readings: int = 0
    kv_usage_peak: float | None = None
    kv_usage_mean: float | None = None
    running_peak: int | None = None
    waiting_peak: int | None = None
    preemptions: int | None = None
    # prompt tokens served from the prefix cache over the level: ~0 for its distinct random prompts,
    # more where a prompt repeats (the load generator's warm-up sends the first one again)
    prefix_hit_rate: float | None = None


class Sampler:
    """Reads `read()` (parsed /metrics: name -> value) every `interval_s` from start() to stop()."""

    def __init__(self, read: Callable[[], dict[str, Any]], interval_s: float):
        self.read, self.interval_s = read, interval_s
        self._done = threading.Event()
        self._readings: list[dict[str, Any]] = []
        self._first: dict[str, Any] = {}
        self._thread = threading.Thread(target=self._loop, name="evalsuite-metrics", daemon=True)

    def __enter__(self) -> "Sampler":
        self._first = self.read()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()
        self.view = summarize(self._readings, self._first, self.read())

    def _loop(self) -> None:
        while not self._done.wait(self.interval_s):
            reading = self.read()
            if reading:
                self._readings.append(reading)


def summarize(readings: list[dict[str, Any]], first: dict[str, Any], last: dict[str, Any]) -> ServerView:
    def series(name: str) -> list[float]:
        return [float(r[name]) for r in readings if name in r]

    kv, running, waiting = series(KV_USAGE), series(RUNNING), series(WAITING)
    def change(name: str) -> float | None:
        return last[name] - first[name] if name in first and name in last else None

    preempted, hits, queries = change(PREEMPTIONS), change(HITS), change(QUERIES)
    return ServerView(readings=len(readings), kv_usage_peak=max(kv) if kv else None,
                      kv_usage_mean=sum(kv) / len(kv) if kv else None,
                      running_peak=int(max(running)) if running else None,
                      waiting_peak=int(max(waiting)) if waiting else None,
                      preemptions=None if preempted is None else int(preempted),
                      prefix_hit_rate=hits / queries if hits is not None and queries else None)
