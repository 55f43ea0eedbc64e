"""The gate on synthetic run directories: verdicts, the paired statistics, exit codes, reports."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from evalsuite.cli.main import app
from evalsuite.core.errors import ConfigError
from evalsuite.core.rundir import RunDir
from evalsuite.verdict.rules import Rules, load_rules
from tests.mlflow_server import build_run

DEFAULT_RULES = Path(__file__).resolve().parent.parent / "configs" / "gates" / "default.yaml"
runner = CliRunner()


def gate(*args: str):
    """The gate's full Markdown report (its terminal view: tests/test_gate_terminal.py)."""
    return runner.invoke(app, ["gate", *args, "--format", "markdown"])


def two_runs(tmp_path: Path, base: dict, cand: dict, **kw) -> tuple[Path, Path]:
    return (build_run(tmp_path / "runs", "20250101-000000-base", {"bf16": base}, **kw),
            build_run(tmp_path / "runs", "20250101-000001-cand", {"fp8": cand}, **kw))


def rules_file(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_default_rules_file_loads():
    rules = load_rules(DEFAULT_RULES)
    assert rules.decision == "upper_bound"
    assert rules.rule_for("mmlu/acc").max_drop_points == 2.0
    assert rules.rule_for("needle/acc/len4096").name == "accuracy by context length"
    assert rules.rule_for("needle/acc/len4096_depth50") is None  # excluded: one cell is too small
    assert rules.rule_for("needle/acc").limit_for("needle/acc") == 5.0  # per-task override
    assert rules.rule_for("legal/balanced_acc").strata == ["group", "target"]
    assert rules.rule_for("engine/weights_gib").kind == "max_growth_pct"
    assert rules.rule_for("engine/kv_cache_tokens").kind == "max_drop_pct"


def test_identical_runs_pass(tmp_path):
    spec = {"wrong": range(30), "ttft": {512: 10.0}, "itl": {512: 2.0}}
    base, cand = two_runs(tmp_path, spec, spec)
    junit, md = tmp_path / "out" / "gate.xml", tmp_path / "out" / "gate.md"
    res = gate("--baseline", str(base), "--candidate", str(cand), "--rules", str(DEFAULT_RULES),
               "--junit", str(junit), "--markdown", str(md))
    assert res.exit_code == 0, res.output
    suites = ET.parse(junit).getroot()
    assert suites.get("failures") == "0"
    names = [tc.get("name") for tc in suites.iter("testcase")]
    assert "accuracy: mmlu/acc" in names and "memory: engine/weights_gib" in names
    assert md.read_text().startswith("## ✅ evalsuite gate passed")


def test_accuracy_drop_beyond_limit_fails_naming_the_metric(tmp_path):
    base, cand = two_runs(tmp_path, {"wrong": range(20)}, {"wrong": range(40)})  # 10 points lower
    junit = tmp_path / "gate.xml"
    res = gate("--baseline", str(base), "--candidate", str(cand), "--rules", str(DEFAULT_RULES), "--junit", str(junit))
    assert res.exit_code == 1, res.output
    assert "❌" in res.output and "mmlu/acc" in res.output
    failures = [tc for tc in ET.parse(junit).getroot().iter("testcase") if tc.find("failure") is not None]
    assert [tc.get("name") for tc in failures] == ["accuracy: mmlu/acc"]
    assert "mmlu/acc" in failures[0].find("failure").get("message")


def test_more_memory_fails(tmp_path):
    base, cand = two_runs(tmp_path, {"weights_gib": 1.0}, {"weights_gib": 1.2})
    res = gate("--baseline", str(base), "--candidate", str(cand), "--rules", str(DEFAULT_RULES))
    assert res.exit_code == 1
    assert "engine/weights_gib" in res.output and "growth +20.0% > limit 5%" in res.output


def test_kv_capacity_drop_fails(tmp_path):
    base, cand = two_runs(tmp_path, {"kv_cache_tokens": 10000}, {"kv_cache_tokens": 8000})
    res = gate("--baseline", str(base), "--candidate", str(cand), "--rules", str(DEFAULT_RULES))
    assert res.exit_code == 1
    assert "engine/kv_cache_tokens" in res.output and "drop +20.0%" in res.output


def _on_device(run: Path, device: str) -> None:
    import json

    rec = json.loads((run / "run.json").read_text())
    for v in rec["variants"]:
        v["engine"]["device"] = device
    (run / "run.json").write_text(json.dumps(rec))


def test_kv_capacity_from_another_gpus_pool_is_not_measured_not_passed(tmp_path):
    """The candidate's KV pool sized on an H100 against an H200 baseline: its capacity on the baseline's
    card is unknown, so the check fails as not measured (never green without evidence), whichever way
    the two cards' numbers point; weights still compare."""
    base, cand = two_runs(tmp_path, {"kv_cache_tokens": 10000}, {"kv_cache_tokens": 20000})
    _on_device(base, "NVIDIA H200")
    _on_device(cand, "NVIDIA H100 80GB HBM3")
    md = tmp_path / "gate.md"
    res = gate("--baseline", str(base), "--candidate", str(cand), "--rules", str(DEFAULT_RULES), "--markdown", str(md))
    assert res.exit_code == 1, res.output
    text = md.read_text()
    row = next(ln for ln in text.splitlines() if "`engine/kv_cache_tokens`" in ln and "❌" in ln)
    assert "not measured on the baseline's device: KV pool sized on NVIDIA H100 80GB HBM3 (baseline: NVIDIA H200)" in row
    assert "| 0 | 0 | 1 |" in text  # failed as not measured, nothing beyond or unshown
    assert "growth +0.0% <= limit 5%" in text  # weights_gib compares across cards
    _on_device(cand, "NVIDIA H200")
    assert gate("--baseline", str(base), "--candidate", str(cand), "--rules", str(DEFAULT_RULES)).exit_code == 0


def test_latency_growth_fails(tmp_path):
    base, cand = two_runs(tmp_path, {"ttft": {512: 10.0}}, {"ttft": {512: 20.0}})
    res = gate("--baseline", str(base), "--candidate", str(cand), "--rules", str(DEFAULT_RULES))
    assert res.exit_code == 1 and "latency/ttft_ms_p50" in res.output


@pytest.mark.parametrize(("decision", "code"), [("upper_bound", 1), ("point", 0), ("lower_bound", 0)])
def test_decision_rule_on_a_small_noisy_drop(tmp_path, decision, code):
    # 2 of 200 answers lost: 1 point, se ~0.7 point, so the one-sided 95% upper bound is ~2.2 points
    base, cand = two_runs(tmp_path, {"wrong": range(10)}, {"wrong": range(12)})
    rules = rules_file(tmp_path, {"decision": decision, "rules": [{"metrics": "mmlu/acc", "max_drop_points": 2}]})
    res = gate("--baseline", str(base), "--candidate", str(cand), "--rules", str(rules))
    assert res.exit_code == code, res.output
    assert "paired, n=200, 2 lost/0 gained; exact unconditional test on Tango's statistic; exact McNemar" in res.output
    assert "95% bounds" in res.output and "| -0.40..+3.11 |" in res.output
    assert "no significant drop" in res.output


def test_per_task_override(tmp_path):
    base, cand = two_runs(tmp_path, {"wrong": range(20)}, {"wrong": range(40)})
    rules = rules_file(tmp_path, {"rules": [{"metrics": "*/acc", "max_drop_points": 1, "tasks": {"mmlu": 20}}]})
    res = gate("--baseline", str(base), "--candidate", str(cand), "--rules", str(rules))
    assert res.exit_code == 0, res.output


def test_group_metrics_are_paired_within_their_cell(tmp_path):
    # 5 of 10 needle items at 4096 tokens lost: a 50-point drop. 10 items cannot certify a 10-point
    # limit at all (the bound with nothing lost is +25.9 points, 1 - 0.05^(1/10)), but they do show the
    # drop exceeds it (exact p 0.034 against 10 points; 4 lost, p 0.067, would not), which fails at
    # any n; the 1024-token cell, unchanged, only warns
    base, cand = two_runs(tmp_path, {"needle": {1024: 1.0, 4096: 0.9}}, {"needle": {1024: 1.0, 4096: 0.4}})
    res = gate("--baseline", str(base), "--candidate", str(cand), "--rules", str(DEFAULT_RULES))
    assert res.exit_code == 1, res.output
    row = next(line for line in res.output.splitlines() if "`needle/acc/len4096`" in line)
    assert row.startswith("| ❌ | `fp8` | accuracy by context length |")
    assert "paired, n=10, 5 lost/0 gained" in row  # only the 4096-token items, matched via len4096_depth50
    assert "insufficient n: even with no item changed the 95% bound is +25.9 pt > limit" in row
    assert "but the drop is shown to exceed the limit 10 pt (p 0.034 < 0.05)" in row
    short = next(line for line in res.output.splitlines() if "`needle/acc/len1024`" in line)
    assert short.startswith("| ⚠️ | `fp8` |") and "warn as configured" in short
    assert "| `fp8` | `needle/acc/len4096` | 10 | 10 pt |" in res.output  # the resolution table lists it


def test_unpaired_fallback_uses_reported_stderr(tmp_path):
    base, cand = two_runs(tmp_path, {"wrong": range(20)}, {"wrong": range(21)})
    (Path(cand) / "fp8" / "samples" / "mmlu.jsonl").unlink()
    rules = rules_file(tmp_path, {"decision": "point", "rules": [{"metrics": "mmlu/acc", "max_drop_points": 2}]})
    res = gate("--baseline", str(base), "--candidate", str(cand), "--rules", str(rules))
    assert res.exit_code == 0 and "unpaired" in res.output


def test_unpaired_identical_runs_are_insufficient_not_failed(tmp_path):
    """Without per-item scores an identical rerun cannot show 2 points at n=2,000 (even equal
    accuracies bound the drop at +2.1 pt): insufficient n, inconclusive, never failed."""
    spec = {"wrong": range(0, 2000, 5)}
    base, cand = two_runs(tmp_path, spec, spec, n=2000)
    (Path(cand) / "fp8" / "samples" / "mmlu.jsonl").unlink()
    rules = rules_file(tmp_path, {"rules": [{"metrics": "mmlu/acc", "max_drop_points": 2}]})
    res = gate("--baseline", str(base), "--candidate", str(cand), "--rules", str(rules))
    assert res.exit_code == 3, res.output
    assert "even with equal accuracies (unpaired) the 95% bound is +2.1 pt" in res.output


@pytest.mark.parametrize("counts", [((0, 10), (1, 10)), ((10, 10), (9, 10)), ((10, 10), (10, 10)), ((0, 10), (0, 10))])
def test_unpaired_test_at_0_and_100_percent(counts):
    """Two independent proportions at the edges: an interval, no error, and p-values that invert
    it, so the bound printed and the decision agree at any limit."""
    from evalsuite.stats.significance import unpaired_test

    t = unpaired_test(*counts, confidence=0.95)
    assert -1 <= t.low <= t.drop <= t.high <= 1 and t.low < t.high
    assert 0 <= t.p_worse <= 1
    for limit in (t.high - 1e-4, t.high + 1e-4):
        assert (t.p_within(limit) < 0.05) == (limit > t.high)
    assert t.p_within(t.high) == pytest.approx(0.05, abs=1e-6)


def test_a_simulated_variant_is_not_failed_for_timings_it_cannot_have(tmp_path):
    """A simulated INT4 variant runs its rounded weights dense: it has no latency of its own, so its
    latency checks are not judged (named under "Not checked"), while a real variant missing one fails."""
    base, cand = two_runs(tmp_path, {"ttft": {1024: 10.0}},
                          {"settings": {"dtype": "bfloat16", "quantize": "rtn"}, "build": {"simulated": True, "method": "rtn"}}, n=2000)
    rules = rules_file(tmp_path, {"rules": [{"metrics": "mmlu/acc", "max_drop_points": 2},
                                            {"metrics": "latency/*", "max_growth_pct": 25}]})
    res = gate("--baseline", str(base), "--candidate", str(cand), "--rules", str(rules))
    assert "simulated: measures accuracy only, not this" in res.output and "missing in candidate" not in res.output
    real = build_run(tmp_path / "runs", "20250101-000002-real", {"fp8": {}}, n=2000)
    res = gate("--baseline", str(base), "--candidate", str(real), "--rules", str(rules))
    assert "missing in candidate" in res.output and res.exit_code == 1


def test_memory_checks_alone_are_no_evidence(tmp_path):
    """A candidate whose only checks are memory and latency never passes: nothing says it kept
    its accuracy (inconclusive, exit 3)."""
    base, cand = two_runs(tmp_path, {}, {})
    rules = rules_file(tmp_path, {"rules": [{"metrics": "engine/weights_gib", "max_growth_pct": 5}]})
    res = gate("--baseline", str(base), "--candidate", str(cand), "--rules", str(rules))
    assert res.exit_code == 3 and "| `fp8` | ❔ inconclusive |" in res.output, res.output


def test_every_candidate_variant_is_compared_with_the_config_baseline(tmp_path):
    run = build_run(tmp_path / "runs", "20250101-000000-all",
                    {"bf16": {}, "fp8": {"weights_gib": 0.5}, "big": {"weights_gib": 2.0},
                     "int4": {"status": "skipped", "reason": "no kernel"}}, baseline="bf16")
    junit = tmp_path / "g.xml"
    res = gate("--baseline", str(run), "--candidate", str(run), "--rules", str(DEFAULT_RULES), "--junit", str(junit))
    assert res.exit_code == 1
    suites = {s.get("name").split(" vs ")[0]: s for s in ET.parse(junit).getroot().iter("testsuite")}
    assert set(suites) == {"fp8", "big", "int4"}  # names are unique: no run prefix
    assert suites["fp8"].get("failures") == "0"
    assert suites["big"].get("failures") == "1"
    assert suites["int4"].get("skipped") == "1"  # skipped on purpose is not a failure


def test_the_report_sums_each_candidate_by_why_it_failed(tmp_path):
    """Many candidates, many checks: a row per candidate says how many passed, and whether a failure
    is a change shown beyond the limit, one the run's n cannot show within it, a metric never
    measured, or a variant that did not run."""
    run = build_run(tmp_path / "runs", "20250101-000000-sum",
                    {"bf16": {"needle": {4096: 1.0}}, "same": {"needle": {4096: 1.0}},
                     "big": {"weights_gib": 2.0, "needle": {4096: 1.0}}, "noneedle": {},
                     "broken": {"status": "failed", "reason": "engine died"}}, baseline="bf16")
    rules = rules_file(tmp_path, {"rules": [{"metrics": ["mmlu/acc", "needle/acc/*"], "max_drop_points": 2},
                                            {"metrics": "engine/weights_gib", "max_growth_pct": 5}]})
    out = tmp_path / "g.md"
    res = gate("--baseline", str(run), "--candidate", str(run), "--rules", str(rules), "--markdown", str(out))
    assert res.exit_code == 1, res.output
    lines = out.read_text().splitlines()
    top = lines.index(next(ln for ln in lines if ln.startswith("| candidate | verdict |")))
    table = lines[top + 2:lines.index("", top)]
    rows = {ln.split(" | ")[0].strip("| `"): [c.strip(" |") for c in ln.split(" | ")[1:]] for ln in table}
    assert list(rows) == ["same", "big", "noneedle", "broken"]
    # verdict, passed, beyond the limit, not shown within, not measured, variant not usable, insufficient n,
    # uninformative, at ceiling. MMLU's 200 identical items show the 2-pt limit held (the baseline's
    # 200/200 is at ceiling); the 10 needle cells cannot judge it at all (warn), so not every check
    # shows its drop within its limit: inconclusive.
    assert rows["same"] == ["❔ inconclusive", "2", "0", "0", "0", "0", "1", "0", "1"]
    assert rows["big"] == ["❌ failed", "1", "1", "0", "0", "0", "1", "0", "1"]      # weights +100%: beyond the limit
    assert rows["noneedle"] == ["❌ failed", "2", "0", "0", "1", "0", "0", "0", "1"]  # its needle never ran
    assert rows["broken"] == ["❌ failed", "0", "0", "0", "0", "1", "0", "0", "0"]


def test_failed_candidate_fails(tmp_path):
    base, cand = two_runs(tmp_path, {}, {"status": "failed", "reason": "engine died"})
    res = gate("--baseline", str(base), "--candidate", str(cand), "--rules", str(DEFAULT_RULES))
    assert res.exit_code == 1 and "engine died" in res.output


def test_ambiguous_baseline_variant_is_bad_input(tmp_path):
    run = build_run(tmp_path / "runs", "20250101-000000-two", {"a": {}, "b": {}})
    res = gate("--baseline", str(run), "--candidate", str(run), "--rules", str(DEFAULT_RULES))
    assert res.exit_code == 2
    assert "--variant-baseline" in res.output and "a, b" in res.output
    res = gate("--baseline", str(run), "--candidate", str(run), "--rules", str(DEFAULT_RULES),
               "--variant-baseline", "a", "--variant-candidate", "b")
    assert res.exit_code == 0, res.output


def test_two_names_for_the_baseline_variant_are_bad_input(tmp_path):
    run = build_run(tmp_path / "runs", "20250101-000000-two", {"a": {}, "b": {}})
    res = gate("--baseline", f"{run}:a", "--variant-baseline", "b", "--candidate", f"{run}:b",
               "--rules", str(DEFAULT_RULES))
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr == "evalsuite: error: --baseline names variant 'a' and --variant-baseline 'b'; give one\n"
    same = gate("--baseline", f"{run}:a", "--variant-baseline", "a", "--candidate", f"{run}:b", "--rules", str(DEFAULT_RULES))
    assert same.exit_code == 0, same.output


@pytest.mark.parametrize(("data", "expect"), [
    ({"rules": [{"metrics": "x/acc", "max_drop": 1}]},
     "rules.0: Unknown rule kind 'max_drop'. Available: max_drop_points, max_drop_pct, max_growth_pct (a rule's other keys: "),
    ({"decision": "vibes", "rules": [{"metrics": "x", "max_drop_pct": 1}]}, "'upper_bound', 'point' or 'lower_bound'"),
    ({"rules": [{"metrics": "x", "max_drop_pct": 1, "max_growth_pct": 2}]}, "give exactly one of"),
    ({"rules": []}, "rules: List should have at least 1 item"),
    ({"confidence": 1.5, "rules": [{"metrics": "x", "max_drop_pct": 1}]}, "confidence:"),
])
def test_malformed_rules_exit_2_with_one_line(tmp_path, data, expect):
    base, cand = two_runs(tmp_path, {}, {})
    rules = rules_file(tmp_path, data)
    res = gate("--baseline", str(base), "--candidate", str(cand), "--rules", str(rules))
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"evalsuite: error: {rules}:"), res.stderr
    assert expect in lines[0]


def test_unreadable_inputs_exit_2(tmp_path):
    base, _ = two_runs(tmp_path, {}, {})
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("rules: [\n")
    assert gate("--baseline", str(base), "--candidate", str(base), "--rules", str(bad_yaml)).exit_code == 2
    res = gate("--baseline", str(tmp_path), "--candidate", str(base), "--rules", str(DEFAULT_RULES))
    assert res.exit_code == 2 and "not a run directory" in res.stderr
    with pytest.raises(ConfigError):
        load_rules(tmp_path / "missing.yaml")


def test_nothing_matched_is_bad_input(tmp_path):
    base, cand = two_runs(tmp_path, {}, {})
    rules = rules_file(tmp_path, {"rules": [{"metrics": "nope/*", "max_drop_pct": 1}]})
    assert gate("--baseline", str(base), "--candidate", str(cand), "--rules", str(rules)).exit_code == 2


def test_rules_model_first_match_wins():
    rules = Rules.model_validate({"rules": [{"metrics": "mmlu/acc", "max_drop_points": 5},
                                            {"metrics": "*/acc", "max_drop_points": 1}]})
    assert rules.rule_for("mmlu/acc").limit_for("mmlu/acc") == 5
    assert rules.rule_for("legal/acc").limit_for("legal/acc") == 1


@pytest.mark.parametrize("n", [5, 12, 40, 200])
@pytest.mark.parametrize("decision", ["upper_bound", "point", "lower_bound"])
def test_identical_runs_never_fail(tmp_path, n, decision):
    spec = {"wrong": range(0, n, 3), "needle": {1024: 0.8}}
    base, cand = two_runs(tmp_path, spec, spec, n=n)
    rules = rules_file(tmp_path, {**load_rules(DEFAULT_RULES).model_dump(exclude_none=True), "decision": decision})
    res = gate("--baseline", str(base), "--candidate", str(cand), "--rules", str(rules))
    # a check too small to judge (upper_bound: 10 needle items cannot certify 10 pt; point: one of n
    # items is more than 2 pt below n=50) makes the verdict inconclusive (exit 3): never failed, never
    # passed without every check's evidence. At n=5 MMLU's 0.6 is within its limit of chance (a
    # uninformative check, no verdict held back), and the needle's 10 items decide under point and
    # lower_bound
    warn = {"upper_bound": True, "point": 5 < n < 50, "lower_bound": False}[decision]
    assert ("\n| ⚠️ |" in res.output) == warn, res.output
    assert res.exit_code == (3 if warn else 0), res.output
    assert "❌" not in res.output and "significant drop" in res.output
    assert ("evalsuite gate inconclusive: 1 inconclusive" in res.output) == warn


def test_swapped_runs_flip_the_change(tmp_path):
    base, cand = two_runs(tmp_path, {"wrong": range(10)}, {"wrong": range(16)})
    rules = rules_file(tmp_path, {"decision": "point", "rules": [{"metrics": "mmlu/acc", "max_drop_points": 5}]})

    def row(a, b):
        out = gate("--baseline", str(a), "--candidate", str(b), "--rules", str(rules)).output
        return next(line for line in out.splitlines() if "`mmlu/acc`" in line).split(" | ")

    ab, ba = row(base, cand), row(cand, base)
    assert ab[6] == "+3.00 pt" and ba[6] == "-3.00 pt"
    low, high = ab[7].split("..")
    assert ba[7] == f"{-float(high):+.2f}..{-float(low):+.2f}"


def test_insufficient_n_follows_the_configured_decision(tmp_path):
    # 12 items: one changed answer is 8.3 points against a 2-point limit, so no decision is possible
    base, cand = two_runs(tmp_path, {"wrong": []}, {"wrong": [0]}, n=12)
    # warn: no evidence either way, so inconclusive (exit 3); pass lets it through as configured
    for outcome, code in (("warn", 3), ("pass", 0), ("fail", 1)):
        rules = rules_file(tmp_path, {"decision": "point", "insufficient_n": outcome,
                                      "rules": [{"metrics": "mmlu/acc", "max_drop_points": 2}]})
        res = gate("--baseline", str(base), "--candidate", str(cand), "--rules", str(rules))
        assert res.exit_code == code, res.output
        assert "insufficient n: one item moves the score by 8.3 pt > limit" in res.output
    few = rules_file(tmp_path, {"min_n": 20, "rules": [{"metrics": "mmlu/acc", "max_drop_points": 2}]})
    res = gate("--baseline", str(base), "--candidate", str(cand), "--rules", str(few))
    assert "insufficient n: n=12 paired items < min_n 20" in res.output and res.exit_code == 3


def test_a_drop_shown_to_exceed_the_limit_fails_even_when_n_is_small(tmp_path):
    base, cand = two_runs(tmp_path, {"wrong": []}, {"wrong": range(20)}, n=20)  # all 20 lost
    res = gate("--baseline", str(base), "--candidate", str(cand), "--rules", str(DEFAULT_RULES))
    assert res.exit_code == 1
    assert "insufficient n: even with no item changed" in res.output
    assert "but the drop is shown to exceed the limit" in res.output


def test_each_check_decides_alone_unless_adjust_asks(tmp_path):
    """The pass decision is an intersection-union test: each check at alpha, so one candidate's verdict
    never depends on the candidates beside it. `adjust: holm` adjusts over the candidate's own checks."""
    # c0 loses 5 of 200 MMLU items and gains none: McNemar's one-sided p = 1/32; its two needle cells are
    # unchanged (p 1). Against a 0-point limit (lower_bound) that is a drop shown at alpha 0.05 ...
    cells = {1024: 1.0, 2048: 1.0}
    run = build_run(tmp_path / "runs", "20250101-000000-h",
                    {"bf16": {"needle": cells}, "c0": {"wrong": range(5), "needle": cells},
                     "c1": {"wrong": range(5, 40), "needle": cells}, "c2": {"needle": cells}}, baseline="bf16")
    spec = {"decision": "lower_bound", "rules": [{"metrics": ["mmlu/acc", "needle/acc/*"], "max_drop_points": 0}]}

    def c0_row(adjust: str, *others: str) -> str:
        rules = rules_file(tmp_path, {**spec, "adjust": adjust})
        res = gate("--baseline", f"{run}:bf16", "--candidate", f"{run}:c0",
                   *[a for o in others for a in ("--candidate", f"{run}:{o}")], "--rules", str(rules))
        return next(ln for ln in res.output.splitlines() if ln.startswith("| `c0` |"))

    alone = c0_row("none")
    assert alone.startswith("| `c0` | ❌ failed |")
    assert c0_row("none", "c1", "c2") == alone  # others joining the call change nothing
    # ... but not after Holm over c0's three checks (1/32 x 3 > 0.05); still independent of the others
    assert c0_row("holm").startswith("| `c0` | ✅ passed |") and c0_row("holm", "c1", "c2") == c0_row("holm")
    header = gate("--baseline", f"{run}:bf16", "--candidate", f"{run}:c0", "--rules",
                  str(rules_file(tmp_path, spec))).output
    assert "intersection-union test" in header and "Holm-adjusted (family-wise error) over each candidate" in header


def test_a_skipped_variant_keeps_its_verdict_when_a_named_candidate_joins(tmp_path):
    """A variant reached through a whole run (`--candidate RUN`) that did not run is `skipped`; a
    candidate named elsewhere in the same call does not make it `failed`. Named itself, it fails."""
    wrong = range(0, 2000, 5)
    run = build_run(tmp_path / "runs", "20250101-000000-x",
                    {"bf16": {"wrong": wrong}, "fp8": {"wrong": wrong},
                     "awq": {"status": "skipped", "reason": "no kernel"}}, n=2000, baseline="bf16")
    other = build_run(tmp_path / "runs", "20250101-000001-y", {"int8": {"wrong": wrong}}, n=2000)

    def awq_row(*candidates: str) -> str:
        res = gate("--baseline", f"{run}:bf16", *[a for c in candidates for a in ("--candidate", c)],
                   "--rules", str(DEFAULT_RULES))
        return next(ln for ln in res.output.splitlines() if ln.startswith("| `awq` |"))

    assert "skipped" in awq_row(str(run))
    assert awq_row(str(run), f"{other}:int8") == awq_row(str(run))
    assert "failed" in awq_row(f"{run}:awq")


def test_a_check_too_small_to_judge_holds_the_verdict_back(tmp_path):
    """Intersection-union: MMLU's 2,000 identical items pass on evidence, but 30 points lost on ten
    needle items per length (too few to show either way at 10 pt) is not waved through: inconclusive."""
    wrong = range(0, 2000, 5)
    base, cand = two_runs(tmp_path, {"wrong": wrong, "needle": {4096: 1.0, 8192: 1.0}},
                          {"wrong": wrong, "needle": {4096: 0.7, 8192: 0.7}}, n=2000)
    res = gate("--baseline", str(base), "--candidate", str(cand), "--rules", str(DEFAULT_RULES))
    assert res.exit_code == 3, res.output
    assert "| `fp8` | ❔ inconclusive |" in res.output and "insufficient n" in res.output
    lenient = rules_file(tmp_path, {**load_rules(DEFAULT_RULES).model_dump(exclude_none=True), "insufficient_n": "pass"})
    assert gate("--baseline", str(base), "--candidate", str(cand), "--rules", str(lenient)).exit_code == 0


def test_findings_adjust_over_a_candidates_checks_with_holm_or_bh(tmp_path):
    base, cand = two_runs(tmp_path, {}, {"wrong": range(6), "needle": {1024: 1.0}}, n=200)
    for findings, word in (("holm", "Holm"), ("bh", "BH"), ("none", "unadjusted")):
        rules = rules_file(tmp_path, {"findings": findings, "rules": [{"metrics": ["mmlu/acc"], "max_drop_points": 5}]})
        res = gate("--baseline", str(base), "--candidate", str(cand), "--rules", str(rules))
        row = next(ln for ln in res.output.splitlines() if "`mmlu/acc`" in ln)
        assert f"significant drop (p 0.016, {word} 0.016)" in row, row  # one check: nothing to adjust


def test_baseline_and_candidates_from_different_run_folders(tmp_path):
    a = build_run(tmp_path / "runs", "20250101-000000-A", {"bf16": {}, "fp8": {"wrong": range(2)}})
    b = build_run(tmp_path / "runs", "20250102-000000-B", {"awq": {"wrong": range(3)}, "fp8": {}}, n=150)
    junit = tmp_path / "g.xml"
    res = gate("--baseline", f"{a}:bf16", "--candidate", f"{b}:awq", "--candidate", f"{a}:fp8",
               "--candidate", f"{b}:fp8", "--rules", str(DEFAULT_RULES), "--junit", str(junit))
    assert res.exit_code in (0, 1), res.output
    suites = {s.get("name") for s in ET.parse(junit).getroot().iter("testsuite")}
    # fp8 exists in both runs, so it is named run:variant; awq and the baseline are unique
    assert suites == {"awq vs bf16", "20250101-000000-A:fp8 vs bf16", "20250102-000000-B:fp8 vs bf16"}
    row = next(line for line in res.output.splitlines() if "`awq`" in line and "`mmlu/acc`" in line)
    assert "paired, n=150 of 200/150" in row  # only the ids both runs answered
    assert gate("--baseline", f"{a}:nope", "--candidate", str(b), "--rules", str(DEFAULT_RULES)).exit_code == 2


def test_an_engine_figure_measured_two_ways_is_not_judged(tmp_path):
    """Weights from vLLM's API (parameter bytes) and from its log line (allocator growth) differ by a
    few percent on one model: a "growth" between them is the method, not the variant."""
    run = build_run(tmp_path / "runs", "20250101-000000-A",
                    {"bf16": {"weights_gib": 3.318, "source": {"weights_gib": "api"}},
                     "part": {"weights_gib": 3.41, "source": {"weights_gib": "log"}},
                     "same": {"weights_gib": 3.41, "source": {"weights_gib": "api"}}})
    res = gate("--baseline", f"{run}:bf16", "--candidate", f"{run}:part", "--candidate", f"{run}:same",
               "--rules", str(DEFAULT_RULES))
    part = next(line for line in res.output.splitlines() if "`part`" in line and "weights_gib" in line)
    same = next(line for line in res.output.splitlines() if "`same`" in line and "weights_gib" in line)
    assert "measured two ways (baseline: api, candidate: log): not compared" in part
    assert "growth +2.8%" in same


def test_latency_is_judged_per_length_and_p99_needs_samples(tmp_path):
    base, cand = two_runs(tmp_path, {"ttft": {512: 10.0, 4096: 100.0}}, {"ttft": {512: 20.0, 4096: 100.0}})
    res = gate("--baseline", str(base), "--candidate", str(cand), "--rules", str(DEFAULT_RULES))
    assert res.exit_code == 1
    assert "`latency/ttft_ms_p50/ctx512`" in res.output and "growth +100.0%, 95% bounds +96.0..+104.0%: shown " \
        "beyond the limit 25%" in res.output
    assert "latency/ttft_ms_p50 for `fp8` (pooled over prompt lengths; judged per length)" in res.output
    assert "ruler/score" not in res.output  # a rule's metric of a task the baseline never ran is no finding
    from evalsuite.verdict.checks import relative_check

    spec = Rules.model_validate({"rules": [{"metrics": "latency/*", "max_growth_pct": 10}]})
    check = relative_check(spec, spec.rules[0], "latency/ttft_ms_p99/ctx512", 10.0, 30.0, "x", n=20, percentile=99)
    assert check.status == "warn" and "p99 from 20 samples (needs >= 100" in check.detail
    named = rules_file(tmp_path, {"rules": [{"metrics": ["latency/ttft_ms_p99", "latency/ttft_ms_p50/ctx*"],
                                             "max_growth_pct": 10}]})
    res = gate("--baseline", str(base), "--candidate", str(cand), "--rules", str(named))
    assert "latency/ttft_ms_p99 for `fp8` (not in the baseline (a tail percentile q is recorded only with" in res.output


def test_plan_states_what_n_resolves(tmp_path):
    res = gate("--plan", str(DEFAULT_RULES), "--n", "500")
    assert res.exit_code == 0, res.output
    # 5% discordance, 80% power, 95% one-sided: (1.645 + 0.842) * sqrt(0.05 / 500) = 2.49 points
    assert "is **2.49 pt**" in res.output
    assert "| accuracy | `*/acc, */exact_match` | 2 pt | 2.49 pt | 773 | ⚠️ limit below resolution |" in res.output
    assert "| accuracy by context length | `*/acc/len*, */acc/ctx*` | 10 pt | 2.49 pt | 31 | ok |" in res.output
    assert "Assumptions: 5% of items change answer" in res.output
    assert "is **1.11 pt**" in gate("--plan", str(DEFAULT_RULES), "--n", "500", "--discordance", "0.01").output
    assert gate("--plan", str(DEFAULT_RULES)).exit_code == 2
    assert gate("--rules", str(DEFAULT_RULES)).exit_code == 2


def test_a_partial_candidate_is_shown_on_the_items_both_answered(tmp_path):
    # the baseline's last 50 items are wrong and the candidate never saw them: over its own items the
    # baseline has 0.750, over the 150 both answered 1.000, and the change (+2 pt) is on those 150
    a = build_run(tmp_path / "runs", "20250101-000000-A", {"bf16": {"wrong": range(150, 200)}})
    b = build_run(tmp_path / "runs", "20250102-000000-B", {"awq": {"wrong": range(3)}}, n=150)
    res = gate("--baseline", f"{a}:bf16", "--candidate", f"{b}:awq", "--rules", str(DEFAULT_RULES))
    row = next(line for line in res.output.splitlines() if "`awq`" in line and "`mmlu/acc`" in line)
    assert "| 1.000 | 0.980 | +2.00 pt |" in row, row
    assert "paired, n=150 of 200/150; values on the paired items (each side's own: 0.750 / 0.980)" in row


def _choice_run(tmp_path, run_id: str, variants: dict[str, list[float]], controls=None, yes_every: int = 2) -> Path:
    """A two-choice task (Yes/No, one item in `yes_every` a Yes) whose baseline may sit at chance."""
    from evalsuite.core.rundir import RunDir
    from evalsuite.core.types import RunRecord, Score, VariantResult
    from evalsuite.stats import metrics as M

    rd = RunDir(tmp_path / run_id)
    rd.write_config({"baseline": "bf16", "controls": controls or []})
    record = RunRecord(run_id=run_id, model="tiny")
    for name, values in variants.items():
        scores = [Score(sample_id=f"c{i}", task="legal", value=v, pred="Yes" if v else "No",
                        target="No" if i % yes_every else "Yes", group="t", extra={"logprobs": {"Yes": -0.1, "No": -2.0}})
                  for i, v in enumerate(values)]
        rd.append_samples(name, "legal", [{"sample": {"id": s.sample_id}, "completion": {}, "score": s.model_dump()}
                                          for s in scores])
        result = VariantResult(variant=name, status="ok", metrics=[M.accuracy(scores, "legal/acc")],
                               primary_metrics=["legal/acc"])
        rd.write_result(result)
        record.variants.append(result)
    rd.write_run(record)
    return rd.root


def test_a_task_at_chance_is_uninformative_never_a_pass(tmp_path):
    """Known answer: a two-choice baseline at 0.51 on 2,000 items (95% interval 0.488-0.532) is within the
    2-pt limit of chance 0.5, so a candidate that answers identically cannot pass on it: it is
    inconclusive (exit 3). At 0.80 the same task is informative and the identical candidate passes."""
    rules = rules_file(tmp_path, {"rules": [{"metrics": "legal/acc", "max_drop_points": 2}]})
    near = [float(i < 1020) for i in range(2000)]
    run = _choice_run(tmp_path, "20250101-000000-c", {"bf16": near, "same": near})
    res = gate("--baseline", f"{run}:bf16", "--candidate", f"{run}:same", "--rules", str(rules))
    assert res.exit_code == 3, res.output
    row = next(ln for ln in res.output.splitlines() if "`legal/acc`" in ln)
    assert row.startswith("| ❔ | `same` |") and "(at chance)" in row and "uninformative" in row
    good = [float(i < 1600) for i in range(2000)]
    run = _choice_run(tmp_path, "20250101-000001-c", {"bf16": good, "same": good})
    res = gate("--baseline", f"{run}:bf16", "--candidate", f"{run}:same", "--rules", str(rules))
    assert res.exit_code == 0 and "(at chance)" not in res.output, res.output


def test_chance_for_a_plain_accuracy_is_the_majority_labels_share(tmp_path):
    """A quarter of the labels are Yes: a model answering No to everything scores 0.75 in accuracy,
    so 0.75 is that metric's chance, not 1/2 (an identical candidate is no evidence of kept skill)."""
    from evalsuite.core.rundir import RunDir
    from evalsuite.verdict.informative import chance_level

    all_no = [float(i % 4 != 0) for i in range(2000)]
    run = _choice_run(tmp_path, "20250101-000000-m", {"bf16": all_no, "same": all_no}, yes_every=4)
    rd = RunDir(run)
    assert chance_level(rd.load_run().variants[0], "legal/acc", rd) == pytest.approx(0.75)
    rules = rules_file(tmp_path, {"rules": [{"metrics": "legal/acc", "max_drop_points": 2}]})
    res = gate("--baseline", f"{run}:bf16", "--candidate", f"{run}:same", "--rules", str(rules))
    assert res.exit_code == 3 and "(at chance)" in res.output, res.output


def test_a_control_sets_the_noise_floor(tmp_path):
    """The config's control (a baseline rerun) changes 10 of 2,000 answers; a candidate whose drop lies
    inside the control's bounds is flagged as inside the noise band, and the changed shares show."""
    base = [float(i % 5 != 0) for i in range(2000)]
    rerun = [1.0 - v if i < 10 else v for i, v in enumerate(base)]  # 10 answers flip, both ways
    cand = [0.0 if i in (1, 2, 3) else v for i, v in enumerate(base)]  # 3 lost
    run = _choice_run(tmp_path, "20250101-000000-n", {"bf16": base, "bf16_repeat": rerun, "fp8": cand},
                      controls=["bf16_repeat"])
    rules = rules_file(tmp_path, {"rules": [{"metrics": "legal/acc", "max_drop_points": 2}]})
    res = gate("--baseline", f"{run}:bf16", "--candidate", f"{run}:fp8", "--rules", str(rules))
    assert res.exit_code == 0, res.output
    assert "| `bf16_repeat` (control) | ℹ️ noise reference |" in res.output
    assert "| `fp8` | 3/2,000 (0.15%) |" in res.output and "| `bf16_repeat` (control) | 10/2,000 (0.50%) |" in res.output
    row = next(ln for ln in res.output.splitlines() if ln.startswith("| ✅ | `fp8` |"))
    assert "inside control `bf16_repeat`'s 90% interval of the same drop" in row


def test_runs_that_share_no_items_are_never_green(tmp_path):
    a = build_run(tmp_path / "a", "20250101-000000-a", {"bf16": {}})
    b = build_run(tmp_path / "b", "20250101-000000-b", {"fp8": {}})
    for f in (Path(b) / "fp8" / "samples").glob("*.jsonl"):  # same task, other questions
        f.write_text(f.read_text().replace('"q', '"other-q'))
    rules = rules_file(tmp_path, {"rules": [{"metrics": "mmlu/acc", "max_drop_points": 2}]})
    res = gate("--baseline", f"{a}:bf16", "--candidate", f"{b}:fp8", "--rules", str(rules))
    assert res.exit_code == 3, res.output
    assert "the runs scored different items (200 and 200, no sample id in common)" in res.output


def test_a_control_the_run_never_measured_is_left_out(tmp_path):
    base = [float(i % 5 != 0) for i in range(2000)]
    run = _choice_run(tmp_path, "20250101-000000-m", {"bf16": base, "fp8": base}, controls=["bf16_repeat"])
    rules = rules_file(tmp_path, {"rules": [{"metrics": "legal/acc", "max_drop_points": 2}]})
    res = gate("--baseline", f"{run}:bf16", "--candidate", f"{run}:fp8", "--rules", str(rules))
    assert res.exit_code == 0 and "(control)" not in res.output, res.output


def test_not_checked_names_each_metric_once_with_the_candidates_it_applies_to():
    from evalsuite.verdict.checks import Check
    from evalsuite.report.gate_report import _skipped

    checks = [Check(c, "latency", m, "skip", "not in the baseline") for c in ("a", "b")
              for m in ("latency/ttft_ms_p50", "latency/itl_ms_p50")]
    checks.append(Check("b", "memory", "engine/required_gib", "skip", "measured differently"))
    assert _skipped(checks, 2) == ["latency/ttft_ms_p50, latency/itl_ms_p50 for every candidate (not in the baseline)",
                                   "engine/required_gib for `b` (measured differently)"]


def test_the_end_of_a_run_judges_once_and_hands_the_gate_to_the_page(tmp_path, monkeypatch):
    """The summary's gate column and the report page ask the same question: the summary's report is
    handed to the page, which judges only what it was not handed."""
    from rich.console import Console

    from evalsuite.core.rundir import RunDir
    from evalsuite.report.page import build, rules_file
    from evalsuite.report.summary import print_summary
    from evalsuite.verdict import gate as gate_mod

    run = build_run(tmp_path / "runs", "20250101-000000-all", {"bf16": {}, "fp8": {"weights_gib": 2.0}}, baseline="bf16")
    calls = []
    real = gate_mod.evaluate
    monkeypatch.setattr(gate_mod, "evaluate", lambda *a, **k: calls.append(1) or real(*a, **k))
    rd = RunDir(run)
    handed = print_summary(rd.load_run(), Console(width=160, record=True), run_dir=rd)
    assert len(calls) == 1 and handed.verdicts() == {"fp8": "failed"}
    path = rules_file(None, rd)
    page = build([(rd, None)], None, load_rules(path), str(path), handed)
    assert len(calls) == 1 and page.parts[0].gate is handed
    asked = build([(rd, None)], None, load_rules(path), str(path))
    assert len(calls) == 2 and asked.parts[0].gate.verdicts() == handed.verdicts()


def _gate_cut_before_law(tmp_path, base: dict, cand: dict) -> tuple[object, str]:
    """Gate a candidate cut before any "law" item (the odd ids are "math"): the result and its MMLU row."""
    a = build_run(tmp_path / "runs", "20250101-000000-A", {"bf16": base})
    b = build_run(tmp_path / "runs", "20250102-000000-B", {"awq": cand})
    samples = b / "awq" / "samples" / "mmlu.jsonl"
    lines = samples.read_text().splitlines()
    samples.write_text("".join(line + "\n" for line in lines if '"group": "math"' in line))
    res = gate("--baseline", f"{a}:bf16", "--candidate", f"{b}:awq", "--rules", str(DEFAULT_RULES))
    row = next(line for line in res.output.splitlines() if "`awq`" in line and "`mmlu/acc`" in line)
    assert "insufficient n: no paired item in 1 of the 2 groups behind it (law)" in row, row
    return res, row


def test_a_partial_candidate_missing_whole_groups_is_not_evidence(tmp_path):
    # its 100 paired items are all right, but they are one subject's, so the average over both cannot
    # pass on them
    res, _ = _gate_cut_before_law(tmp_path, {}, {})
    assert res.exit_code != 0 and "passed: 1 passed" not in res.output


def test_a_latency_check_timed_on_a_loaded_host_is_not_comparable(tmp_path):
    """The candidate's latency pass ran at a 1-minute load of 9.5 on 4 CPUs: its requests waited for a
    CPU too, so its 4x first-token time is no evidence either way: not compared (neither failed nor
    passed), and the markdown says which side and at what load; a quiet pair adds no note."""
    spec = {"wrong": range(30), "ttft": {512: 10.0}, "itl": {512: 2.0}}
    busy = {**spec, "ttft": {512: 40.0}, "host_load": {"cpus": 4, "start": [9.5, 6.0, 3.0], "end": [8.0, 6.0, 3.0]}}
    base, cand = two_runs(tmp_path, spec, busy)
    md = tmp_path / "gate.md"
    res = gate("--baseline", str(base), "--candidate", str(cand), "--rules", str(DEFAULT_RULES), "--markdown", str(md))
    assert res.exit_code == 0, res.output  # MMLU's 200 identical answers are the evidence
    text = md.read_text()
    assert "† latency timed on a loaded host" in text and "fp8 (1-min load 9.5 at start, 8.0 at end, 4 CPUs)" in text
    assert "latency/ttft_ms_p50/ctx512, latency/itl_ms_p50/ctx512 for `fp8` (not comparable: the candidate timed on " \
           "a loaded host" in text
    quiet = tmp_path / "quiet"
    base, cand = two_runs(quiet, spec, spec)
    gate("--baseline", str(base), "--candidate", str(cand), "--rules", str(DEFAULT_RULES), "--markdown", str(md))
    assert "loaded host" not in md.read_text()


def _latency_checks(tmp_path, base: dict, cand: dict, control: dict | None = None):
    from evalsuite.verdict.gate import run_gate
    from evalsuite.verdict.sides import Side

    variants = {"bf16": base, "fp8": cand, **({"bf16_repeat": control} if control else {})}
    root = build_run(tmp_path / "runs", "20250101-000000-one", variants, baseline="bf16")
    controls = [Side(RunDir(root), "bf16_repeat")] if control else []
    report = run_gate(Side(RunDir(root), "bf16"), [Side(RunDir(root), "fp8")], load_rules(DEFAULT_RULES),
                      str(DEFAULT_RULES), controls)
    return {(c.candidate, c.metric): c for c in report.checks if c.metric.startswith("latency/") and c.status != "skip"}


def test_a_latency_check_fails_only_where_its_repeats_show_the_change_beyond_the_limit(tmp_path):
    """A median's change gets an interval from the two passes' repeats (Hodges-Lehmann, evalsuite.stats.
    timing): +30% with the repeats 2% apart is shown beyond a 25% limit; the same +30% from three
    requests a side spread by 2x is not shown either way (insufficient n, `warn`), and nothing but a
    shown change fails. A figure shown within passes on evidence; a throughput's drop likewise."""
    from evalsuite.verdict.checks import timing_check

    checks = _latency_checks(tmp_path, {"ttft": {512: 10.0}}, {"ttft": {512: 13.0}})
    c = checks[("fp8", "latency/ttft_ms_p50/ctx512")]
    assert c.status == "fail" and c.low > 25 and "shown beyond the limit 25%" in c.detail and c.n == 5
    same = _latency_checks(tmp_path / "same", {"ttft": {512: 10.0}}, {"ttft": {512: 10.5}})
    c = same[("fp8", "latency/ttft_ms_p50/ctx512")]
    assert c.status == "pass" and c.evidence and c.high <= 25 and c.low < 5 < c.high
    wide = build_run(tmp_path / "wide", "20250101-000000-w", {"bf16": {}, "fp8": {}})
    rd = RunDir(wide)
    for name, values in (("bf16", [5.0, 10.0, 20.0]), ("fp8", [6.5, 13.0, 26.0])):
        rd.append_samples(name, "latency", [{"sample": {"id": f"len512-r{i}"}, "completion": {}, "score": {
            "sample_id": f"len512-r{i}", "task": "latency", "value": 1.0, "pred": "", "target": "", "group": "512",
            "extra": {"ttft_ms": v, "prompt_tokens": 512, "output_tokens": 8}}} for i, v in enumerate(values)])
    from evalsuite.core.types import Metric
    from evalsuite.verdict.checks import Pair

    record = rd.load_run()
    base, cand = record.variant("bf16"), record.variant("fp8")
    base.metrics.append(Metric(name="latency/ttft_ms_p50/ctx512", value=10.0, n=3))
    cand.metrics.append(Metric(name="latency/ttft_ms_p50/ctx512", value=13.0, n=3))
    rules = load_rules(DEFAULT_RULES)
    rule = rules.rule_for("latency/ttft_ms_p50/ctx512")
    c = timing_check(rules, rule, "latency/ttft_ms_p50/ctx512", Pair(rd, base, rd, cand), "fp8")
    assert c.status == "warn" and c.change == pytest.approx(30.0) and c.low < 25 < c.high
    assert "insufficient n" in c.detail and "reach both sides of the limit 25%" in c.detail
    throughput = Rules.model_validate({"rules": [{"metrics": "latency/*", "max_drop_pct": 20}]})
    c = timing_check(throughput, throughput.rules[0], "latency/ttft_ms_p50/ctx512", Pair(rd, cand, rd, base), "x")
    assert c.change == pytest.approx((1 - 10 / 13) * 100) and c.low < c.change < c.high


def test_the_controls_own_latency_change_stands_beside_each_candidates(tmp_path):
    checks = _latency_checks(tmp_path, {"ttft": {512: 10.0}}, {"ttft": {512: 11.0}}, control={"ttft": {512: 10.2}})
    c, ctrl = checks[("fp8", "latency/ttft_ms_p50/ctx512")], checks[("bf16_repeat", "latency/ttft_ms_p50/ctx512")]
    assert ctrl.status == "pass" and c.noise == (ctrl.low, ctrl.high)
    assert f"control `bf16_repeat`: +2.0% [{ctrl.low:+.1f}, {ctrl.high:+.1f}]" in c.detail


def test_latency_timed_in_two_conditions_is_not_comparable(tmp_path):
    """The baseline alone on an idle card, the candidate beside neighbours paused mid-prefill whose
    queued kernels nobody waited out (an older record's `placement.latency: pause` reads so too), or
    after another warm-up: `not comparable`, never a verdict, and the reason names the side. Both
    paused and the card found idle by NVML: compared."""
    idle = {"neighbours": "none", "idle": "nvml", "idle_ok": True, "warmup": 2, "engine": "offline"}
    paused = {**idle, "neighbours": "paused", "idle": None, "idle_ok": None,
              "paused": {"kv_fp8": {"task": "ruler", "requests": 12, "longest_prompt": 32768}}}
    drained = {**paused, "idle": "nvml", "idle_ok": True, "drain_s": 0.8}
    for cand, why in ((paused, "the candidate neighbours paused but the device not verified idle"),
                      ({**idle, "warmup": 0}, "timed with other warm-ups (baseline: 2, candidate: 0)"),
                      ({**idle, "neighbours": "running"}, "the candidate timed beside running engines")):
        base_rd, cand_rd = two_runs(tmp_path / why[:12].replace(" ", "_"), {"ttft": {512: 10.0}, "timing": idle},
                                    {"ttft": {512: 40.0}, "timing": cand})
        md = tmp_path / "gate.md"
        res = gate("--baseline", str(base_rd), "--candidate", str(cand_rd), "--rules", str(DEFAULT_RULES),
                   "--markdown", str(md))
        assert res.exit_code == 0, res.output  # MMLU decides; latency is not judged either way
        assert f"latency/ttft_ms_p50/ctx512 for `fp8` (not comparable: {why}" in md.read_text()
    base_rd, cand_rd = two_runs(tmp_path / "drained", {"ttft": {512: 10.0}, "timing": idle},
                                {"ttft": {512: 40.0}, "timing": drained})
    res = gate("--baseline", str(base_rd), "--candidate", str(cand_rd), "--rules", str(DEFAULT_RULES))
    assert res.exit_code == 1 and "shown beyond the limit 25%" in res.output


def test_a_drop_on_the_groups_a_partial_candidate_reached_fails_only_if_the_missing_ones_cannot_undo_it():
    """Paired items that miss whole groups show a drop beyond the limit on those groups; whether the
    metric's drop does depends on what the missing groups could give back (the candidate right on all
    of them): 80 points lost on one group of two is a drop of at least 40 where the baseline gets the
    other group all right, and no evidence where it gets it all wrong (the candidate could gain 100)."""
    from evalsuite.stats.paired import p_exceeds_whole, pair, paired_result

    def items(group: str, right: int, n: int = 50) -> dict[str, dict]:
        return {f"{group}-{i}": {"value": float(i < right), "group": group} for i in range(n)}

    cand = items("math", 5)
    for law_right, beyond in ((50, True), (0, False)):
        base = {**items("math", 45), **items("law", law_right)}
        p = pair(base, cand, [])
        assert p.missing_groups == ("law",) and p.unmeasured[0] == pytest.approx(0.5)
        test = paired_result(p, 0.95)
        assert test.p_exceeds(0.05) < 0.05  # the paired items alone: 80 points lost
        assert (p_exceeds_whole(test, p.unmeasured, 0.05) < 0.05) is beyond
    assert p_exceeds_whole(test, (0.0, 0.0), 0.05) == test.p_exceeds(0.05)  # nothing missing: the test as it is


def test_a_partial_candidates_loss_on_the_groups_it_reached_is_no_verdict_on_the_average(tmp_path):
    # it lost 20 of the 100 "math" items; the baseline is wrong on every "law" item: were the candidate
    # right on all of law, the average would be better than the baseline's, so the check is
    # insufficient, not failed
    _, row = _gate_cut_before_law(tmp_path, {"wrong": range(0, 200, 2)}, {"wrong": range(1, 41, 2)})
    assert "shown to exceed" not in row and "no significant drop" in row, row
