"""The gate where the fast path and the reports used to mislead (issue 69): a candidate turned into
a control, a gate of controls alone, a watched check that the full data pass failed at its last
item, one "needed" figure per check, a resolution above 100 points, JSON output, and the
interval beside a stopped candidate's change."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.test_gate_holes import gate, legal_run, right, rules_file


def test_a_candidate_run_cannot_have_one_of_its_variants_made_a_control(tmp_path):
    """`--candidate RUN --control RUN:awq` made awq, whose drop is beyond its limit, a control: exit 0."""
    base = right()
    run = legal_run(tmp_path, "20250101-000000-c", {"bf16": base, "awq": right(20), "fp8": list(base)})
    rules = rules_file(tmp_path, {"rules": [{"metrics": "legal/acc", "max_drop_points": 5}]})
    res = gate("--baseline", f"{run}:bf16", "--candidate", str(run), "--control", f"{run}:awq", "--rules", str(rules))
    assert res.exit_code == 2, res.output
    assert res.output.count("\n") == 1 and f"--control {run}:awq: is a candidate" in res.output, res.output


def test_a_gate_of_controls_alone_is_bad_input_not_a_pass(tmp_path):
    """The config names bf16_repeat a control; a run holding only it beside the baseline has nothing to judge."""
    base = right()
    run = legal_run(tmp_path, "20250101-000001-c", {"bf16": base, "bf16_repeat": right(20)}, controls=["bf16_repeat"])
    rules = rules_file(tmp_path, {"rules": [{"metrics": "legal/acc", "max_drop_points": 5}]})
    res = gate("--baseline", f"{run}:bf16", "--candidate", str(run), "--rules", str(rules))
    assert res.exit_code == 2, res.output
    assert res.output.count("\n") == 1 and "nothing to judge" in res.output, res.output


def test_a_whole_run_candidate_leaves_its_configs_controls_as_controls(tmp_path):
    base = right()
    run = legal_run(tmp_path, "20250101-000002-c", {"bf16": base, "bf16_repeat": right(20), "fp8": list(base)},
                    controls=["bf16_repeat"])
    rules = rules_file(tmp_path, {"rules": [{"metrics": "legal/acc", "max_drop_points": 5}]})
    res = gate("--baseline", f"{run}:bf16", "--candidate", str(run), "--rules", str(rules))
    assert res.exit_code == 0, res.output
    assert "| `bf16_repeat` (control) | ℹ️ noise reference |" in res.output


def _json_gate(tmp_path: Path, run: Path, rules: Path, cand: str) -> tuple[int, dict, dict]:
    from tests.test_gate_holes import runner
    from evalsuite.cli.main import app

    out = tmp_path / "gate.json"
    res = runner.invoke(app, ["gate", "--baseline", f"{run}:bf16", "--candidate", f"{run}:{cand}", "--rules", str(rules),
                              "--format", "json", "--json", str(out)])
    return res.exit_code, json.loads(res.stdout), json.loads(out.read_text())


def test_gate_gives_json_with_every_check_and_the_exit_reason(tmp_path):
    """`--format json` was "not allowed"; CI scripts read the verdict from it."""
    base = right()
    run = legal_run(tmp_path, "20250101-000003-c", {"bf16": base, "awq": right(20)})
    rules = rules_file(tmp_path, {"rules": [{"metrics": ["legal/acc", "legal/balanced_acc"], "max_drop_points": 5}]})
    code, printed, written = _json_gate(tmp_path, run, rules, "awq")
    assert code == 1 and printed == written
    assert printed["schema_version"] == 1 and printed["exit_code"] == 1
    assert printed["exit_reason"].startswith("failed: awq: ")
    assert printed["candidates"] == [{"name": "awq", "verdict": "failed", "control": False,
                                      "why": printed["candidates"][0]["why"], "redefined": {}}]
    for c in printed["checks"]:
        assert {"metric", "status", "low", "high", "limit", "n", "p", "needed", "resolvable", "detail"} <= set(c)
        assert c["status"] == "fail" and c["n"] == 80 and c["limit"] == 5 and c["low"] > 5, c


def test_validate_plan_and_gate_give_one_needed_figure_per_check(tmp_path):
    """`validate` said about 124 needed and `gate` about 59 for the same check: the gate sized it at
    each candidate's own share of changed answers, so two candidates got two figures."""
    from evalsuite.report.gate_report import plan_text
    from evalsuite.run.sizing import Planned, _needed
    from evalsuite.verdict.rules import load_rules

    base = right()
    few, many = right(1), ["Yes" if a == "No" else "No" for a in base[:12]] + base[12:]  # 2 vs 12 changed
    run = legal_run(tmp_path, "20250101-000004-c", {"bf16": base, "few": few, "many": many})
    rules = rules_file(tmp_path, {"rules": [{"metrics": ["legal/acc"], "max_drop_points": 2}]})
    needed = {_json_gate(tmp_path, run, rules, cand)[1]["checks"][0]["needed"] for cand in ("few", "many")}
    spec = load_rules(rules)
    planned = _needed(Planned("legal/acc", [()] * 80), 0.02, spec)
    assert needed == {planned}, (needed, planned)
    assert f"| 2 pt | " in plan_text(spec, "rules", 80) and f"| {planned:,} |" in plan_text(spec, "rules", 80)


def test_a_resolution_is_never_printed_above_100_points(tmp_path):
    """`needle/acc: 2 items resolve 175.8 pt`: a bound of a score's drop beyond 100 points means nothing,
    and below `min_n` the gate trusts no test at all."""
    from tests.test_gate_holes import runner
    from evalsuite.cli.main import app
    from evalsuite.report.gate_report import plan_text
    from evalsuite.stats.significance import resolves
    from evalsuite.verdict.rules import load_rules

    assert resolves(2, 1.758) == "cannot resolve any drop at n = 2"
    assert resolves(24, 0.125) == "24 items resolve 12.5 pt"
    run = _watched_run(tmp_path, lost=1, gained=0, n=2, watched=False, chance=None)  # free-form answers
    rules = rules_file(tmp_path, {"rules": [{"metrics": ["quiz/acc"], "max_drop_points": 10}]})
    res = runner.invoke(app, ["gate", "--baseline", f"{run}:bf16", "--candidate", f"{run}:cand", "--rules", str(rules)],
                        env={"COLUMNS": "200"})
    assert "quiz/acc: cannot resolve any drop at n = 2, limit 10 (about 31 needed)" in res.output, res.output
    assert "cannot resolve any drop at n = 2" in plan_text(load_rules(rules), "rules", 2)


def _excluding_sequence():
    """500 items unchanged, then 20 lost: the running intersection keeps the early upper bound, below the mean."""
    from evalsuite.stats.sequential import Population, Sequential, as_paired_test

    seq = Sequential(Population.of([()] * 2000), np.r_[np.zeros(500), np.ones(20)], 0.05, 0.025)
    return as_paired_test(seq, share=0.5)


def test_a_stopped_candidates_interval_that_excludes_its_change_says_confidence_sequence():
    """"-4.2 [-4.2, +1.5]" beside "+4.21 pt, bounds -1.12..+3.43": a reviewer read the running
    intersection printed beside the current mean, with no word, as a bug."""
    from types import SimpleNamespace

    from evalsuite.report.compare import SEQUENCE_NOTE
    from evalsuite.report.gate_report import _row
    from evalsuite.report.page_doc import delta_cell
    from evalsuite.verdict.compare import PairedDelta
    from evalsuite.verdict.checks import Check

    test = _excluding_sequence()
    assert test.drop > test.high  # the estimate lies outside the sequence's interval
    check = Check("awq", "accuracy", "mmlu/acc", "fail", "x", 0.6, 0.5, test.drop * 100, 5.0, "pt",
                  method=test.method, low=test.low * 100, high=test.high * 100, n=test.n)
    assert check.outside and "(confidence sequence§)" in _row(check)
    delta = PairedDelta(-test.drop * 100, -test.high * 100, -test.low * 100, "confidence sequence", test.n, False, True)
    cell = delta_cell(SimpleNamespace(baseline=False, delta={"mmlu/acc": delta}, accuracy={}), "mmlu/acc")
    assert cell.startswith("confidence sequence§ [") and f"{-test.drop * 100:+.1f}" not in cell, cell
    assert SEQUENCE_NOTE.startswith("§ confidence sequence:") and "\n" not in SEQUENCE_NOTE
    inside = PairedDelta(-1.0, -2.0, 0.5, "confidence sequence", 100, False, True)
    assert delta_cell(SimpleNamespace(baseline=False, delta={"m": inside}, accuracy={}), "m") == "-1.0 [-2.0, +0.5]"


def test_mlflows_tags_mark_an_interval_that_excludes_the_change_in_no_more_width(monkeypatch):
    """MLflow's change column printed a stopped candidate's -3.85 beside its confidence sequence's
    [-1.46, -1.02] with no word. It reads as compare's cell, `§` and the interval alone, no wider than a
    change (the first screen's measured columns, tests/test_mlflow_ui.py); the words are the variant
    run's description and, once, the parent's, as the report's footnote."""
    from types import SimpleNamespace

    from evalsuite.report import review
    from evalsuite.report.compare import SEQUENCE_NOTE
    from evalsuite.report.page import Row
    from evalsuite.verdict.compare import PairedDelta

    test = _excluding_sequence()
    out = PairedDelta(-test.drop * 100, -test.high * 100, -test.low * 100, "confidence sequence", test.n, False, True)
    inside = PairedDelta(-1.0, -2.0, 0.5, "confidence sequence", 100, False, True)
    rows = [Row("bf16", "ok", baseline=True),
            Row("awq", "ok", verdict="passed", delta={"mmlu/acc": out, "needle/acc": inside})]
    tags = review.variant_review(SimpleNamespace(rows=rows))["awq"][1]
    cell = tags[review.change_tag("mmlu/acc")]
    assert cell.startswith("§ [") and f"{out.delta:+.1f}" not in cell, cell
    assert len(cell) <= len(review.change_text(-30.0, -36.9, -23.9)), cell  # the widest change WIDTH_CHANGE holds
    assert tags[review.change_tag("needle/acc")] == "-1.0 [-2.0, +0.5]"  # inside its sequence: the change
    assert tags[review.T_NOTE] == f"{SEQUENCE_NOTE}: Δ mmlu/acc pt."
    assert review.T_NOTE not in review.variant_review(SimpleNamespace(rows=rows[:1] + [Row("x", "ok")]))["x"][1]
    monkeypatch.setattr(review, "decision", lambda report: "awq passed")
    assert review.run_review(SimpleNamespace(rows=rows))[review.T_NOTE] == f"Decision: awq passed. {SEQUENCE_NOTE}."


def test_the_report_keeps_one_row_per_folder_and_variant_and_judges_every_folder(tmp_path):
    """`report h1 y3 s1 --baseline h1:bf16` pooled same-named variants: awq's row showed one folder's
    figures beside another's verdict, and s1's bf16 (a rerun of the baseline's name) was never judged."""
    from evalsuite.core.rundir import RunDir
    from evalsuite.report.page import build
    from evalsuite.verdict.rules import load_rules

    base = right()
    h1 = legal_run(tmp_path, "20250101-000000-h1", {"bf16": base, "awq": list(base)})
    y3 = legal_run(tmp_path, "20250101-000000-y3", {"awq": right(20)})
    s1 = legal_run(tmp_path, "20250101-000000-s1", {"bf16": right(20)})
    rules = rules_file(tmp_path, {"rules": [{"metrics": ["legal/acc"], "max_drop_points": 5}]})
    report = build([(RunDir(p), None) for p in (h1, y3, s1)], f"{h1}:bf16", load_rules(rules), "rules.yaml")
    rows = {r.name: r for r in report.rows}
    h, y, s = (p.name for p in (h1, y3, s1))
    assert set(rows) == {f"{h}:bf16", f"{h}:awq", f"{y}:awq", f"{s}:bf16"}, set(rows)
    assert rows[f"{h}:bf16"].baseline and not rows[f"{s}:bf16"].baseline
    assert rows[f"{h}:awq"].verdict == "passed" and rows[f"{h}:awq"].accuracy["legal/balanced_acc"] > 0.99
    assert rows[f"{y}:awq"].verdict == "failed" and rows[f"{y}:awq"].accuracy["legal/balanced_acc"] < 0.9
    assert rows[f"{s}:bf16"].verdict == "failed", rows[f"{s}:bf16"]


@pytest.mark.parametrize("config", ["configs/cpu-smoke.yaml", "evalsuite/configs/starter.yaml"])
def test_the_ci_smoke_gate_passes_an_identical_rerun_that_loses_one_needle(repo_root, config):
    """configs/cpu-smoke.yaml and the starter `init` writes had 35 needles: a rerun losing 1 of them has
    an exact upper bound of 12.9 pt against the smoke rules' 10, so the gate failed the baseline against
    itself. Sized, not loosened: every needle check of the config, one needle lost, is shown within its limit."""
    from evalsuite.run.config import load_config
    from evalsuite.run.sizing import planned
    from evalsuite.stats import exact
    from evalsuite.verdict.rules import load_rules, named_rules_path

    cfg = load_config(repo_root / config)
    rules = load_rules(named_rules_path(cfg.gate_rules))
    needle = next(t for t in cfg.tasks if t.name == "needle")
    for p in planned(needle):
        limit = rules.rule_for(p.metric).limit_for(p.metric) / 100
        assert exact.upper_bound(1, 0, p.n, rules.confidence) < limit, (p.metric, p.n)


def _watched_run(tmp_path: Path, lost: int, gained: int, n: int = 600, watched: bool = True,
                 chance: float | None = 0.25) -> Path:
    """A baseline and a candidate of one 0/1 task (`quiz`, declared chance 0.25), the candidate's task
    watched by --stop decided to its last item (items == of), `lost`/`gained` answers changed."""
    from evalsuite.core.rundir import RunDir
    from evalsuite.core.types import EarlyStop, RunRecord, Score, VariantResult
    from evalsuite.stats.metrics import accuracy

    rd = RunDir(tmp_path / "20250101-000000-w")
    rd.write_config({"baseline": "bf16"})
    record = RunRecord(run_id=rd.root.name, model="tiny")
    base = [1.0 if i % 3 else 0.0 for i in range(n)]  # 0.667, far from chance
    right = [i for i in range(n) if base[i] == 1.0]
    wrong = [i for i in range(n) if base[i] == 0.0]
    cand = list(base)
    for i in right[:lost]:
        cand[i] = 0.0
    for i in wrong[:gained]:
        cand[i] = 1.0
    for name, values in (("bf16", base), ("cand", cand)):
        scores = [Score(sample_id=f"q{i}", task="quiz", value=v, pred=str(v), target=f"t{i}", group="g")
                  for i, v in enumerate(values)]
        rd.append_samples(name, "quiz", [{"sample": {"id": s.sample_id}, "completion": {}, "score": s.model_dump()}
                                         for s in scores])
        result = VariantResult(variant=name, status="ok", metrics=[accuracy(scores, "quiz/acc")],
                               primary_metrics=["quiz/acc"], chance={} if chance is None else {"quiz/acc": chance})
        if name == "cand" and watched:
            result.stopped = {"quiz": EarlyStop(items=n, of=n, seed=0)}
        rd.write_result(result)
        record.variants.append(result)
    rd.write_run(record)
    return rd.root


def test_the_fast_path_never_fails_what_the_full_data_pass(tmp_path):
    """A watched task that ran to its last item was judged by the sequence's wider bound alone: RULER's
    fp8 at 8K (+0.33 pt, fixed-n bound +3.95 against 5) failed in 99.6% of orders. Here 45 of 600
    answers lost and 39 gained (a drop of 1 pt, 14% changed): the fixed-n test on all items passes 5 pt,
    the sequence at N alone does not; with the final look at the rest of alpha, the gate passes it."""
    from evalsuite.core.rundir import RunDir
    from evalsuite.stats.paired import pairing, paired_result
    from evalsuite.stats.sequential import Population, Sequential
    from evalsuite.verdict.gate import run_gate
    from evalsuite.verdict.sides import Side
    from evalsuite.verdict.rules import load_rules

    run = _watched_run(tmp_path, lost=45, gained=39)
    rules_path = rules_file(tmp_path, {"rules": [{"metrics": ["quiz/acc"], "max_drop_points": 5}]})
    rules = load_rules(rules_path)
    rd = RunDir(run)
    base, cand = rd.load_result("bf16"), rd.load_result("cand")
    p = pairing(rd, "bf16", rd, "cand", base.metric("quiz/acc"))
    assert paired_result(p, rules.confidence).high < 0.05  # the slow path passes
    d = np.array(p.base) - np.array(p.cand)
    alone = Sequential(Population.of([()] * len(d)), d, 0.05, rules.alpha)
    assert alone.bound("within") >= 0.05  # the sequence alone, even at the whole alpha, does not
    report = run_gate(Side(rd, "bf16"), [Side(rd, "cand")], rules, "rules.yaml")
    check = next(c for c in report.checks if c.metric == "quiz/acc")
    assert check.status == "pass" and report.exit_code == 0, check.detail
    assert "confidence sequence" in check.method and "at 50% of alpha" in check.method


def test_a_check_the_sequence_cannot_resolve_at_the_planning_discordance_is_never_watched():
    """RULER's 132 items a length pass the zero-change floor of a 5-point limit in a sequence, but at 5%
    of answers changing its bound at N is 9 points: it is judged fixed-n on all items, as without --stop."""
    from evalsuite.stats.sequential import Population, floor, planned_bound

    pop = Population.of([()] * 132)
    assert floor(pop, 0.05, 0.05) < 0.05 <= planned_bound(pop, 0.05, 0.025, 0.05)
    mmlu = Population.of([()] * 14042)
    assert planned_bound(mmlu, 0.02, 0.025, 0.05) < 0.01


def test_chance_marks_agree_across_a_tasks_lengths(tmp_path):
    """legal_long/acc/len8192 read "chance unknown" and len24576 "evidence": each length's few targets
    were read alone (repeating by chance at one length, all distinct at another). The task's nature,
    free-form or a label set, is read on all its items, so every length gets the same."""
    from evalsuite.core.rundir import RunDir
    from evalsuite.core.types import Score, VariantResult
    from evalsuite.stats.metrics import accuracy
    from evalsuite.verdict.informative import chance_level

    rd = RunDir(tmp_path / "20250101-000000-k")
    states = ["alaska", "texas", "ohio", "iowa", "utah", "maine"]
    targets = {100: [states[i % 2] for i in range(12)], 200: [f"{states[i % 6]}-{i}" for i in range(12)]}
    scores = [Score(sample_id=f"x{n}-{i}", task="long", value=1.0, pred=t, target=t, group=f"len{n}",
                    extra={"length": n}) for n, ts in targets.items() for i, t in enumerate(ts)]
    rd.append_samples("bf16", "long", [{"sample": {"id": s.sample_id}, "completion": {}, "score": s.model_dump()}
                                       for s in scores])
    metrics = [accuracy(scores, "long/acc")] + [accuracy([s for s in scores if s.extra["length"] == n],
                                                         f"long/acc/len{n}", length=n) for n in targets]
    result = VariantResult(variant="bf16", status="ok", metrics=metrics, primary_metrics=["long/acc"])
    rd.write_result(result)
    levels = [chance_level(result, f"long/acc/len{n}", rd) for n in targets]
    whole = chance_level(result, "long/acc", rd)
    assert all((x is None) == (whole is None) and (x is None or np.isnan(x) == np.isnan(whole)) for x in levels), \
        (levels, whole)


def test_a_task_recorded_as_watched_to_its_end_that_these_rules_never_watch_is_judged_fixed_n(tmp_path):
    """H100 fp8's RULER record said its task was watched to the end, and the gate judged 8K by the
    sequence: "dropped 1.4 pt (<= 5.7 pt, 95% upper bound), limit 5", exit 1. A task the rules never
    watch (132 items cannot resolve 5 points in a sequence at 5% changed) that ran to its last item
    holds the full data whatever was looked at: it is judged as a run without --stop."""
    from evalsuite.core.rundir import RunDir
    from evalsuite.stats.paired import pairing, paired_result
    from evalsuite.verdict.gate import run_gate
    from evalsuite.verdict.sides import Side
    from evalsuite.verdict.rules import load_rules

    run = _watched_run(tmp_path, lost=3, gained=3, n=132)
    rules = load_rules(rules_file(tmp_path, {"rules": [{"metrics": ["quiz/acc"], "max_drop_points": 5}]}))
    rd = RunDir(run)
    fixed = paired_result(pairing(rd, "bf16", rd, "cand", rd.load_result("bf16").metric("quiz/acc")), rules.confidence)
    report = run_gate(Side(rd, "bf16"), [Side(rd, "cand")], rules, "rules.yaml")
    check = next(c for c in report.checks if c.metric == "quiz/acc")
    assert check.status == "pass" and report.exit_code == 0, check.detail
    assert check.method == fixed.method and abs(check.high - fixed.high * 100) < 1e-9
