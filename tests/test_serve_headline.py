""""What to serve" opens with the run's decision; where no candidate passed, it says why, so that picks
of the baseline alone do not read as a recommendation of it over candidates that were never judged."""

from __future__ import annotations

from typer.testing import CliRunner

from evalsuite.cli.main import app
from tests.mlflow_server import build_run


def _page(tmp_path, variants, n):
    run = build_run(tmp_path / "runs", "20250101-000000-serve", variants, n=n, baseline="bf16")
    res = CliRunner().invoke(app, ["report", str(run), "--out", str(tmp_path / "report")])
    assert res.exit_code == 0, res.output
    return (tmp_path / "report" / "report.md").read_text()


def test_nothing_passed_says_why(tmp_path):
    page = _page(tmp_path, {"bf16": {}, "kv_fp8": {}, "w4a16": {}, "gone": {"status": "skipped", "reason": "no kernel"}},
                 n=2)
    line = next(ln for ln in page.splitlines() if ln.startswith("Decision: "))
    assert line.startswith("Decision: no candidate passed the gate, so every pick is the baseline `bf16`: "
                           "2 inconclusive (kv_fp8, w4a16): too few items"), line
    assert "drop --limit" in line and "1 skipped (gone)" in line


def test_what_passed_is_named(tmp_path):
    page = _page(tmp_path, {"bf16": {}, "same": {}, "worse": {"wrong": range(60)}}, n=400)
    line = next(ln for ln in page.splitlines() if ln.startswith("Decision: "))
    assert line == "Decision: 1 of 2 candidates passed the gate (same); 1 failed (worse).", line
