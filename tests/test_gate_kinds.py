"""Gate rule kinds: one registry (evalsuite/verdict/kinds.py); a kind added there runs through the real gate."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from evalsuite.cli.main import app
from evalsuite.core.errors import ConfigError
from evalsuite.verdict.checks import Check, Pair
from evalsuite.verdict.kinds import RULE_KINDS, register_rule_kind, rule_kind
from evalsuite.verdict.rules import Rule, Rules, load_rules
from tests.mlflow_server import build_run

runner = CliRunner()
ACCURACY = {"metrics": "mmlu/acc", "max_drop_points": 10}


def within_pct(rules: Rules, rule: Rule, metric: str, pair: Pair, label: str) -> Check:
    """Either way is worse: the candidate's figure stays within the limit's percent of the baseline's."""
    b, c, limit = pair.measured[metric].value, pair.cand_values.get(metric), rule.limit_for(metric)
    change = abs(c - b) / abs(b) * 100
    status = "fail" if change > limit else "pass"
    return Check(label, rule.label, metric, status, f"moved {change:.1f}% (limit {limit:g}%)", b, c, change, limit, "%")


@pytest.fixture
def toy_kind():
    """The toy kind registered as docs/architecture.md says ("How to add a gate rule kind"), and
    taken out again after the test."""
    register_rule_kind("max_change_pct", direction="lower", unit="%")(within_pct)
    yield RULE_KINDS["max_change_pct"]
    del RULE_KINDS["max_change_pct"]


def _rules(tmp_path: Path, rule: dict) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"rules": [ACCURACY, rule]}))
    return path


def test_the_shipped_kinds_declare_direction_unit_and_check():
    assert list(RULE_KINDS) == ["max_drop_points", "max_drop_pct", "max_growth_pct"]
    assert [(k.direction, k.unit) for k in RULE_KINDS.values()] == [("higher", "pt"), ("higher", "%"), ("lower", "%")]
    assert rule_kind("max_growth_pct").growth and rule_kind("max_drop_points").per_item
    with pytest.raises(KeyError, match=r"Unknown rule kind 'nope'\. Available: max_drop_points, max_drop_pct, max_growth_pct"):
        rule_kind("nope")
    with pytest.raises(ValueError, match="registered already"):
        register_rule_kind("max_drop_pct", direction="higher", unit="%")(within_pct)


def test_a_toy_rule_kind_runs_through_the_real_gate(tmp_path, toy_kind):
    run = build_run(tmp_path / "runs", "20250101-000000-k", {"bf16": {}, "small": {"weights_gib": 1.05},
                                                              "large": {"weights_gib": 1.5}}, baseline="bf16")
    rules = _rules(tmp_path, {"name": "weights either way", "metrics": "engine/weights_gib", "max_change_pct": 10})
    assert load_rules(rules).rule_for("engine/weights_gib").spec is toy_kind
    res = runner.invoke(app, ["gate", "--baseline", f"{run}:bf16", "--candidate", str(run), "--rules", str(rules),
                              "--format", "markdown"])
    assert res.exit_code == 1, res.output
    rows = {line.split("|")[2].strip(): line for line in res.output.splitlines() if "`engine/weights_gib`" in line}
    assert "| ✅ |" in rows["`small`"] and "moved 5.0% (limit 10%)" in rows["`small`"], res.output
    assert "| ❌ |" in rows["`large`"] and "moved 50.0% (limit 10%)" in rows["`large`"], res.output
    assert "| `small` | ✅ passed |" in res.output and "| `large` | ❌ failed |" in res.output, res.output


def test_an_unknown_rule_kind_is_one_line_naming_the_file_and_key(tmp_path):
    run = build_run(tmp_path / "runs", "20250101-000000-u", {"bf16": {}, "fp8": {}}, baseline="bf16")
    rules = _rules(tmp_path, {"metrics": "engine/weights_gib", "max_change_pct": 10})
    res = runner.invoke(app, ["gate", "--baseline", f"{run}:bf16", "--candidate", str(run), "--rules", str(rules)])
    assert res.exit_code == 2
    assert res.stderr == (f"evalsuite: error: {rules}: rules.1: Unknown rule kind 'max_change_pct'. Available: "
                          f"max_drop_points, max_drop_pct, max_growth_pct (a rule's other keys: exclude, metrics, name, "
                          f"strata, tasks)\n"), res.stderr
    with pytest.raises(ConfigError, match=r"rules\.1: Unknown rule kind 'max_change_pct'"):
        load_rules(rules)
