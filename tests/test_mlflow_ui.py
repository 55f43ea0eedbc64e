"""MLflow's own UI, in a real headless chromium, shows an evalsuite run as people expect: the
runs table lists the parent run, its variants nested under it, and each variant's task datasets.

Needs Debian's chromium (`apt-get install chromium`; scripts/setup_browser.sh). Without it the
test is skipped, unless EVALSUITE_REQUIRE_BROWSER=1 (as in .ci/run) makes that a failure.
"""

from __future__ import annotations

import json
import os

import pytest

from mlflow.tracking import MlflowClient

from evalsuite.core.rundir import RunDir
from evalsuite.tracking.settings import TrackingConfig
from evalsuite.tracking.store import log_run
from evalsuite.report.review import VIEW_TAG
from tests.browser import Browser, dump_dom, find_chromium, kept_path, page_text, screenshot
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


def add_task(rd, task: str, wrong: dict[str, range], n: int = 60) -> None:
    """A second headline task on every variant of a build_run folder: `wrong` items scored 0, paired ids."""
    from evalsuite.core.types import Score
    from evalsuite.stats import metrics as M

    record = rd.load_run()
    for v in record.variants:
        if v.status != "ok":
            continue
        scores = [Score(sample_id=f"{task}{i}", task=task, value=float(i not in wrong.get(v.variant, ())), pred="A",
                        target="A", group="g") for i in range(n)]
        rd.append_samples(v.variant, task, [{"sample": {"id": s.sample_id}, "completion": {}, "score": s.model_dump()}
                                            for s in scores])
        v.metrics.append(M.accuracy(scores, f"{task}/acc"))
        v.primary_metrics = [*(v.primary_metrics or ["mmlu/acc"]), f"{task}/acc"]
        rd.write_result(v)
    rd.write_run(record)


def review_run(root):
    """The demo's shape: a baseline, a variant that fails on accuracy, a simulated one, one skipped;
    three headline tasks, latency at one prompt length, memory figures."""
    from evalsuite.core.rundir import RunDir

    variants = {"bf16": {"ttft": {1024: 82.04}, "itl": {1024: 17.85}},
                "kv_fp8": {"wrong": range(14), "kv_cache_tokens": 20000, "ttft": {1024: 87.43}, "itl": {1024: 17.83}},
                "w4a16_sim": {"wrong": range(60), "weights_gib": 0.37588, "build": {"simulated": True}},
                "int4": {"status": "skipped", "reason": "no W4A16 kernel on this CPU"}}
    run = build_run(root, "20250101-000000-review", variants, baseline="bf16")
    add_task(RunDir(run), "needle", {"kv_fp8": range(40), "w4a16_sim": range(20)})
    add_task(RunDir(run), "legal", {"kv_fp8": range(3), "w4a16_sim": range(9)})
    return run


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


# Waits for the runs table's header cells named in `wanted` (ag-grid col-ids), closes MLflow's
# Assistant panel (MLflow opens it by itself on a local server's first visit; a person closes it
# once, and the browser remembers) until a row's verdict cell says failed and its first change cell
# reads `needle`, then returns each header's box, the visible grid's and the rows. A row is read cell
# by cell (row-index, col-id): ag-grid splits a row between its pinned and scrolled parts and keeps
# cells in the order they were created, which after a re-layout is not the order on screen.
FIRST_SCREEN = """(async (wanted, needle) => {
  const sleep = ms => new Promise(r => setTimeout(r, ms));
  const deadline = Date.now() + 180000;  // a loaded CI host renders the grid slowly
  const heads = () => Object.fromEntries([...document.querySelectorAll('.ag-header-cell')].map(h => [h.getAttribute('col-id'), h]));
  const rows = () => {
    const out = {};
    for (const c of document.querySelectorAll('.ag-row .ag-cell[col-id]')) {
      const i = c.closest('.ag-row').getAttribute('row-index');
      (out[i] = out[i] || {})[c.getAttribute('col-id')] = c.innerText.trim();
    }
    return Object.values(out);
  };
  const ready = () => wanted.every(w => heads()[w])
    && rows().some(r => (r[wanted[0]] || '').startsWith('failed') && r[wanted[1]] === needle);
  const settle = async () => { while (Date.now() < deadline && !ready()) await sleep(250); };
  while (Date.now() < deadline && !ready()) {
    const close = document.querySelector('[data-component-id="mlflow.assistant.chat_panel.close"]');
    if (close) close.click();
    await sleep(250);
  }
  await sleep(1000);  // the grid re-lays out once the panel has gone: read it after that
  await settle();
  const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.right, r.top, r.bottom]; };
  const found = heads();
  const cut = {};  // col-id -> texts of the cells that show less than they hold
  for (const c of document.querySelectorAll('.ag-row .ag-cell[col-id]')) {
    const inner = [c, ...c.querySelectorAll('*')].find(e => e.scrollWidth > e.clientWidth + 1);
    if (inner) (cut[c.getAttribute('col-id')] = cut[c.getAttribute('col-id')] || []).push(c.innerText.trim());
  }
  return {boxes: Object.fromEntries(wanted.filter(w => found[w]).map(w => [w, box(found[w])])),
          view: box(document.querySelector('.ag-body-viewport')), width: innerWidth, height: innerHeight,
          rows: rows(), cut, text: document.body.innerText};
})"""


def test_first_screen_at_1400_px_shows_verdict_changes_and_figures(mlflow_server, tmp_path_factory):
    """The printed link at 1400x900 shows, without scrolling, each variant's name, the verdict with
    why, each headline accuracy's change with its paired 95% interval at the precision the interval
    supports (-7.0, but -67 where 60 items leave +-11 points), weights, KV capacity, TTFT and ITL, each
    cell whole; the parent run's row carries the run's decision; no column names a key no variant
    logged. The screenshot is kept (its path printed)."""
    root = tmp_path_factory.mktemp("first-screen")
    logged = log_run(RunDir(review_run(root / "runs")), TrackingConfig(experiment="t-first-screen"),
                     uri=mlflow_server.uri)
    state = json.loads(MlflowClient(mlflow_server.uri).get_experiment(logged.experiment_id).tags[VIEW_TAG])
    wanted = ["tags.`evalsuite.verdict`", "tags.`Δ mmlu/acc pt`", "tags.`Δ needle/acc pt`", "tags.`Δ legal/acc pt`",
              "tags.`weights GiB`", "tags.`KV tokens`", "tags.`TTFT ms at 1K`", "tags.`ITL ms at 1K`"]
    assert state["selectedColumns"] == wanted
    with Browser() as browser:
        browser.call("Emulation.setDeviceMetricsOverride", browser.session, width=1400, height=900,
                     deviceScaleFactor=1, mobile=False)
        browser.goto(logged.url)
        page = browser.evaluate(f"{FIRST_SCREEN}({json.dumps(wanted)}, '-7.0 [-11.5, -3.9]')")
        shot = kept_path("mlflow-first-screen-1400.png", root)
        screenshot(browser, shot, width=1400, height=900)
    print(f"screenshot: {shot}")
    left, right, _, bottom = page["view"]
    for column in wanted:
        assert column in page["boxes"], (column, page["text"][:2000])
        l, r, _, b = page["boxes"][column]
        assert left <= l and r <= right and b <= page["height"], (column, page["boxes"][column], page["view"])
    kv = next((r for r in page["rows"] if r.get(wanted[0], "").startswith("failed")
               and r.get(wanted[1]) == "-7.0 [-11.5, -3.9]"), None)
    if kv is None:  # pytest.fail prints the whole message; an assert's would be cut
        pytest.fail(f"no failed row with -7.0 [-11.5, -3.9]; rows by column: {json.dumps(page['rows'], indent=1)}")
    assert [kv.get(c) for c in wanted[2:]] == ["-67 [-78, -53]", "-5.0 [-13.9, +1.4]", "1.000", "20,000", "87.4",
                                               "17.8"], kv
    assert any(r.get(wanted[0]) == "none passed: 2 failed, 1 skipped" for r in page["rows"]), page["rows"]
    for column in wanted[1:]:  # every figure whole: no cell cut short ("-30.0 [-36.9, -23…")
        assert page["cut"].get(column, []) == [], (column, page["cut"][column])
    assert "w4a16_sim" not in page["cut"].get(NAME, []), page["cut"]
    client = MlflowClient(mlflow_server.uri)
    keys = {k for rid in logged.variant_run_ids.values() for k in client.get_run(rid).data.tags}
    assert {c.removeprefix("tags.`").removesuffix("`") for c in state["selectedColumns"]} <= keys


NAME = "attributes.`Run Name`"


def test_the_experiment_overview_says_where_the_runs_are(mlflow_server, tmp_path_factory):
    """The experiment's plain URL opens MLflow's GenAI overview ("send your first trace"); its
    description, which evalsuite sets, says these are runs and where they are, with the decision. The
    parent run carries the decision as its description too."""
    root = tmp_path_factory.mktemp("overview")
    logged = log_run(RunDir(review_run(root / "runs")), TrackingConfig(experiment="t-overview"), uri=mlflow_server.uri)
    client = MlflowClient(mlflow_server.uri)
    note = client.get_experiment(logged.experiment_id).tags["mlflow.note.content"]
    assert note.startswith("evalsuite: runs, not traces") and "20250101-000000-review: no candidate passed" in note
    assert client.get_run(logged.parent_run_id).data.tags["mlflow.note.content"].startswith("Decision: no candidate")
    with Browser() as browser:
        page = page_text(browser, f"{mlflow_server.uri}/#/experiments/{logged.experiment_id}",
                         needles=["evalsuite: runs, not traces"])
        shot = kept_path("mlflow-experiment-overview-1400.png", root)
        screenshot(browser, shot, width=1400, height=900)
    print(f"screenshot: {shot}")
    assert page["found"], page["text"][:2000]


def test_a_description_someone_wrote_is_kept(mlflow_server, tmp_path_factory):
    client = MlflowClient(mlflow_server.uri)
    exp = client.create_experiment("t-own-note")
    client.set_experiment_tag(exp, "mlflow.note.content", "our quantization sweep")
    log_run(RunDir(review_run(tmp_path_factory.mktemp("own") / "runs")), TrackingConfig(experiment="t-own-note"),
            uri=mlflow_server.uri)
    assert client.get_experiment(exp).tags["mlflow.note.content"] == "our quantization sweep"


def test_parent_run_holds_the_report(logged, mlflow_server):
    client = MlflowClient(mlflow_server.uri)
    names = {a.path for a in client.list_artifacts(logged.parent_run_id, "report")}
    assert {"report/report.html", "report/report.md", "report/compare.md"} <= names, names
    run = client.get_run(logged.variant_run_ids["fp8-weights"])
    assert run.data.tags["evalsuite.verdict"].split(":")[0] in ("failed", "passed", "inconclusive")
    # 195/200 against 200/200: -2.5 pt, logged as computed (the UI rounds what it shows)
    assert run.data.metrics["delta/mmlu/acc_pt"] == pytest.approx(-2.5)
    assert run.data.metrics["mmlu/acc"] == 0.975
    assert VIEW_TAG in client.get_experiment(logged.experiment_id).tags
    artifacts = f"{mlflow_server.uri}/#/experiments/{logged.experiment_id}/runs/{logged.parent_run_id}/artifacts"
    with Browser() as browser:
        browser.goto(artifacts + "?workflowType=machine_learning")
        page = browser.evaluate(OPEN_FOLDER.replace("FOLDER", "report").replace("FILES", '["report.html", "report.md"]'))
    assert page["found"], page["text"][:3000]
