"""What MLflow shows a reviewer: per variant its gate verdict with the checks that failed it, its
headline accuracy changes against the baseline with their paired two-sided 95% intervals, weights,
KV capacity and TTFT, as the first columns of the runs table, which the printed link opens.

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

from evalsuite.report.page import Report, Row, longest_common

VIEW_KEY = "evalsuite"
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_KEY}"
T_VERDICT = "evalsuite.verdict"
LOCAL_UI = "http://127.0.0.1:5000"  # where `mlflow ui` serves a local store
# the runs table's display columns after the verdict, as tag keys (MLflow allows letters, digits,
# `_ - . / :` and spaces): the header a reviewer reads
T_WEIGHTS, T_KV = "weights GiB", "KV tokens"
FIRST_CHANGES = 3  # headline changes before weights, KV and TTFT: what fits a 1400-px window (WIDTHS)


def delta_key(metric: str) -> str:
    """The MLflow key of a metric's change against the baseline, its unit (points) as the suffix."""
    return f"delta/{metric}_pt"


def change_tag(metric: str) -> str:
    """The display column of a headline accuracy's change, in points: `Δ mmlu/acc pt`."""
    return f"Δ {metric} pt"


def ttft_tag(length: int) -> str:
    """`TTFT ms at 1K`: the median time to first token at the longest prompt every timed variant had."""
    return f"TTFT ms at {length // 1024}K" if length % 1024 == 0 else f"TTFT ms at {length}"


def decimals(half_width: float) -> int:
    """Decimals a figure with this interval half-width supports: to one digit past the half-width's
    first significant one (±26.6 pt: none; ±3.4 pt: one; ±0.008: four)."""
    if not half_width or not math.isfinite(half_width):
        return 1
    return max(0, 1 - math.floor(math.log10(abs(half_width))))


def change_text(delta: float, low: float, high: float) -> str:
    """`-7.0 [-7.8, -6.3]`: a change in points with its two-sided 95% interval, at its precision."""
    d = decimals((high - low) / 2)

    def pt(v: float) -> str:
        text = f"{v:+.{d}f}"
        return text.replace("-", "+", 1) if float(text) == 0 else text  # never "-0.0"

    return f"{pt(delta)} [{pt(low)}, {pt(high)}]"


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
        tags.update({change_tag(m): change_text(d.delta, d.low, d.high) for m, d in row.delta.items()})
        if row.weights_gib is not None:
            tags[T_WEIGHTS] = f"{row.weights_gib:.3f}"  # the engine's own byte count: exact to the MiB
        if row.kv_tokens is not None:
            tags[T_KV] = f"{row.kv_tokens:,}"
        if n is not None and n in row.ttft:  # a median of repeated requests: no interval, to 0.1 ms
            # marked where it was not timed as the baseline's (the run's `evalsuite.latency_timed` tag says how)
            tags[ttft_tag(n)] = f"{row.ttft[n]:.1f}" + (" ≠" if row.timed_apart else "")
        out[row.name] = (metrics, tags)
    return out


def view_columns(report: Report) -> list[str]:
    """The runs table's first columns, as the UI names them: verdict and why, each headline accuracy's
    change with its interval, weights, KV capacity, TTFT; only those some variant logs."""
    logged = {k for _, tags in variant_review(report).values() for k in tags}
    changes = [change_tag(m) for m in report.primary if change_tag(m) in logged]
    n = longest_common(report, report.rows)
    keys = [T_VERDICT, *changes[:FIRST_CHANGES], T_WEIGHTS, T_KV, *([ttft_tag(n)] if n else []), *changes[FIRST_CHANGES:]]
    return [f"tags.`{k}`" for k in keys if k in logged]


# Widths (px) that fit the first columns in a 1400-px window beside MLflow's run name and start time,
# which stay first (ag-grid column ids; the UI applies a width only to a column named in columnOrder,
# and puts those it does not name, such as the duration, after the ones it does).
OWN = {"attributes.`Run Name`": 170, "runDateAndNestInfo": 80}
WIDTHS = {T_VERDICT: 180, T_WEIGHTS: 85, T_KV: 80}
WIDTH_CHANGE, WIDTH_OTHER = 125, 93  # `-30.0 [-36.7, -24.1]`; `TTFT ms at 32K`


def _width(column: str) -> int:
    key = column.removeprefix("tags.`").removesuffix("`")
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
