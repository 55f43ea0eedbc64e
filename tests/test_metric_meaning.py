"""A metric's meaning (kind, unit, direction, strata) is set by the task that makes it; a record written
without it reads the same meaning from the name, in one place (core.types.meaning_of_name)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from evalsuite.core import types
from evalsuite.core.types import Completion, EngineStats, Metric, MetricKind, Request, Sample, Score, VariantResult
from evalsuite.stats import metrics as M
from evalsuite.tasks import TaskContext
from evalsuite.tasks.balanced import balanced_metrics
from evalsuite.tasks.latency import LatencyTask
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


def _latency() -> list[Metric]:
    """A latency pass over two prompt lengths: its pooled figures and one set per length (`.../ctx<N>`)."""
    task = LatencyTask(prompt_tokens=[2048, 512], output_tokens=4, repeats=60, tokenizer=None)
    samples = [Sample(id=f"len{n}-r{r}", task="latency", request=Request(), target="", group=str(n))
               for n in (2048, 512) for r in range(60)]
    return task.metrics([task.score(s, Completion(text="", prompt_tokens=int(s.group), output_tokens=4,
                                                  ttft_ms=int(s.group) / 10 + i, itl_ms=2.0 + i, e2e_ms=900.0))
                         for i, s in enumerate(samples)])


def _made(scores: list[Score]) -> list[Metric]:
    made = [M.accuracy(scores, "mmlu/acc"), M.accuracy(scores, "mmlu/acc/t1"),
            M.macro_accuracy(M.by_group(scores), "mmlu/acc_macro"),
            *balanced_metrics(scores, "legal"), *grid_metrics("needle", scores), *_latency(), *_workload(),
            *results_metrics("lm_eval", {"results": {"arc_easy": {"acc,none": 0.5, "acc_stderr,none": 0.1}}}, ["arc_easy"])]
    return made + M.interval_metrics(made)


def _no_parsing(name: str):
    raise AssertionError(f"{name}: its meaning was read from its name")


def test_tasks_say_what_their_metrics_are(monkeypatch):
    monkeypatch.setattr(types, "meaning_of_name", _no_parsing)
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
    assert (made["needle/acc/len2048"].length, made["needle/acc/len2048"].depth) == (2048, None)
    assert (made["needle/acc/len1024_depth50"].length, made["needle/acc/len1024_depth50"].depth) == (1024, 50)
    assert made["latency/itl_ms_p50/ctx512"].length == 512 and made["latency/itl_ms_p50"].length is None
    assert made["mmlu/acc/t1"].length is None


def test_readers_take_the_prompt_length_from_the_metric(monkeypatch, tmp_path):
    """Plots, the compare headline, the run summary, the roofline and the paired test read a metric's
    length from the metric its task made, never from its name."""
    from evalsuite.core.types import RunRecord
    from evalsuite.report.compare import headline
    from evalsuite.report.plots import context_series
    from evalsuite.report.summary import table
    from evalsuite.run.config import Variant
    from evalsuite.run.footprint import roofline_metrics
    from evalsuite.stats.paired import covers
    from tests.shapes import LLAMA_8B

    made = _made(_scores())
    monkeypatch.setattr(types, "meaning_of_name", _no_parsing)
    meaning = {m.name: m for m in made}
    frame = pd.DataFrame([{"status": "ok", **{n: m.value for n, m in meaning.items()}}], index=["bf16"])
    series = context_series(frame, meaning)
    assert series["needle/acc"] == {1024: "needle/acc/len1024", 2048: "needle/acc/len2048"}
    assert series["latency/ttft_ms_p50"] == {512: "latency/ttft_ms_p50/ctx512", 2048: "latency/ttft_ms_p50/ctx2048"}
    assert [c for c in headline(frame, [], meaning) if c.startswith("latency/")] == [
        "latency/ttft_ms_p50/ctx512", "latency/ttft_ms_p50/ctx2048",
        "latency/itl_ms_p50/ctx512", "latency/itl_ms_p50/ctx2048"]
    record = RunRecord(run_id="r", model="m", variants=[VariantResult(variant="bf16", status="ok", metrics=made)])
    columns = [c.header for c in table(record).columns]
    assert "TTFT p50 ms @2,048" in columns and "ITL p50 ms @2,048" in columns
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_8B))
    roof = {m.name: m for m in roofline_metrics(str(tmp_path), Variant(), made, "NVIDIA H200")}
    assert roof["roofline/ttft_floor_ms/ctx512"].length == 512 and "roofline/itl_pct_of_floor/ctx2048" in roof
    assert covers(meaning["needle/acc/len1024"], {"len2048_depth50"}, 1024)
    assert not covers(meaning["needle/acc/len1024"], {"len2048_depth50"}, 2048)


def test_a_record_without_meanings_reads_as_its_task_made_it():
    """Old run folders (and kept scores) hold name and value only: every decision a report, the gate or
    check makes on them is the one it makes on a metric its task described."""
    for m in _made(_scores()):
        old = Metric.model_validate({"name": m.name, "value": m.value, "stderr": m.stderr, "n": m.n})
        assert (old.unit, old.strata, old.percentile, old.headline_score) == \
            (m.unit, m.strata, m.percentile, m.headline_score), m.name
        assert (old.kind == MetricKind.proportion) == (m.kind == MetricKind.proportion), m.name


def test_a_result_round_trips_with_its_meanings(tmp_path):
    from evalsuite.core.rundir import RunDir

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
