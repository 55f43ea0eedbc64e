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
