"""The engine child's KV-usage sampler: a peak, at a bounded cost to the engine it watches."""

from __future__ import annotations

import time
import types

import pytest


class _Gauge:
    """A stand-in for vLLM's metric snapshot: a KV-usage gauge whose reads cost `cost_s` each."""

    def __init__(self, cost_s: float):
        self.cost_s, self.reads = cost_s, 0

    def get_metrics(self):
        time.sleep(self.cost_s)
        self.reads += 1
        return [types.SimpleNamespace(name="vllm:kv_cache_usage_perc", value=0.1 * min(self.reads, 5))]


def test_kv_sampler_backs_off_from_an_expensive_read():
    """The sampler pauses `budget` x each read's cost, so a slow snapshot costs the engine ~1%."""
    from evalsuite.engine.vllm_offline import KVPeak

    cheap, dear = _Gauge(0.0), _Gauge(0.01)
    with KVPeak(cheap) as kv_cheap, KVPeak(dear, budget=100) as kv_dear:
        time.sleep(1.2)
    assert 1 <= kv_dear.reads <= 3  # 10 ms reads: a pause of 1 s (the most) after each
    assert kv_cheap.reads >= 3 * kv_dear.reads  # ~29 when the machine is idle: 20 ms, then a tenth of the time
    assert kv_cheap.peak == pytest.approx(0.1 * min(kv_cheap.reads, 5)) and kv_dear.peak > 0


def test_kv_sampler_reads_only_the_kv_gauge():
    """The gauge is read from its own collector; the engine's full snapshot is not walked."""
    from prometheus_client import CollectorRegistry, Gauge, Histogram

    from evalsuite.engine.vllm_offline import KVPeak

    registry = CollectorRegistry()
    gauge = Gauge("vllm:kv_cache_usage_perc", "KV usage", ["engine"], registry=registry)
    Histogram("vllm:time_to_first_token_seconds", "TTFT", ["engine"], registry=registry).labels("0").observe(0.1)
    gauge.labels("0").set(0.25)
    llm = _Gauge(0.0)
    with KVPeak(llm, registry=registry) as kv:
        time.sleep(0.05)
        gauge.labels("0").set(0.75)
        time.sleep(0.4)  # read every 20-45 ms meanwhile
        gauge.labels("0").set(0.5)
        time.sleep(0.1)
    assert kv.peak == 0.75 and kv.reads >= 3 and llm.reads == 0
