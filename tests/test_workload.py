"""The workload task: N requests at once, optionally behind a shared prefix; its per-task metrics."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from evalsuite.core.errors import ConfigError
from evalsuite.core.types import Completion
from evalsuite.run.config import load_config
from evalsuite.tasks import TaskContext
from evalsuite.tasks.workload import WorkloadConfig


def task(**kw):
    cfg = WorkloadConfig(**{"requests": 4, "prompt_tokens": 100, "shared_prefix_tokens": 60, "output_tokens": 8, **kw})
    return cfg.build(TaskContext(base_dir=Path("."), cache_dir=Path("."), seed=0))


def test_requests_share_exactly_the_prefix_and_go_out_together():
    t = task()
    samples = t.samples()
    ids = [s.request.prompt_token_ids for s in samples]
    assert len(samples) == 4 and t.batch_size == 4 and all(len(x) == 100 for x in ids)
    assert all(x[:60] == ids[0][:60] for x in ids) and len({tuple(x[60:]) for x in ids}) == 4
    assert all(s.request.max_tokens == 8 and s.request.ignore_eos for s in samples)
    assert task(name="other").samples()[0].request.prompt_token_ids[:60] != ids[0][:60]  # no cache hits across tasks


def test_metrics_from_the_engines_per_request_numbers():
    t = task()
    samples = t.samples()
    cached = [0, 48, 48, 48]  # the first request computes the prefix; the others find whole blocks of it
    scores = [t.score(s, Completion(text="", prompt_tokens=100, output_tokens=8, cached_prompt_tokens=c, ttft_ms=10.0 * (i + 1),
                                    itl_ms=2.0, e2e_ms=10.0 * (i + 1) + 14.0))
              for i, (s, c) in enumerate(zip(samples, cached))]
    m = {x.name: x.value for x in t.metrics(scores)}
    assert m["workload/prefix_hit_rate"] == pytest.approx(144 / 400)
    assert m["workload/prefix_hit_rate_max"] == pytest.approx(3 * 60 / 400)
    assert m["workload/demand_tokens"] == 60 + 4 * (40 + 8)
    assert m["workload/ttft_ms_p50"] == pytest.approx(25.0) and m["workload/itl_ms_p50"] == 2.0
    assert m["workload/output_tok_per_s"] == pytest.approx(32 / 0.054)


def test_config_checks(tmp_path):
    with pytest.raises(ValueError, match="shared_prefix_tokens 100 must be below prompt_tokens 100"):
        WorkloadConfig(requests=2, prompt_tokens=100, shared_prefix_tokens=100)
    cfg = {"model": {"hub": "org/m"}, "variants": {"a": {"max_model_len": 4096}},
           "tasks": [{"type": "workload", "name": "over", "requests": 8, "prompt_tokens": 4096, "output_tokens": 1}]}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(ConfigError, match=r"tasks.over.lengths: \[4097\] exceeds variants.a.max_model_len 4096"):
        load_config(path)
    cfg["tasks"][0]["prompt"] = 1
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(ConfigError, match="tasks.0.workload.prompt: unknown key .allowed: name, output_tokens, prompt_tokens"):
        load_config(path)


def test_shipped_claims_run_configs_validate():
    root = Path(__file__).resolve().parent.parent / "lab" / "configs" / "claims"
    for name in ("h200-llama8b-128k", "h200-llama8b-overcap", "h200-llama8b-preempt", "h200-llama8b-swa48k", "h200x4-llama8b-tp"):
        cfg = load_config(root / f"{name}.yaml")
        assert cfg.variants and all(v.max_model_len == 131072 for v in cfg.variants.values())
