"""A metric's meaning (kind, unit, direction, strata) is set by the task that makes it; a record written
without it reads the same meaning from the name, in one place (core.types.meaning_of_name)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalsuite.core import types
from evalsuite.core.types import Completion, EngineStats, Metric, MetricKind, Score, VariantResult
from evalsuite.stats import metrics as M
from evalsuite.tasks import TaskContext
from evalsuite.tasks.balanced import balanced_metrics
from evalsuite.tasks.lmeval import results_metrics
from evalsuite.tasks.needle import grid_metrics
from evalsuite.tasks.workload import WorkloadConfig


def _scores() -> list[Score]:
    rows = [("t1" if i % 3 else "t2", "Yes" if i % 4 else "No", i % 5 != 0) for i in range(40)]
    return [Score(sample_id=f"s{i}", task="legal", value=float(ok), pred=t, target=t, group=g,
                  extra={"logprobs": {"Yes": -0.1 * i, "No": -1.0}, "threshold": 0.0, "length": 1024 * (1 + i % 2), "depth": 50,
                         "prompt_tokens": 100, "cached_prompt_tokens": 16})
            for i, (g, t, ok) in enumerate(rows)]


def _workload() -> list[Metric]:
    task = WorkloadConfig(requests=2, prompt_tokens=100, shared_prefix_tokens=60, output_tokens=8).build(
        TaskContext(base_dir=Path("."), cache_dir=Path("."), seed=0))
    done = [task.score(s, Completion(text="", prompt_tokens=100, output_tokens=8, cached_prompt_tokens=48,
                                     ttft_ms=10.0 + i, itl_ms=2.0, e2e_ms=30.0 + i))
            for i, s in enumerate(task.samples())]
    return task.metrics(done)


def _made(scores: list[Score]) -> list[Metric]:
    made = [M.accuracy(scores, "mmlu/acc"), M.accuracy(scores, "mmlu/acc/t1"),
            M.macro_accuracy(M.by_group(scores), "mmlu/acc_macro"),
            *balanced_metrics(scores, "legal"), *grid_metrics("needle", scores),
            *M.latency_summary([float(i) for i in range(120)], "latency/ttft_ms"), *_workload(),
            *results_metrics("lm_eval", {"results": {"arc_easy": {"acc,none": 0.5, "acc_stderr,none": 0.1}}}, ["arc_easy"])]
    return made + M.interval_metrics(made)


def test_tasks_say_what_their_metrics_are(monkeypatch):
    def no_parsing(name: str):
        raise AssertionError(f"{name}: its meaning was read from its name")

    monkeypatch.setattr(types, "meaning_of_name", no_parsing)
    made = {m.name: m for m in _made(_scores())}
    assert made["mmlu/acc"].kind == MetricKind.proportion and made["mmlu/acc"].strata == []
    assert made["mmlu/acc_macro"].strata == ["group"] and made["legal/balanced_acc"].strata == ["group", "target"]
    assert made["legal/balanced_acc/t1"].strata == ["target"] and made["legal/balanced_acc"].direction == "higher"
    # the argmax headline is recomputed from log-probabilities, not the items' recorded values
    assert made["legal/argmax_balanced_acc"].kind == MetricKind.mean and not made["legal/argmax_balanced_acc"].item_score
    p99 = made["latency/ttft_ms_p99"]
    assert (p99.kind, p99.unit, p99.direction, p99.percentile) == (MetricKind.timing, "ms", "lower", 99)
    assert made["mmlu/acc_ci95_low"].kind == MetricKind.bound and not made["mmlu/acc_ci95_low"].headline_score
    assert made["workload/demand_tokens"].unit == "tokens" and made["workload/prefix_hit_rate"].in_points
    assert not made["lm_eval/arc_easy/acc"].item_score


def test_a_record_without_meanings_reads_as_its_task_made_it():
    """Old run folders (and kept scores) hold name and value only: every decision a report, the gate or
    check makes on them is the one it makes on a metric its task described."""
    for m in _made(_scores()):
        old = Metric.model_validate({"name": m.name, "value": m.value, "stderr": m.stderr, "n": m.n})
        assert (old.unit, old.strata, old.percentile, old.headline_score) == \
            (m.unit, m.strata, m.percentile, m.headline_score), m.name
        assert (old.kind == MetricKind.proportion) == (m.kind == MetricKind.proportion), m.name


def test_a_result_round_trips_with_its_meanings(tmp_path):
    from evalsuite.core.records import RunDir

    result = VariantResult(variant="bf16", status="ok", metrics=_made(_scores()))
    rd = RunDir(tmp_path)
    rd.write_result(result)
    again = rd.load_result("bf16")
    assert again.metrics == result.metrics


def test_every_engine_figure_has_a_meaning():
    numeric = [k for k, f in EngineStats.model_fields.items() if k != "source" and k not in ("vllm_version", "device")]
    assert sorted(numeric) == sorted(types.ENGINE_MEANING)
    stats = EngineStats(**{k: 1 for k in numeric})
    by_name = VariantResult(variant="x", engine=stats).measured()
    assert by_name["engine/weights_gib"].kind == MetricKind.memory and by_name["engine/weights_gib"].unit == "GiB"
    assert by_name["engine/startup_s"].kind == MetricKind.timing
    assert not any(m.in_points or m.item_score for m in by_name.values())


@pytest.mark.parametrize("name", ["latency/ttft_ms_p50/ctx512", "engine/weights_gib", "mmlu/wall_s"])
def test_quantities_are_never_scores(name):
    assert not Metric(name=name, value=1.0).in_points
