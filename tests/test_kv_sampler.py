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


def test_kv_sampler_schedule():
    """Every 20 ms for a batch's first 0.2 s, then a tenth of the time elapsed, and at least 100x a
    read's cost (a slow snapshot costs the engine ~1%), never more than 1 s apart."""
    from evalsuite.engine.vllm_offline import next_pause

    assert next_pause(0.05, 0.0001, 0.02, 100, 1.0) == 0.02
    assert next_pause(3.0, 0.0001, 0.02, 100, 1.0) == pytest.approx(0.3)
    assert next_pause(0.05, 0.004, 0.02, 100, 1.0) == pytest.approx(0.4)  # a 4 ms read: 0.4 s before the next
    assert next_pause(60.0, 0.0, 0.02, 100, 1.0) == next_pause(0.05, 0.5, 0.02, 100, 1.0) == 1.0


def test_kv_sampler_backs_off_from_an_expensive_read():
    """Live: a 10 ms read is followed by the longest pause (1 s), whatever else the machine does;
    both samplers keep their peak."""
    from evalsuite.engine.vllm_offline import KVPeak

    cheap, dear = _Gauge(0.0), _Gauge(0.01)
    with KVPeak(cheap) as kv_cheap, KVPeak(dear, budget=100) as kv_dear:
        time.sleep(1.2)
    assert 1 <= kv_dear.reads <= 3  # a pause of 1 s after each read
    assert kv_cheap.reads >= 1 and kv_cheap.peak == pytest.approx(0.1 * min(kv_cheap.reads, 5)) and kv_dear.peak > 0


def test_kv_sampler_reads_only_the_kv_gauge():
    """The gauge is read from its own collector; the engine's full snapshot is not walked. Waits on
    the sampler's own read count, not on a sleep: a loaded machine may starve its thread for longer
    than any fixed sleep (`budget=0`: no back-off, so a slow first read does not stretch its pause)."""
    from prometheus_client import CollectorRegistry, Gauge, Histogram

    from evalsuite.engine.vllm_offline import KVPeak

    registry = CollectorRegistry()
    gauge = Gauge("vllm:kv_cache_usage_perc", "KV usage", ["engine"], registry=registry)
    Histogram("vllm:time_to_first_token_seconds", "TTFT", ["engine"], registry=registry).labels("0").observe(0.1)
    gauge.labels("0").set(0.25)
    llm = _Gauge(0.0)

    def two_more_reads(kv) -> None:
        want, deadline = kv.reads + 2, time.monotonic() + 30
        while kv.reads < want and time.monotonic() < deadline:
            time.sleep(0.005)

    with KVPeak(llm, registry=registry, budget=0.0) as kv:
        two_more_reads(kv)
        gauge.labels("0").set(0.75)
        two_more_reads(kv)  # at least one whole read after the set
        gauge.labels("0").set(0.5)
        two_more_reads(kv)
    assert kv.peak == 0.75 and kv.reads >= 6 and llm.reads == 0


def test_kv_sampler_floor_from_the_largest_request():
    """A batch that ends before the first read still leaves a peak: the largest request's blocks at
    its last step (prompt + output - 1 tokens: the last token never enters the cache)."""
    from evalsuite.engine.vllm_offline import KVPeak

    def request(prompt: int, *outputs: int):
        return types.SimpleNamespace(prompt_token_ids=list(range(prompt)),
                                     outputs=[types.SimpleNamespace(token_ids=list(range(n))) for n in outputs])

    kv = KVPeak(_Gauge(0.0), blocks=(16, 100))
    kv.settle([request(20, 1), request(30, 4, 3)])  # 33 slots: 3 blocks of 16
    assert kv.peak == pytest.approx(0.03)
    kv.peak = 0.5
    kv.settle([request(20, 1)])
    assert kv.peak == 0.5  # a sampled peak above the floor stands
    unknown = KVPeak(_Gauge(0.0), blocks=None)
    unknown.settle([request(4000, 10)])
    assert unknown.peak == 0.0  # sliding-window or hybrid attention: no floor
