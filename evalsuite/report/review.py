"""What MLflow shows a reviewer: per variant its gate verdict with the checks that failed it, its
headline accuracy changes against the baseline with their paired two-sided 95% intervals (§: a
confidence sequence, said in the run's description), weights, KV capacity, TTFT and ITL, as the first
columns of the runs table, which the printed link opens; on the parent run, the run's decision; on
the experiment, a description that says where the runs are.

The columns are display tags, each figure written at the precision its interval supports (`-8
[-35, +18]` for a change 12 items measure, not -8.3333333): the runs table shows a metric with
every digit it holds. The metrics themselves keep every digit for a client reading them back
(`delta/<task>/<metric>_pt`: the change in points). No column names a key a variant did not log.

MLflow 3's UI opens an experiment on its GenAI views unless the link says `workflowType=
machine_learning`, and shows no metric column until one is chosen; a view saved as the experiment
tag `mlflow.sharedViewState.<key>` and named by `viewStateShareKey=<key>` in the link chooses them
and their order. No mlflow import here: tracking.py logs what this module computes.
"""

from __future__ import annotations

import json
import math
from urllib.parse import urlencode

from evalsuite.report.compare import SEQUENCE_NOTE
from evalsuite.report.page import HELD, Report, Row, decision, longest_common, passed_but_held, passed_gate

VIEW_KEY = "evalsuite"
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_KEY}"
T_VERDICT = "evalsuite.verdict"
T_NOTE = "mlflow.note.content"  # the description of a run (on its page) or an experiment (atop each of its pages)
LOCAL_UI = "http://127.0.0.1:5000"  # where `mlflow ui` serves a local store
# the runs table's display columns after the verdict, as tag keys (MLflow allows letters, digits,
# `_ - . / :` and spaces): the header a reviewer reads
T_WEIGHTS, T_KV = "weights GiB", "KV tokens"
FIRST_CHANGES = 3  # headline changes before weights, KV, TTFT and ITL: what fits a 1400-px window (WIDTHS)


def delta_key(metric: str) -> str:
    """The MLflow key of a metric's change against the baseline, its unit (points) as the suffix."""
    return f"delta/{metric}_pt"


def change_tag(metric: str) -> str:
    """The display column of a headline accuracy's change, in points: `Δ mmlu/acc pt`."""
    return f"Δ {metric} pt"


def ttft_tag(length: int) -> str:
    """`TTFT ms at 1K`: the median time to first token at the longest prompt every timed variant had."""
    return f"TTFT ms at {_length(length)}"


def itl_tag(length: int) -> str:
    """`ITL ms at 1K`: the median time between output tokens after a prompt of that length."""
    return f"ITL ms at {_length(length)}"


def _length(tokens: int) -> str:
    return f"{tokens // 1024}K" if tokens % 1024 == 0 else str(tokens)


def decimals(half_width: float) -> int:
    """Decimals a figure with this interval half-width supports: to one digit past the half-width's
    first significant one (±26.6 pt: none; ±3.4 pt: one; ±0.008: four)."""
    if not half_width or not math.isfinite(half_width):
        return 1
    return max(0, 1 - math.floor(math.log10(abs(half_width))))


def change_text(delta: float, low: float, high: float, sequence: bool = False) -> str:
    """`-7.0 [-7.8, -6.3]`: a change in points with its two-sided 95% interval, at its precision. A
    stopped candidate's confidence sequence that excludes the change (`sequence`) reads `§ [-4.2, +1.5]`:
    the interval is the estimate, as compare's `confidence sequence§` cell, in no more width than a
    change (the first screen's columns); the words are the run's description (sequence_note)."""
    d = decimals((high - low) / 2)

    def pt(v: float) -> str:
        text = f"{v:+.{d}f}"
        return text.replace("-", "+", 1) if float(text) == 0 else text  # never "-0.0"

    return f"{'§' if sequence else pt(delta)} [{pt(low)}, {pt(high)}]"


def sequence_note(row: Row) -> str | None:
    """What § beside the row's changes means, naming their columns; None where none is marked."""
    marked = [change_tag(m) for m, d in row.delta.items() if d.sequence and d.outside]
    return f"{SEQUENCE_NOTE}: {', '.join(marked)}." if marked else None


def verdict_text(row: Row) -> str:
    """The verdict and, for a failed variant, the checks that failed it (the gate's own words)."""
    if row.baseline:
        return "baseline"
    verdict = row.verdict or ("-" if row.status == "ok" else row.status)
    return verdict + (f": {row.failing}" if row.verdict == "failed" and row.failing else "")


def variant_review(report: Report) -> dict[str, tuple[dict[str, float], dict[str, str]]]:
    """variant -> (delta metrics at full precision, display tags) as its MLflow run gets them."""
    n = longest_common(report, report.rows)
    out = {}
    for row in report.rows:
        metrics = {delta_key(m): d.delta for m, d in row.delta.items()}
        tags = {T_VERDICT: verdict_text(row)}
        tags.update({change_tag(m): change_text(d.delta, d.low, d.high, d.sequence and d.outside)
                     for m, d in row.delta.items()})
        if note := sequence_note(row):
            tags[T_NOTE] = note
        if row.weights_gib is not None:
            tags[T_WEIGHTS] = f"{row.weights_gib:.3f}"  # the engine's own byte count: exact to the MiB
        if row.kv_tokens is not None:
            tags[T_KV] = f"{row.kv_tokens:,}"
        if n is not None and n in row.ttft:  # a median of repeated requests: no interval, to 0.1 ms
            # marked where it was not timed as the baseline's (the run's `evalsuite.latency_timed` tag says how)
            tags[ttft_tag(n)] = f"{row.ttft[n]:.1f}" + (" ≠" if row.timed_apart else "")
        if n is not None and n in row.itl:
            tags[itl_tag(n)] = f"{row.itl[n]:.1f}" + (" ≠" if row.timed_apart else "")
        out[row.name] = (metrics, tags)
    return out


def run_review(report: Report) -> dict[str, str]:
    """The parent run's tags: the run's decision, short in the verdict column (its row reads as the
    answer, its variants nested under it as the evidence) and whole as the run's description."""
    marked = any(sequence_note(r) for r in report.rows)  # the report's footnote, once for the run
    return {T_VERDICT: short_decision(report),
            T_NOTE: f"Decision: {decision(report)}." + (f" {SEQUENCE_NOTE}." if marked else "")}


def short_decision(report: Report) -> str:
    """`2 of 3 passed: kv_fp8, w4a16_sim` or `none passed: 2 inconclusive, 1 failed`; decision() says why."""
    cands = [r for r in report.rows if not r.baseline and not r.control]
    passed = [r.name for r in passed_gate(report) if not r.baseline]
    if not cands:
        return "baseline only"
    if passed:
        return f"{len(passed)} of {len(cands)} passed: {', '.join(passed)}"
    held = passed_but_held(report)
    counts: dict[str, int] = {}
    for r in cands:
        key = HELD if r.name in held else r.verdict or r.status
        counts[key] = counts.get(key, 0) + 1
    return "none passed: " + ", ".join(f"{n} {v}" for v, n in counts.items())


def experiment_note(report: Report, run_id: str, experiment_id: str) -> str:
    """The experiment's description: these are runs, not traces, where to open them, and the latest
    run's decision. MLflow 3.17+ shows it atop each of the experiment's pages, the GenAI overview too,
    which otherwise reads "send your first trace"; which of its pages opens first is the browser's
    GenAI / Model training switch (or the link's workflowType), which no setting of the experiment decides."""
    link = runs_table_url("", experiment_id).removeprefix(LOCAL_UI)
    return (f"{NOTE_MARK} runs, not traces, each with its variants nested under it: open **Model training** (top "
            f"left), tab Runs, or [the runs table]({link}). Latest run {run_id}: {decision(report)}.")


NOTE_MARK = "evalsuite:"  # how a description evalsuite wrote starts; one written by a person is left alone


def view_columns(report: Report) -> list[str]:
    """The runs table's first columns, as the UI names them: verdict and why, each headline accuracy's
    change with its interval, weights, KV capacity, TTFT, ITL; only those some variant logs."""
    logged = {k for _, tags in variant_review(report).values() for k in tags}
    changes = [change_tag(m) for m in report.primary if change_tag(m) in logged]
    n = longest_common(report, report.rows)
    keys = [T_VERDICT, *changes[:FIRST_CHANGES], T_WEIGHTS, T_KV, *([ttft_tag(n), itl_tag(n)] if n else []),
            *changes[FIRST_CHANGES:]]
    return [f"tags.`{k}`" for k in keys if k in logged]


# Widths (px) that fit the first columns in a 1400-px window beside MLflow's run name and start time,
# which stay first (ag-grid column ids; the UI applies a width only to a column named in columnOrder,
# and puts those it does not name, such as the duration, after the ones it does): 1,064 px of the
# 1,073 the grid has beside its checkboxes once MLflow's Assistant panel is closed (measured in
# headless chromium by tests/test_mlflow_ui.py, MLflow 3.18), so that a nested variant's name and a
# change with its interval show whole.
OWN = {"attributes.`Run Name`": 160, "runDateAndNestInfo": 56}
WIDTHS = {T_VERDICT: 136, T_WEIGHTS: 84, T_KV: 72}
WIDTH_CHANGE, WIDTH_OTHER = 128, 80  # `-30.0 [-36.7, -24.1]`; `ITL ms at 1K`


def _width(column: str) -> int:
    key = column.removeprefix("tags.`").removesuffix("`")
    if key.startswith("TTFT"):
        return 92  # `TTFT ms at 1K`
    return WIDTHS.get(key, WIDTH_CHANGE if key.startswith("Δ ") else WIDTH_OTHER)


def view_state(columns: list[str], parent_run_id: str, previous: str | None = None) -> str:
    """The saved view's JSON: these columns first, in this order and at widths that fit a 1400-px
    window (after any an earlier run saved), parents expanded."""
    state = {}
    if previous:
        try:
            state = json.loads(previous)
        except json.JSONDecodeError:
            state = {}
    kept = [c for c in state.get("selectedColumns", []) if c not in columns]
    expanded = {**state.get("runsExpanded", {}), parent_run_id: True}
    widths = {**state.get("columnWidths", {}), **OWN, **{c: _width(c) for c in columns}}
    state.update({"selectedColumns": [*columns, *kept], "columnOrder": [*OWN, *columns, *kept], "columnWidths": widths,
                  "runsExpanded": expanded, "runsHiddenMode": "SHOW_ALL"})
    return json.dumps(state)


def runs_table_url(uri: str, experiment_id: str) -> str:
    """The experiment's runs table with the saved view; a local store's as `mlflow ui` serves it."""
    base = uri.rstrip("/") if uri.startswith(("http://", "https://")) else LOCAL_UI
    query = urlencode({"viewStateShareKey": VIEW_KEY, "workflowType": "machine_learning"})
    return f"{base}/#/experiments/{experiment_id}/runs?{query}"


def review_hint(uri: str, experiment_id: str) -> str:
    """The line `run` and `sync` print: the link, and for a local store the command that serves it."""
    url = runs_table_url(uri, experiment_id)
    if uri.startswith(("http://", "https://")):
        return f"MLflow: {url}"
    return f"MLflow: `mlflow ui --backend-store-uri {uri}`, then {url}"
