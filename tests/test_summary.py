"""The terminal summary after a run: intervals beside accuracies, and what the run's n can resolve."""

from __future__ import annotations

import io

from rich.console import Console

from evalsuite.core.rundir import RunDir
from evalsuite.report.summary import print_summary
from tests.mlflow_server import build_run


def test_summary_shows_wilson_intervals_and_resolution(tmp_path):
    run = build_run(tmp_path, "20250101-000000-s", {"bf16": {"wrong": range(3)}, "kv_fp8": {"wrong": range(4)}}, n=12)
    console = Console(width=160, record=True, file=io.StringIO())
    print_summary(RunDir(run).load_run(), console)
    text = console.export_text()
    assert "0.750 (0.468–0.911)" in text  # 9/12, Wilson 95%
    assert ("accuracy: value (95% interval; Wilson for a proportion, normal over fixed strata for a macro or "
            "balanced one)") in " ".join(text.split())
    # 12 items: even with no answer changed the one-sided 95% bound is z^2/(12+z^2) = 18.4 points
    assert "mmlu/acc 22.1 pt (n=12)" in text and "gate --plan" in text


def test_summary_gives_each_variant_the_gates_verdict_and_marks_a_ceiling(tmp_path):
    """The run summary applies the shipped gate rules: 12 items cannot show any limit held, so a variant
    reads inconclusive, never passed; 200 identical items pass; the baseline's 200/200 is at ceiling."""
    small = build_run(tmp_path, "20250101-000000-s", {"bf16": {"wrong": range(3)}, "kv_fp8": {"wrong": range(4)}},
                      n=12, baseline="bf16")
    console = Console(width=200, record=True, file=io.StringIO())
    print_summary(RunDir(small).load_run(), console, run_dir=RunDir(small))
    text = console.export_text()
    assert "inconclusive vs bf16" in text and "passed vs" not in text
    assert "intersection-union test" in text
    big = build_run(tmp_path, "20250101-000001-b", {"bf16": {}, "fp8": {}}, n=200, baseline="bf16")
    console = Console(width=200, record=True, file=io.StringIO())
    print_summary(RunDir(big).load_run(), console, run_dir=RunDir(big))
    text = console.export_text()
    assert "passed vs bf16" in text and "1.000 (0.981–1.000) [at ceiling]" in text


def test_the_resolution_of_a_balanced_accuracy_counts_its_minority_label(tmp_path):
    """1,000 CUAD-like items, 3% of them "No": balanced accuracy weighs those 30 as half its score
    (effective n 116), so a paired gate resolves 5.2 points; n = 1,000 taken unweighted said 1.8, below
    the shipped 2-point limit, which the gate then always found insufficient."""
    from evalsuite.core.types import Score
    from evalsuite.stats.metrics import balanced_accuracy

    run = build_run(tmp_path, "20250101-000000-l", {"bf16": {}, "kv_fp8": {}}, n=12, baseline="bf16")
    rd = RunDir(run)
    scores = [Score(sample_id=f"c{i}", task="legal", value=1.0, pred="x", target="No" if i < 30 else "Yes",
                    group="governing_law") for i in range(1000)]
    record = rd.load_run()
    for v in record.variants:
        rd.append_samples(v.variant, "legal", [{"sample": {"id": s.sample_id}, "completion": {}, "score": s.model_dump()}
                                               for s in scores])
        v.metrics.append(balanced_accuracy(scores, "legal/balanced_acc", strata=("group", "target")))
        v.primary_metrics = ["mmlu/acc", "legal/balanced_acc"]
    console = Console(width=300, record=True, file=io.StringIO())
    print_summary(record, console, run_dir=rd)
    text = console.export_text()
    assert "legal/balanced_acc 5.2 pt (n=1,000)" in text and "mmlu/acc 22.1 pt (n=12)" in text
    console = Console(width=300, record=True, file=io.StringIO())
    print_summary(record, console)  # the record alone: only the item count is known
    assert "legal/balanced_acc 1.8 pt (n=1,000)" in console.export_text()


LOADED_HOST = {"cpus": 2, "start": [5.25, 3.0, 1.0], "end": [6.5, 3.5, 1.2]}
QUIET_HOST = {"cpus": 2, "start": [0.5, 0.4, 0.3], "end": [0.75, 0.4, 0.3]}


def test_latency_timed_on_a_loaded_host_is_marked_and_its_load_said(tmp_path):
    """1-minute load 5.25 on 2 CPUs: the latency pass's requests also queued for a CPU, so its figures
    carry the mark and a note gives the load; a variant timed on a quiet host carries none."""
    run = build_run(tmp_path, "20250101-000000-h", {
        "bf16": {"ttft": {512: 10.0}, "itl": {512: 2.0}, "host_load": QUIET_HOST},
        "fp8": {"ttft": {512: 30.0}, "itl": {512: 6.0}, "host_load": LOADED_HOST}}, n=12)
    console = Console(width=400, record=True, file=io.StringIO())
    print_summary(RunDir(run).load_run(), console)
    text = console.export_text()
    fp8 = next(line for line in text.splitlines() if "│ fp8" in line)
    bf16 = next(line for line in text.splitlines() if "│ bf16" in line)
    assert "30.0†" in fp8 and "6.00†" in fp8 and "†" not in bf16
    assert "† latency timed on a loaded host" in text
    assert "fp8 (1-min load 5.2 at start, 6.5 at end, 2 CPUs)" in text and "bf16 (" not in text


def test_a_host_is_loaded_when_its_1_minute_load_exceeds_its_cpus():
    """At the pass's start or end; the 5- and 15-minute averages lag behind a pass of minutes."""
    from evalsuite.core.types import HostLoad

    assert not HostLoad(cpus=2, start=[2.0, 9.0, 9.0], end=[1.5, 9.0, 9.0]).loaded
    assert HostLoad(cpus=2, start=[0.1, 0.0, 0.0], end=[2.5, 0.0, 0.0]).loaded
    assert HostLoad(cpus=2, start=[2.5, 0.0, 0.0]).loaded and not HostLoad(cpus=2, start=[1.0, 0.0, 0.0]).loaded


def test_a_cpu_engines_own_threads_do_not_make_its_host_loaded():
    """A CPU engine computing on both cores of a quiet 2-core host keeps the load near 2-3 by itself;
    one busy process beside it is already a loaded host."""
    from evalsuite.core.types import HostLoad

    assert not HostLoad(cpus=2, start=[2.6, 2.0, 1.0], end=[2.9, 2.0, 1.0], engine_threads=2).loaded
    assert HostLoad(cpus=2, start=[3.4, 2.0, 1.0], engine_threads=2).loaded
    assert HostLoad(cpus=16, start=[18.0, 0.0, 0.0], engine_threads=16).loaded


def test_summary_says_what_the_run_cost_and_where_the_gpu_was_not_sampled(tmp_path):
    """The decision's wall and GPU-idle share, as the run recorded them (evalsuite.memory.busy)."""
    from evalsuite.core.types import RunWall

    run = build_run(tmp_path, "20250101-000000-w", {"bf16": {}, "fp8": {"wrong": range(2)}}, n=12, baseline="bf16")
    rd = RunDir(run)
    for wall, said in ((RunWall(wall_s=1045.04, gpu_idle_frac=0.1912, devices=["0"], readings=4180),
                        "Wall 1,045.0 s from items to the last variant's end; GPU idle 19.1% of it (NVML utilization, "
                        "1 card)"),
                       (RunWall(wall_s=3.2, sampled="no GPU"),
                        "Wall 3.2 s from items to the last variant's end; GPU idle not sampled (no GPU)")):
        record = rd.load_run()
        record.wall = wall
        rd.write_run(record)
        console = Console(width=200, record=True, file=io.StringIO())
        print_summary(rd.load_run(), console, run_dir=rd)
        assert said in " ".join(console.export_text().split())
