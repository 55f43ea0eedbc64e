"""Maintained parsers in place of hand-written ones: the same numbers as before, on real-shaped input."""

from __future__ import annotations

import math
import re

from evalsuite.engine.server import parse_prometheus

VLLM_METRICS = '''# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="tiny"} 3.0
vllm:num_preemptions_total{engine="1",model_name="tiny"} 2.0
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 4096.0
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 1024.0
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",kv_cache_size_tokens="None",num_gpu_blocks="2730",''' \
    '''kv_cache_max_concurrency="8.5",prefix_caching_hash_algo="sha256"} 1.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="tiny"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="tiny"} 12.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="tiny"} 12.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="tiny"} 1.5
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} NaN
'''


def hand_parser(text: str) -> dict:
    """The regex parser parse_prometheus replaced, kept here as the reference."""
    labels_re = re.compile(r'(\w+)="([^"]*)"')
    vals: dict = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][\w:]*)(\{.*\})?\s+(\S+)", line)
        if not m:
            continue
        name, labels, value = m.groups()
        if name == "vllm:cache_config_info" and labels:
            vals["cache_config_info"] = dict(labels_re.findall(labels))
        try:
            vals[name] = vals.get(name, 0.0) + float(value)
        except ValueError:
            continue
    return vals


def test_prometheus_client_reads_what_the_regex_read():
    new, old = parse_prometheus(VLLM_METRICS), hand_parser(VLLM_METRICS)
    assert new.keys() == old.keys()
    for key, value in old.items():
        if isinstance(value, float) and math.isnan(value):
            assert math.isnan(new[key])
        else:
            assert new[key] == value, key
    assert new["vllm:num_preemptions_total"] == 5.0 and new["cache_config_info"]["num_gpu_blocks"] == "2730"


def test_escaped_label_values_are_unescaped():
    text = 'vllm:cache_config_info{block_size="16",note="a \\"quoted\\" word"} 1.0\n'
    assert parse_prometheus(text)["cache_config_info"] == {"block_size": "16", "note": 'a "quoted" word'}


def header_bytes(path) -> int:
    """The hand-read header sum checkpoint_gib replaced, kept here as the reference."""
    import json

    with open(path, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        header = json.loads(fh.read(n))
    return sum(v["data_offsets"][1] - v["data_offsets"][0] for k, v in header.items() if k != "__metadata__")


def test_checkpoint_size_from_safetensors_equals_the_header_sum(tmp_path, tiny_model):
    import torch
    from safetensors.torch import save_file

    from evalsuite.core.units import GIB
    from evalsuite.engine.server import checkpoint_gib

    save_file({"w": torch.zeros(3, 5, dtype=torch.bfloat16), "s": torch.zeros(7, dtype=torch.float8_e4m3fn),
               "i": torch.zeros(2, dtype=torch.int64), "f": torch.zeros(4, 4, dtype=torch.float32)},
              str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    for folder in (tmp_path, tiny_model):
        want = sum(header_bytes(f) for f in folder.glob("*.safetensors"))
        assert checkpoint_gib(str(folder)) * GIB == want
    assert checkpoint_gib(str(tmp_path / "empty")) is None
