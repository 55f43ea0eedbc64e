"""compare: the variants x metrics table, deltas, baseline choice, formats and plots."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console
from typer.testing import CliRunner

from evalsuite.cli.main import app
from evalsuite.core.rundir import RunDir
from evalsuite.report.compare import compare
from evalsuite.core.types import Metric, meaning_of_name
from evalsuite.report.plots import context_series, front_labels, pareto_front, write_plots
from tests.mlflow_server import build_run

runner = CliRunner()
VARIANTS = {
    "bf16": {"wrong": range(20), "weights_gib": 1.0, "kv_cache_tokens": 10000, "needle": {1024: 1.0, 4096: 0.9},
             "ttft": {512: 10.0, 2048: 30.0}, "itl": {512: 2.0, 2048: 2.5}},
    "fp8": {"wrong": range(30), "weights_gib": 0.5, "kv_cache_tokens": 20000, "needle": {1024: 1.0, 4096: 0.8},
            "ttft": {512: 9.0, 2048: 27.0}, "itl": {512: 1.5, 2048: 2.0}},
    "waste": {"wrong": range(40), "weights_gib": 1.5, "kv_cache_tokens": 5000},
    "int4": {"status": "skipped", "reason": "no kernel"},
}


@pytest.fixture
def run(tmp_path) -> Path:
    return build_run(tmp_path / "runs", "20250101-000000-small", VARIANTS, baseline="fp8")


def test_table_and_deltas(run):
    c = compare([(RunDir(run), None)])
    assert c.baseline == "fp8"  # the config's baseline key
    assert list(c.frame.index) == ["bf16", "fp8", "waste", "int4"]
    assert c.frame.at["bf16", "engine/weights_gib"] == 1.0
    assert c.deltas.at["bf16", "mmlu/acc"] == pytest.approx(5.0)  # points
    assert c.deltas.at["bf16", "engine/weights_gib"] == pytest.approx(100.0)  # percent
    assert c.deltas.at["fp8", "mmlu/acc"] == 0
    # per-length latency rows, never the median pooled over lengths
    assert c.columns[:5] == ["mmlu/acc", "latency/ttft_ms_p50/ctx512", "latency/ttft_ms_p50/ctx2048",
                             "latency/itl_ms_p50/ctx512", "latency/itl_ms_p50/ctx2048"]
    assert c.cell("fp8", "mmlu/acc") == ["0.850", "(.794–.893, n=200)"]  # Wilson 95% for 170/200
    # bf16 answers 10 more of the same 200 items right and none wrong: +5 pt, paired 95% [+2.4, +9.0] (exact)
    assert c.cell("bf16", "mmlu/acc") == ["0.900", "(.851–.934, n=200)", "+5.0 pt", "[+2.4, +9.0]"]
    assert c.cell("int4", "mmlu/acc") == ["-"]
    assert c.cell("bf16", "engine/weights_gib") == ["1.000", "+100.0%"]


def test_table_fits_80_columns_and_names_the_method(run):
    from evalsuite.report.compare_view import terminal_view

    console = Console(width=80, record=True, file=io.StringIO())
    for part in terminal_view(compare([(RunDir(run), None)]), 80):
        console.print(part)
    text = console.export_text()
    assert max(map(len, text.splitlines())) <= 80
    assert "fp8 (baseline)" in text and "[+2.4, +9.0]" in text and "[low, high]" in text
    assert text.count("fp8 (baseline)") == 1  # more variants than fit side by side: a block each, once


def test_baseline_choice(run):
    assert compare([(RunDir(run), None)], "bf16").baseline == "bf16"
    res = runner.invoke(app, ["compare", str(run), "--baseline", "nope"])
    assert res.exit_code == 2 and "not a variant" in res.stderr and "bf16, fp8" in res.stderr


@pytest.mark.parametrize("form", ["{name}:fp8", "{path}:fp8"], ids=["run_name", "dir"])
def test_baseline_run_variant_names_a_run_given_even_where_no_name_clashes(run, form):
    """RUN:NAME is the form a clash labels with and DIR:VARIANT the form a run is given in: either picks
    the baseline whether or not another run shares the variant's name."""
    wanted = form.format(name=run.name, path=run)
    assert compare([(RunDir(run), None)], wanted).baseline == "fp8"
    res = runner.invoke(app, ["report", str(run), "--out", str(run.parent / "page"), "--baseline", wanted])
    assert res.exit_code == 0, res.output
    assert "baseline `fp8`" in (run.parent / "page" / "report.md").read_text()


def test_a_baseline_name_two_runs_share_asks_for_run_name(tmp_path):
    a = build_run(tmp_path, "20250101-000000-a", {"bf16": {}, "fp8": {"wrong": range(4)}})
    b = build_run(tmp_path, "20250105-000000-b", {"bf16": {}, "fp8": {}})
    res = runner.invoke(app, ["compare", str(a), str(b), "--baseline", "bf16"])
    assert res.exit_code == 2 and res.stderr == (
        "evalsuite: error: --baseline: 'bf16' is ambiguous, give RUN:NAME (allowed: 20250101-000000-a:bf16, "
        "20250101-000000-a:fp8, 20250105-000000-b:bf16, 20250105-000000-b:fp8)\n")
    assert compare([(RunDir(a), None), (RunDir(b), None)], f"{b}:bf16").baseline == "20250105-000000-b:bf16"
    res = runner.invoke(app, ["report", str(a), str(b), "--out", str(tmp_path / "o"), "--baseline", f"{b.name}:nope"])
    assert res.exit_code == 2 and res.stderr == (
        f"evalsuite: error: --baseline: '{b.name}:nope' is not a variant of run {b.name} (allowed: bf16, fp8)\n")


def test_first_variant_without_config_baseline(tmp_path):
    run = build_run(tmp_path, "20250101-000000-x", {"a": {}, "b": {}})
    assert compare([(RunDir(run), None)]).baseline == "a"


def test_a_baseline_without_results_is_refused_naming_those_with_some(tmp_path):
    """An interrupted run's baseline that never started, or one that failed: a table of changes
    against it would be all blanks, so compare says so in one line and names the usable ones."""
    run = build_run(tmp_path, "20250101-000000-p", {"bf16": {"status": "pending", "reason": "not started"},
                                                    "fp8": {}, "int4": {"status": "failed", "reason": "boom"}},
                    baseline="bf16")
    res = runner.invoke(app, ["compare", str(run)])
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert "--baseline: bf16 is pending (not started): give one with results (allowed: fp8)" in res.output
    res = runner.invoke(app, ["compare", str(run), "--baseline", "int4"])
    assert res.exit_code == 2 and "int4 is failed (boom)" in res.output, res.output
    assert runner.invoke(app, ["compare", str(run), "--baseline", "fp8"]).exit_code == 0


def test_labels_disambiguate_across_runs(tmp_path):
    a = build_run(tmp_path, "20250101-000000-a", {"bf16": {}, "fp8": {}})
    b = build_run(tmp_path, "20250101-000000-b", {"bf16": {}})
    c = compare([(RunDir(a), None), (RunDir(b), None)], "20250101-000000-b:bf16")
    assert list(c.frame.index) == ["20250101-000000-a:bf16", "fp8", "20250101-000000-b:bf16"]
    with pytest.raises(Exception, match="ambiguous"):
        compare([(RunDir(a), None), (RunDir(b), None)], "bf16")


def test_formats(run):
    md = runner.invoke(app, ["compare", str(run), "--format", "markdown"])
    assert md.exit_code == 0
    assert "| metric | fp8 (baseline) | bf16 | waste | int4 |" in md.stdout
    assert "| mmlu/acc | 0.850 (.794–.893, n=200) | 0.900 (.851–.934, n=200) +5.0 pt [+2.4, +9.0] |" in md.stdout
    assert "exact unconditional test on Tango's statistic; exact McNemar" in md.stdout
    csv = runner.invoke(app, ["compare", str(run), "--format", "csv"])
    frame = pd.read_csv(io.StringIO(csv.stdout), index_col="variant")
    assert frame.at["bf16", "mmlu/acc delta_pt"] == pytest.approx(5.0)
    assert frame.at["bf16", "engine/weights_gib delta_pct"] == pytest.approx(100.0)
    assert frame.at["bf16", "mmlu/acc paired delta_pt ci95 low"] == pytest.approx(2.37, abs=0.01)
    data = json.loads(runner.invoke(app, ["compare", str(run), "--format", "json"]).stdout)["variants"]["bf16"]
    assert data["metrics"]["mmlu/acc"]["delta_pt"] == pytest.approx(5.0) and data["metrics"]["mmlu/acc"]["delta_pct"] is None
    weights = data["metrics"]["engine/weights_gib"]
    assert weights["delta_pct"] == pytest.approx(100.0) and weights["delta_pt"] is None and weights["unit"] == "GiB"
    assert frame.at["fp8", "mmlu/acc ci95 low"] == pytest.approx(0.794, abs=0.001)
    assert "needle/acc/len4096" in frame.columns  # CSV holds every metric, not only the headline
    table = runner.invoke(app, ["compare", str(run), "--metric", "engine/*"])
    assert table.exit_code == 0 and "weights" in table.stdout and "mmlu/acc" not in table.stdout
    assert runner.invoke(app, ["compare", str(run), "--format", "html"]).exit_code == 2


def test_out_writes_report_and_plots(run, tmp_path):
    out = tmp_path / "report"
    res = runner.invoke(app, ["compare", str(run), "--out", str(out)])
    assert res.exit_code == 0, res.output
    names = sorted(p.name for p in out.iterdir())
    assert names == ["accuracy_vs_context.png", "accuracy_vs_kv_tokens.png", "accuracy_vs_weights_gib.png",
                     "compare.csv", "compare.md", "latency_vs_context.png"]
    assert all((out / n).read_bytes()[:4] == b"\x89PNG" for n in names if n.endswith(".png"))


def test_plots_skip_missing_data(tmp_path):
    run = build_run(tmp_path, "20250101-000000-x", {"a": {}, "b": {"weights_gib": 0.5}})
    out = tmp_path / "report"
    from evalsuite.report.compare_view import write_report

    names = sorted(p.name for p in write_report(compare([(RunDir(run), None)]), out))
    assert names == ["accuracy_vs_kv_tokens.png", "accuracy_vs_weights_gib.png", "compare.csv", "compare.md"]


def test_partial_variants_stay_off_the_front(tmp_path):
    """A variant scored on a subset of items (partial) is drawn apart and never makes the front."""
    frame = pd.DataFrame({"status": ["ok", "ok", "partial"], "engine/weights_gib": [3.3, 1.5, 1.5],
                          "mmlu/acc": [0.485, 0.46, 0.498]}, index=["bf16", "awq", "gguf"])
    assert front_labels(frame, "engine/weights_gib", "mmlu/acc", {"gguf"}, True) == ["awq", "bf16"]
    assert front_labels(frame, "engine/weights_gib", "mmlu/acc", set(), True) == ["gguf"]
    made = write_plots(frame, ["mmlu/acc"], tmp_path, {})
    assert [p.name for p in made] == ["accuracy_vs_weights_gib.png"]


def test_a_partial_variants_finished_task_counts_whole(tmp_path, monkeypatch):
    """A variant cut in one task (status partial) that finished another: on the finished task's
    panel its point is filled and may make the front; on the cut task's, hollow and off it. Each
    variant keeps its look across panels, and one legend below the panels names them (labels
    written beside the points overlapped)."""
    from matplotlib.colors import to_hex

    from evalsuite.report import plots

    frame = pd.DataFrame({"status": ["ok", "ok", "partial"], "engine/weights_gib": [3.3, 1.5, 1.05],
                          "mmlu/acc": [0.485, 0.46, 0.486], "needle/acc": [1.0, 1.0, 1.0]},
                         index=["bf16", "awq", "gguf"])
    counts = {(v, "mmlu/acc"): 14042 for v in frame.index} | {("bf16", "needle/acc"): 150,
                                                               ("awq", "needle/acc"): 150, ("gguf", "needle/acc"): 20}
    assert plots._incomplete(frame, "mmlu/acc", counts) == set()
    assert plots._incomplete(frame, "needle/acc", counts) == {"gguf"}
    assert plots._incomplete(frame, "mmlu/acc", None) == {"gguf"}  # counts unknown: the status decides
    figs = []
    real = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, path: figs.append(fig) or real(fig, path))
    plots.plot_tradeoff(frame, ["mmlu/acc", "needle/acc"], "engine/weights_gib", "weights GiB", True,
                        tmp_path / "w.png", counts=counts)
    (fig,) = figs
    mmlu_ax, needle_ax = fig.axes[:2]
    fill = {ax: [c.lines[0].get_markerfacecolor() for c in ax.containers] for ax in (mmlu_ax, needle_ax)}
    assert fill[mmlu_ax][2] != "none" and fill[needle_ax][2] == "none"  # gguf: whole on MMLU, cut on the needle
    looks = [[(to_hex(c.lines[0].get_color()), c.lines[0].get_marker()) for c in ax.containers]
             for ax in (mmlu_ax, needle_ax)]
    assert looks[0] == looks[1] and len(set(looks[0])) == 3
    front = lambda ax: sorted(round(x, 2) for x in ax.collections[-1].get_offsets()[:, 0])
    assert front(mmlu_ax) == [1.05] and front(needle_ax) == [1.5]
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["bf16", "awq", "gguf (partial)", "Pareto front"]
    assert all(ax.get_legend() is None for ax in fig.axes)
    assert legend.get_window_extent().y1 <= min(ax.get_window_extent().y0 for ax in fig.axes if ax.get_visible())


def test_context_plot_has_one_legend_below_its_panels(tmp_path, monkeypatch):
    """Every panel of the accuracy-vs-context figure has the same variants: one legend for the figure,
    below the panels, where it covers no points (a legend inside each panel hid them)."""
    from evalsuite.report import plots

    frame = pd.DataFrame({"status": ["ok"] * 3, "needle/acc/len4096": [1.0, 0.9, 0.2],
                          "needle/acc/len8192": [1.0, 0.8, 0.1], "legal_long/acc/len4096": [0.9, 0.9, 0.3],
                          "legal_long/acc/len8192": [0.9, 0.8, 0.2]}, index=["bf16", "fp8", "kv_fp8"])
    figs = []
    real = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, path: figs.append(fig) or real(fig, path))
    bases = ["needle/acc", "legal_long/acc"]
    assert plots.plot_vs_context(frame, recorded_meaning(frame), bases, "t", tmp_path / "c.png") is not None
    (fig,) = figs
    assert [ax.get_legend() for ax in fig.axes] == [None, None]
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["bf16", "fp8", "kv_fp8"]
    legend_top = legend.get_window_extent().y1
    assert all(legend_top <= ax.get_window_extent().y0 for ax in fig.axes)  # below every panel


def test_context_plot_tells_many_variants_apart(tmp_path, monkeypatch):
    """A sweep of more variants than matplotlib's ten default colours: no two lines look alike, and a
    variant keeps its look from panel to panel."""
    from matplotlib.colors import to_hex

    from evalsuite.report import plots

    names = [f"v{i}" for i in range(14)]
    frame = pd.DataFrame({"status": ["ok"] * 14, "needle/acc/len4096": [0.5] * 14, "needle/acc/len8192": [0.4] * 14,
                          "legal_long/acc/len4096": [0.3] * 14, "legal_long/acc/len8192": [0.2] * 14}, index=names)
    figs = []
    real = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, path: figs.append(fig) or real(fig, path))
    plots.plot_vs_context(frame, recorded_meaning(frame), ["needle/acc", "legal_long/acc"], "t", tmp_path / "c.png")
    looks = [[(to_hex(c.lines[0].get_color()), c.lines[0].get_marker()) for c in ax.containers]
             for ax in figs[0].axes]
    assert len(set(looks[0])) == 14 and looks[0] == looks[1]


def test_pareto_front():
    # (weights GiB, accuracy): c is beaten by a (less memory, more accuracy)
    pts = [(0.5, 0.80), (1.0, 0.90), (1.5, 0.70), (0.4, 0.60)]
    assert pareto_front(pts, x_lower_is_better=True) == [3, 0, 1]
    # (KV tokens, accuracy), more tokens is better
    assert pareto_front([(100, 0.9), (200, 0.8), (50, 0.85)], x_lower_is_better=False) == [0, 1]


def recorded(name: str) -> Metric:  # a metric as a run folder from before metrics carried their meaning holds it
    return Metric(name=name, value=0.5)


def recorded_meaning(frame: pd.DataFrame) -> dict[str, Metric]:
    return {c: recorded(c) for c in frame.columns if c != "status"}


def test_context_series_and_units():
    frame = pd.DataFrame(columns=["needle/acc/len1024", "needle/acc/len4096", "latency/ttft_ms_p50/ctx512", "mmlu/acc",
                                  "needle/acc/len1024_depth50", "ruler/score/vt_len1024"])
    assert context_series(frame, recorded_meaning(frame)) == {
        "needle/acc": {1024: "needle/acc/len1024", 4096: "needle/acc/len4096"},
        "latency/ttft_ms_p50": {512: "latency/ttft_ms_p50/ctx512"}}

    def in_points(name: str) -> bool:
        return recorded(name).in_points

    assert in_points("mmlu/acc") and in_points("needle/acc/len1024") and in_points("mmlu/acc/abstract_algebra")
    assert not any(map(in_points, ["latency/ttft_ms_p50", "mmlu/wall_s"]))
    # a workload task's timings carry their unit before the statistic
    assert not any(map(in_points, ["mixed/ttft_ms_p50", "mixed/itl_ms_mean", "sysprompt/e2e_ms_p90"]))
    assert all(recorded(n).item_score for n in ["mmlu/acc", "needle/acc/len1024", "legal/balanced_acc", "mmlu/acc_macro"])
    assert not any(recorded(n).item_score for n in ["sysprompt/prefix_hit_rate", "needle/decoy_rate", "mmlu/acc_ci95_low",
                                                    "mixed/ttft_ms_p50", "legal/argmax_balanced_acc"])
    assert meaning_of_name("latency/ttft_ms_p99/ctx512")["percentile"] == 99


def test_a_workloads_timings_get_no_interval_over_items(tmp_path):
    """A timed request scores 1.0 (nothing to get right): pairing those would give every timing and
    hit rate a 0-point delta with a made-up interval; they compare in percent, without one."""
    from evalsuite.core.types import EngineStats, Metric, RunRecord, Score, VariantResult

    rd = RunDir(tmp_path / "20260101-000000-w")
    rd.write_config({"model": {"hub": "org/tiny"}, "variants": {"a": {}, "b": {}}})
    record = RunRecord(run_id=rd.run_id, model="tiny")
    for name, ttft in (("a", 1000.0), ("b", 900.0)):
        rd.append_samples(name, "mixed", [{"sample": {"id": f"r{i}"}, "completion": {},
                                           "score": Score(sample_id=f"r{i}", task="mixed", value=1.0, pred="",
                                                          target="").model_dump()} for i in range(8)])
        result = VariantResult(variant=name, status="ok", engine=EngineStats(), metrics=[
            Metric(name="mixed/ttft_ms_p50", value=ttft, n=8),
            Metric(name="mixed/prefix_hit_rate", value=0.5, n=8)])
        rd.write_result(result)
        record.variants.append(result)
    rd.write_run(record)
    c = compare([(rd, None)], patterns=["mixed/*"])
    assert not c.paired and not c.intervals
    assert c.cell("b", "mixed/ttft_ms_p50") == ["900", "-10.0%"]


def test_metric_globs_that_match_nothing_are_one_line(run):
    res = runner.invoke(app, ["compare", str(run), "--metric", "mmlu/x", "--metric", "mmlu/acc*x"])
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.startswith("evalsuite: error: --metric: 'mmlu/x', 'mmlu/acc*x' match no metric of these runs "
                                 "(they hold mmlu/acc, ")
    assert res.stderr.count("\n") == 1
    # one set of globs over runs of different tasks: those that match make the table
    assert runner.invoke(app, ["compare", str(run), "--metric", "mmlu/acc", "--metric", "ruler/*"]).exit_code == 0


def test_not_a_run_dir(tmp_path):
    res = runner.invoke(app, ["compare", str(tmp_path)])
    assert res.exit_code == 2 and "not a run directory" in res.stderr


def test_several_run_folders_side_by_side(tmp_path):
    a = build_run(tmp_path, "20250101-000000-a", {"bf16": {"wrong": range(20)}, "fp8": {"wrong": range(24)}})
    b = build_run(tmp_path, "20250105-000000-b", {"awq": {"wrong": range(30)}, "fp8": {}}, n=120)
    res = runner.invoke(app, ["compare", str(a), f"{b}:awq", f"{b}:fp8", "--baseline", "20250101-000000-a:fp8",
                              "--format", "markdown"])
    assert res.exit_code == 0, res.output
    assert "| metric | 20250101-000000-a:fp8 (baseline) | bf16 | awq | 20250105-000000-b:fp8 |" in res.stdout
    c = compare([(RunDir(a), None), (RunDir(b), {"awq"})], "fp8")
    # awq (run b, 120 items) pairs with fp8 (run a, 200 items) on the 120 ids both answered
    # (0.75 vs 0.88 over all their items, but 0.75 vs 0.80 on the shared ones: the paired delta is shown)
    assert c.cell("awq", "mmlu/acc")[2:] == ["-5.0 pt‡", "[-10.6, -1.3]"]
    assert c.cell("bf16", "mmlu/acc")[2:] == ["+2.0 pt", "[+0.0, +5.0]"]
    bad = runner.invoke(app, ["compare", str(a), f"{b}:nope"])
    assert bad.exit_code == 2 and "no such variant" in bad.stderr


def test_roofline_percentages_read_as_percent():
    from evalsuite.report.names import fmt_value

    recorded = Metric(name="roofline/ttft_pct_of_floor/ctx1024", value=131.4)
    assert not recorded.in_points and recorded.unit == "%"
    assert fmt_value(recorded.unit, 131.4) == "131%"
    assert fmt_value("", 0.5) == "0.500"


def test_an_unchanged_score_reads_plus_zero_not_minus_zero(tmp_path):
    """Two variants that answer every item alike: the change is 0, negated from a drop of 0, which
    printed "-0.0 pt" (and JSON -0.0) as though the candidate had lost something."""
    run = build_run(tmp_path, "20250101-000000-z", {"bf16": {"wrong": range(5)}, "kv_fp8": {"wrong": range(5)}},
                    n=40, baseline="bf16")
    d = compare([(RunDir(run), None)], "bf16").paired[("kv_fp8", "mmlu/acc")]
    assert str(d.delta) == "0.0" and str(d.low)[0] == "-" and str(d.high)[0] != "-"
    text = runner.invoke(app, ["compare", str(run), "--baseline", "bf16"], env={"COLUMNS": "200"}).output
    assert "+0.0 pt" in text and "-0.0 pt" not in text


def test_latency_not_timed_as_the_baseline_was_is_marked(tmp_path):
    """fp8's pass ran beside neighbours paused on a card never found idle: its latency cells carry ≠ and
    the legend says why; its accuracy carries none; bf16's own cells, timed alone on an idle card, none."""
    idle = {"neighbours": "none", "idle": "nvml", "idle_ok": True, "warmup": 2}
    run = build_run(tmp_path / "runs", "20250101-000000-a", {
        "bf16": {"ttft": {2048: 30.0}, "timing": idle},
        "fp8": {"ttft": {2048: 27.0}, "timing": {**idle, "neighbours": "paused", "idle": None, "idle_ok": None}}})
    res = runner.invoke(app, ["compare", str(run), "--format", "markdown"])
    assert res.exit_code == 0, res.output
    rows = {line.split(" | ")[0]: line for line in res.stdout.splitlines() if line.startswith("| ")}
    assert rows["| latency/ttft_ms_p50/ctx2048"] == "| latency/ttft_ms_p50/ctx2048 | 30 | 27≠ -10.0% |"
    assert "≠" not in rows["| mmlu/acc"]
    assert "≠ latency not timed as the baseline's was, so not compared" in res.stdout
    assert "fp8 (the candidate neighbours paused but the device not verified idle" in res.stdout


def test_latency_timed_on_a_loaded_host_is_marked(tmp_path):
    """bf16's latency pass ran at a 1-minute load of 9 on 4 CPUs: its latency cells carry the mark and
    the legend says its load; its accuracy, and fp8's latency timed on a quiet host, carry none."""
    from evalsuite.report.compare_view import terminal_view

    loaded = {**VARIANTS["bf16"], "host_load": {"cpus": 4, "start": [9.0, 6.0, 3.0], "end": [8.0, 6.0, 3.0]}}
    quiet = {**VARIANTS["fp8"], "host_load": {"cpus": 4, "start": [0.5, 0.5, 0.5], "end": [0.5, 0.5, 0.5]}}
    run = build_run(tmp_path, "20250101-000000-h", {"bf16": loaded, "fp8": quiet}, baseline="fp8")
    res = runner.invoke(app, ["compare", str(run), "--format", "markdown"])
    assert res.exit_code == 0, res.output
    rows = {line.split(" | ")[0]: line for line in res.stdout.splitlines() if line.startswith("| ")}
    assert rows["| latency/ttft_ms_p50/ctx2048"] == "| latency/ttft_ms_p50/ctx2048 | 27 | 30† +11.1% |"
    assert "†" not in rows["| mmlu/acc"]
    assert "† latency timed on a loaded host" in res.stdout
    assert "bf16 (1-min load 9.0 at start, 8.0 at end, 4 CPUs)" in res.stdout and "fp8 (1-min" not in res.stdout
    console = Console(width=80, record=True, file=io.StringIO())
    for part in terminal_view(compare([(RunDir(run), None)]), 80):
        console.print(part)
    text = console.export_text()
    assert "30†" in text and "loaded host" in text
    # CSV and JSON carry it as data, for a script to filter on
    table = pd.read_csv(io.StringIO(runner.invoke(app, ["compare", str(run), "--format", "csv"]).stdout), index_col=0)
    assert table.at["bf16", "latency host loaded"] and not table.at["fp8", "latency host loaded"]
    assert table.at["bf16", "latency host load 1m"] == 9.0
    variants = json.loads(runner.invoke(app, ["compare", str(run), "--format", "json"]).stdout)["variants"]
    assert variants["bf16"]["host_load"]["loaded"] and variants["bf16"]["host_load"]["cpus"] == 4
    assert variants["fp8"]["host_load"]["loaded"] is False


def test_a_published_run_folder_from_before_the_totals_were_named_so_still_reads(results_pages):
    """A results page's archive keeps run folders as they were written (h200-2026-11-29's, fetched):
    their `needle/prompt_tokens` (a total, as `needle/prompt_tokens_total` now says) still reads as a
    token count, and with no host load recorded their latency carries no mark."""
    from evalsuite.report.compare_view import to_csv, to_markdown
    from evalsuite.results import page_data

    c = compare([(RunDir(page_data("h200-2026-11-29", results_pages)), None)])
    assert c.meaning["needle/prompt_tokens"].unit == "tokens" and not c.meaning["needle/prompt_tokens"].in_points
    assert c.frame.at["bf16", "needle/prompt_tokens"] == 638832.0
    assert "needle/prompt_tokens delta_pct" in to_csv(c)
    assert "†" not in to_markdown(c) and all(v is None for v in c.loads().values())


def _set_pool(run: Path, variant: str, device: str, fixed: int | None = None) -> None:
    path = run / "run.json"
    rec = json.loads(path.read_text())
    v = next(v for v in rec["variants"] if v["variant"] == variant)
    v["engine"]["device"] = device
    if fixed:
        v["settings"] = {**v["settings"], "engine_args": {"kv_cache_memory_bytes": fixed}}
    path.write_text(json.dumps(rec))


def test_kv_capacity_from_another_gpus_pool_gets_no_delta(tmp_path):
    """vLLM carves the KV pool from the card's free memory: a variant measured on an H100 against an H200
    baseline would show the cards' difference as the variant's capacity change. Such a cell says whose
    pool it is instead of a delta; weights and scores still compare. Fixed pools of one size compare
    across cards."""
    run = build_run(tmp_path, "20250101-000000-pools", {"bf16": {}, "fp8": {"kv_cache_tokens": 20000}})
    _set_pool(run, "bf16", "NVIDIA H200")
    _set_pool(run, "fp8", "NVIDIA H100 80GB HBM3")
    c = compare([(RunDir(run), None)], "bf16")
    assert c.cell("fp8", "engine/kv_cache_tokens") == ["20,000", "another device's pool"]
    assert math.isnan(c.deltas.at["fp8", "engine/kv_cache_tokens"])
    assert c.cell("fp8", "engine/weights_gib")[1] == "+0.0%"
    csv = runner.invoke(app, ["compare", str(run), "--baseline", "bf16", "--format", "csv"])
    frame = pd.read_csv(io.StringIO(csv.stdout), index_col="variant")
    assert math.isnan(frame.at["fp8", "engine/kv_cache_tokens delta_pct"]) and frame.at["fp8", "engine/kv_cache_tokens"] == 20000
    md = runner.invoke(app, ["compare", str(run), "--baseline", "bf16", "--format", "markdown"]).stdout
    assert "another device's pool: KV capacity measured on another device model" in md
    assert c.plot_frame()["engine/kv_cache_tokens"].isna().tolist() == [False, True]
    for v in ("bf16", "fp8"):
        _set_pool(run, v, "NVIDIA H200" if v == "bf16" else "NVIDIA H100 80GB HBM3", fixed=2**30)
    assert compare([(RunDir(run), None)], "bf16").cell("fp8", "engine/kv_cache_tokens") == ["20,000", "+100.0%"]


def test_kv_capacity_on_one_gpu_model_keeps_its_delta(run):
    assert "another device" not in compare([(RunDir(run), None)]).cell("bf16", "engine/kv_cache_tokens")[-1]
    md = runner.invoke(app, ["compare", str(run), "--format", "markdown"]).stdout
    assert "another device's pool" not in md
