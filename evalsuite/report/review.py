"""What MLflow shows a reviewer: per variant its gate verdict and its accuracy changes against the
baseline (`delta/<task>/<metric>_pt`: in points, as computed; the UI rounds what it shows, and a
client reading them back gets every digit), and a saved view of the runs table with those columns,
which the printed link opens.

MLflow 3's UI opens an experiment on its GenAI views unless the link says `workflowType=
machine_learning`, and shows no metric column until one is chosen; a view saved as the experiment
tag `mlflow.sharedViewState.<key>` and named by `viewStateShareKey=<key>` in the link chooses them.
No mlflow import here: tracking.py logs what this module computes.
"""

from __future__ import annotations

import json
from urllib.parse import urlencode

from evalsuite.report.names import ENGINE_COLUMNS
from evalsuite.report.page import Report

VIEW_KEY = "evalsuite"
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_KEY}"
T_VERDICT = "evalsuite.verdict"
LOCAL_UI = "http://127.0.0.1:5000"  # where `mlflow ui` serves a local store


def delta_key(metric: str) -> str:
    """The MLflow key of a metric's change against the baseline, its unit (points) as the suffix."""
    return f"delta/{metric}_pt"


def variant_review(report: Report) -> dict[str, tuple[dict[str, float], dict[str, str]]]:
    """variant -> (delta metrics, tags) as its MLflow run gets them."""
    out = {}
    for row in report.rows:
        metrics = {delta_key(m): d.delta for m, d in row.delta.items()}
        verdict = "baseline" if row.baseline else row.verdict or ("-" if row.status == "ok" else row.status)
        out[row.name] = (metrics, {T_VERDICT: verdict})
    return out


def view_columns(report: Report) -> list[str]:
    """The runs table's columns, as the UI names them: verdict, headline accuracies, their changes,
    weights and KV capacity."""
    cols = [f"tags.`{T_VERDICT}`"]
    cols += [f"metrics.`{m}`" for m in report.primary]
    cols += [f"metrics.`{delta_key(m)}`" for m in report.primary]
    cols += [f"metrics.`engine/{field}`" for field, _, _ in ENGINE_COLUMNS]
    return cols


def view_state(columns: list[str], parent_run_id: str, previous: str | None = None) -> str:
    """The saved view's JSON: these columns (after any an earlier run saved), parents expanded."""
    state = {}
    if previous:
        try:
            state = json.loads(previous)
        except json.JSONDecodeError:
            state = {}
    kept = [c for c in state.get("selectedColumns", []) if c not in columns]
    expanded = {**state.get("runsExpanded", {}), parent_run_id: True}
    state.update({"selectedColumns": [*columns, *kept], "runsExpanded": expanded, "runsHiddenMode": "SHOW_ALL"})
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
