"""MLflow's own UI, in a real headless chromium, shows an evalsuite run as people expect: the
runs table lists the parent run, its variants nested under it, and each variant's task datasets.

Needs Debian's chromium (`apt-get install chromium`; scripts/setup_browser.sh). Without it the
test is skipped, unless EVALSUITE_REQUIRE_BROWSER=1 (as in .ci/run) makes that a failure.
"""

from __future__ import annotations

import os

import pytest

from mlflow.tracking import MlflowClient

from evalsuite.core.records import RunDir
from evalsuite.report.settings import TrackingConfig
from evalsuite.report.tracking import log_run
from evalsuite.report.review import VIEW_TAG
from tests.browser import Browser, dump_dom, find_chromium, page_text, screenshot
from tests.mlflow_server import build_run

if find_chromium() is None:
    if os.environ.get("EVALSUITE_REQUIRE_BROWSER"):
        raise RuntimeError("EVALSUITE_REQUIRE_BROWSER is set but no chromium is installed (apt-get install chromium)")
    pytest.skip("no chromium (apt-get install chromium, or scripts/setup_browser.sh)", allow_module_level=True)

VARIANTS = {"bf16-base": {"needle": {1024: 1.0}}, "fp8-weights": {"wrong": range(5), "weights_gib": 0.5},
            "int4-skipped": {"status": "skipped", "reason": "no W4A16 kernel on CPU"}}
# The expander in the parent's "Run Name" cell: nested runs are collapsed under their parent.
EXPANDER = 'div[role="gridcell"][col-id*="Run Name"] button'


@pytest.fixture(scope="module")
def logged(tmp_path_factory, mlflow_server):
    run = build_run(tmp_path_factory.mktemp("ui"), "20250101-000000-ui-check", VARIANTS, baseline="bf16-base")
    return log_run(RunDir(run), TrackingConfig(experiment="t-browser"), uri=mlflow_server.uri)


# Waits for the artifact tree's node named FOLDER, clicks it (the innermost element with that text),
# then waits for the FILES inside it to be listed.
OPEN_FOLDER = """(async () => {
  const sleep = ms => new Promise(r => setTimeout(r, ms));
  const deadline = Date.now() + 90000;
  const node = () => [...document.querySelectorAll("*")].reverse().find(e => e.textContent.trim() === "FOLDER");
  while (Date.now() < deadline && !node()) await sleep(250);
  if (node()) node().click();
  const shows = () => FILES.every(f => document.body.textContent.includes(f));
  while (Date.now() < deadline && !shows()) await sleep(250);
  return {found: shows(), node: Boolean(node()), text: document.body.innerText};
})()"""


def runs_url(uri: str, experiment_id: str) -> str:
    # MLflow 3.17's UI picks GenAI vs classic views from its "workflowType" switch (URL, then the
    # browser's last choice); the experiment tag evalsuite sets is what earlier 3.x versions read.
    return f"{uri}/#/experiments/{experiment_id}?workflowType=machine_learning"


def test_runs_table_lists_parent_variants_and_datasets(logged, mlflow_server):
    with Browser() as browser:
        page = page_text(browser, runs_url(mlflow_server.uri, logged.experiment_id),
                         ready=["Run Name", "20250101-000000-ui-check"], click=EXPANDER,
                         needles=[*VARIANTS, "mmlu (", "needle ("])
    assert page["clicked"] == EXPANDER, page["text"][:2000]
    assert page["found"], page["text"][:2000]
    text = page["text"]
    assert "4 matching runs" in text  # the parent and its 3 variants
    assert "Evaluation" in text  # the datasets' context


def test_dump_dom_renders_the_parent_run(logged, mlflow_server):
    dom = dump_dom(runs_url(mlflow_server.uri, logged.experiment_id))
    assert "20250101-000000-ui-check" in dom and "Run Name" in dom


def test_printed_link_opens_the_runs_table_with_review_columns(logged, mlflow_server, tmp_path):
    """The link `run` and `sync` print: the runs table (not the GenAI traces), the variants' verdicts,
    headline accuracies, changes against the baseline, weights and KV capacity as columns."""
    assert logged.url.startswith(f"{mlflow_server.uri}/#/experiments/{logged.experiment_id}/runs?")
    columns = ["evalsuite.verdict", "mmlu/acc", "delta/mmlu/acc_pt", "engine/weights_gib", "engine/kv_cache_tokens"]
    with Browser() as browser:
        browser.call("Emulation.setDeviceMetricsOverride", browser.session, width=2400, height=1000,
                     deviceScaleFactor=1, mobile=False)
        page = page_text(browser, logged.url, ready=["Run Name", "20250101-000000-ui-check"],
                         needles=[*columns, "fp8-weights", "int4-skipped", "baseline", "skipped", "0.975"])
        screenshot(browser, tmp_path / "mlflow-runs-table.png", width=2400, height=1000)
    print(f"screenshot: {tmp_path / 'mlflow-runs-table.png'}")
    assert page["found"], page["text"][:3000]
    verdict = MlflowClient(mlflow_server.uri).get_run(logged.variant_run_ids["fp8-weights"]).data.tags["evalsuite.verdict"]
    assert verdict in page["text"].split("fp8-weights", 1)[1]


def test_parent_run_holds_the_report(logged, mlflow_server):
    client = MlflowClient(mlflow_server.uri)
    names = {a.path for a in client.list_artifacts(logged.parent_run_id, "report")}
    assert {"report/report.html", "report/report.md", "report/compare.md"} <= names, names
    run = client.get_run(logged.variant_run_ids["fp8-weights"])
    assert run.data.tags["evalsuite.verdict"] in ("failed", "passed", "inconclusive")
    # 195/200 against 200/200: -2.5 pt, logged as computed (the UI rounds what it shows)
    assert run.data.metrics["delta/mmlu/acc_pt"] == pytest.approx(-2.5)
    assert run.data.metrics["mmlu/acc"] == 0.975
    assert VIEW_TAG in client.get_experiment(logged.experiment_id).tags
    artifacts = f"{mlflow_server.uri}/#/experiments/{logged.experiment_id}/runs/{logged.parent_run_id}/artifacts"
    with Browser() as browser:
        browser.goto(artifacts + "?workflowType=machine_learning")
        page = browser.evaluate(OPEN_FOLDER.replace("FOLDER", "report").replace("FILES", '["report.html", "report.md"]'))
    assert page["found"], page["text"][:3000]
