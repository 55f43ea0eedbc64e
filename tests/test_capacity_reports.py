"""The capacity pass as compare, gate, the report page and the run summary read it back, from run
folders whose level records are written as the capacity task writes them (its own metrics and rows)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from typer.testing import CliRunner

from evalsuite.capacity.config import CapacityConfig
from evalsuite.capacity.sweep import Level, judge
from evalsuite.capacity.task import CapacityTask, level_id
from evalsuite.cli.main import app
from evalsuite.core.rundir import RunDir
from evalsuite.core.types import HostLoad, RunRecord, Sample
from evalsuite.report.capacity_view import view
from evalsuite.verdict.checks import Check
from evalsuite.verdict.gate import run_gate
from evalsuite.verdict.sides import Side
from evalsuite.verdict.rules import default_rules_path, load_rules
from evalsuite.report.summary import table
from evalsuite.tasks.base import TaskContext
from tests.mlflow_server import build_run

runner = CliRunner()
SLO = {"ttft_p90_ms": 2000.0, "itl_p90_ms": 50.0}
CFG = {"prompt_tokens": [512], "output_tokens": 64, "concurrency": [1, 2, 4, 8, 16], "requests": 100, "slo": SLO}


def add_capacity(rd: RunDir, variant: str, met_up_to: int, loaded: bool = False) -> None:
    """The variant's levels 1-16 at 512 tokens, meeting the SLO up to `met_up_to` users, recorded
    as the capacity task records them; its metrics added to the variant's result."""
    cfg = CapacityConfig(**CFG)
    task = CapacityTask(cfg, TaskContext(base_dir=rd.root, cache_dir=rd.root))
    rows, scores = [], []
    for x in cfg.levels:
        load = HostLoad(cpus=2, start=[6.0 if loaded else 0.2, 0, 0], end=[0.2, 0, 0])
        lv = judge(Level(length=512, output_tokens=64, mode="concurrency", level=x, requests=100, slo=SLO,
                         completed=100, req_per_s=x, output_tok_per_s=64 * x, kv_cache_tokens=50_000, block_size=16,
                         percentiles={"ttft": {"90": 100.0 if x <= met_up_to else 5000.0}, "itl": {"90": 20.0}},
                         host_load=load))
        sample = Sample(id=level_id(cfg, 512, x), task="capacity", request=task.samples()[0].request, target="",
                        group="512", meta={"length": 512, "level": x, "mode": "concurrency"})
        score = task.score_of(sample, lv)
        scores.append(score)
        rows.append({"sample": sample.model_dump(), "completion": {}, "score": score.model_dump(mode="json")})
    rd.write_samples(variant, "capacity", rows)
    record = rd.load_run()
    result = record.variant(variant)
    result.metrics += task.metrics(scores)
    rd.write_run(record)
    rd.write_result(result)
    config = rd.read_config()
    config["capacity"] = CFG
    rd.write_config(config)


def capacity_run(tmp_path: Path, tops: dict[str, int], loaded: set[str] = frozenset()) -> Path:
    run = build_run(tmp_path, "r1", {name: {} for name in tops}, n=400, baseline="base")
    rd = RunDir(run)
    for name, top in tops.items():
        add_capacity(rd, name, top, name in loaded)
    return run


def _checks(run: Path) -> dict[tuple[str, str], Check]:
    rd = RunDir(run)
    report = run_gate(Side(rd, "base"), [Side(rd)], load_rules(default_rules_path()), "shipped")
    return {(c.candidate, c.metric): c for c in report.checks if c.metric.startswith("capacity/")}


def test_gate_judges_each_candidates_bracket(tmp_path):
    """base meets the SLO up to 8 users (16 broke it); same: [8, 16) too: 2x apart cannot tell 10%;
    worse: 2 users (4 broke it): below 90% of base's least, failed; loaded: not gated."""
    run = capacity_run(tmp_path, {"base": 8, "same": 8, "worse": 2, "loaded": 8}, loaded={"loaded"})
    checks = _checks(run)
    name = "capacity/users_at_slo/ctx512"
    assert checks[("same", name)].status == "warn" and "insufficient resolution" in checks[("same", name)].detail
    assert checks[("worse", name)].status == "fail" and "shown beyond the limit" in checks[("worse", name)].detail
    assert checks[("worse", name)].change == 75.0 and checks[("worse", name)].limit == 10.0
    assert checks[("loaded", name)].status == "skip" and "loaded host" in checks[("loaded", name)].detail
    assert {k[1] for k in checks} == {name}  # the per-level figures are recorded, not gated


def test_compare_report_and_summary_show_the_bracket(tmp_path):
    run = capacity_run(tmp_path, {"base": 8, "worse": 2, "loaded": 4}, loaded={"loaded"})
    shown = runner.invoke(app, ["compare", str(run), "--format", "markdown"])
    assert shown.exit_code == 0, shown.output
    assert "capacity/users_at_slo/ctx512" in shown.output and "capacity/output_tok_per_s_at_slo/ctx512" in shown.output
    assert "4†" in shown.output and "loaded host" in shown.output
    page = runner.invoke(app, ["report", str(run), "--out", str(tmp_path / "page")])
    assert page.exit_code == 0, page.output
    md = (tmp_path / "page" / "report.md").read_text()
    assert "| at SLO @512 |" in md.replace(" | ", " | ") or "at SLO @512" in md
    assert "8 users (16 broke)" in md and "2 users (4 broke)" in md and "4 users (8 broke)†" in md
    assert "## Capacity under load" in md and (tmp_path / "page" / "capacity_512.png").is_file()
    assert "| most users at the SLO at 512 tokens | base | 8 users (16 broke) |" in md
    row = next(line for line in md.splitlines() if line.startswith("| base | 8 users"))
    pool = RunDir(run).load_run().variant("base").engine
    users = pool.kv_cache_tokens // 576  # 512 + 64 tokens: 36 blocks of 16
    assert "ttft_p90_ms 5,000.0 > 2000" in row and f"| {users:,} |" in row
    summary = table(RunRecord.model_validate_json((run / "run.json").read_text()))
    assert "at SLO @512" in [c.header for c in summary.columns]
    cells = [str(c) for c in summary.columns[-1]._cells]
    assert "8 (16 broke)" in cells and "4 (8 broke)†" in cells


def _on_device(run: Path, variant: str, device: str) -> None:
    rd = RunDir(run)
    record = rd.load_run()
    result = record.variant(variant)
    result.engine.device = device
    rd.write_run(record)
    rd.write_result(result)


def test_another_device_or_a_loaded_host_is_not_comparable_and_never_picked(tmp_path):
    """base meets the SLO up to 8 users; `more` up to 16, but on another device model: no verdict, no
    pick, no ratio; `loaded` up to 16 on a loaded host: the same, held back from the picks with the reason; `half` up to 4:
    0.5x, and not picked (base serves more)."""
    run = capacity_run(tmp_path, {"base": 8, "more": 16, "loaded": 16, "half": 4}, loaded={"loaded"})
    _on_device(run, "more", "NVIDIA H100 80GB HBM3")
    checks = _checks(run)
    name = "capacity/users_at_slo/ctx512"
    assert checks[("more", name)].status == "skip"
    assert checks[("more", name)].detail.startswith("not comparable: measured on another device (NVIDIA H100")
    assert checks[("loaded", name)].detail.startswith("not comparable: the candidate's levels were timed on a loaded host")
    page = runner.invoke(app, ["report", str(run), "--out", str(tmp_path / "page")])
    assert page.exit_code == 0, page.output
    md = (tmp_path / "page" / "report.md").read_text()
    pick = next(line for line in md.splitlines() if line.startswith("| most users at the SLO at 512 tokens |"))
    assert "| base | 8 users (16 broke) |" in pick and "more" not in pick  # failed its KV check: another device's pool
    # its capacity check compared nothing, so the variant is held back from every pick, and the decision says why
    assert "loaded" not in pick
    assert ("1 passed but held back (loaded): loaded's capacity/users_at_slo/ctx512 not comparable: the candidate's "
            "levels were timed on a loaded host") in md
    assert "| variant | verdict | users at SLO @512 | KV-bound @512 | x base @512 |" in md
    users = md.split("| variant | verdict | users at SLO @512 |")[1].split("\n\n")[0]
    rows = {line.split(" | ")[0].strip("| "): line for line in users.splitlines()[2:]}
    assert "| 0.50x |" in rows["half"] and "| not comparable |" in rows["more"] and "| 1 (reference) |" in rows["base"]
    assert "`half`: 0.50x the users of `base` at 512 tokens within TTFT p90 <= 2000 ms, ITL p90 <= 50 ms" in md
    assert "`more`: " not in md and "`loaded`: " not in md
    rd = RunDir(run)
    cap = view([SimpleNamespace(result=r, run_dir=rd) for r in rd.load_run().variants])
    assert cap.ratios("base") == {"base": {"capacity/users_vs_baseline/ctx512": 1.0},
                                  "half": {"capacity/users_vs_baseline/ctx512": 0.5}}


def test_a_loaded_baseline_is_its_own_reference_in_mlflows_figures(tmp_path):
    """On a loaded host the baseline's bracket is set beside no candidate's, yet against itself it is
    1, as the users table's reference row says (MLflow's `users_vs_baseline` of the baseline run)."""
    run = capacity_run(tmp_path, {"base": 8, "half": 4}, loaded={"base"})
    rd = RunDir(run)
    cap = view([SimpleNamespace(result=r, run_dir=rd) for r in rd.load_run().variants])
    assert cap.ratios("base") == {"base": {"capacity/users_vs_baseline/ctx512": 1.0}}
    cols, rows = cap.users_table({}, "base")
    assert [r[-1] for r in rows] == ["1 (reference)", "not comparable"]
