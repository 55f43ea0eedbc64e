"""Sized to decide: every shipped config's items resolve its gate rules' limits (`gate --plan`'s
computation, at the rules' discordance), and `validate` says so, before any engine, where a config's
do not."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalsuite.cli.main import app
from evalsuite.verdict.rules import load_rules, named_rules_path
from evalsuite.run.config import load_config
from evalsuite.run.sizing import planned, sizing_warnings

REPO = Path(__file__).resolve().parents[1]
# evalsuite/configs/models/ holds plan's index of models' config.json, not run configs
SHIPPED = sorted([*(REPO / "configs").glob("*.yaml"), *(p for p in (REPO / "evalsuite" / "configs").rglob("*.yaml")
                                                        if p.parent.name != "models")])
runner = CliRunner()


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(REPO)))
def test_every_shipped_config_resolves_its_rules(path):
    cfg = load_config(path)
    assert sizing_warnings(cfg, load_rules(named_rules_path(cfg.gate_rules))) == []


def test_the_cpu_configs_name_the_smoke_rules_and_the_gpu_ones_the_default():
    smoke = {p.name for p in SHIPPED if named_rules_path(load_config(p).gate_rules).name == "gate_rules_smoke.yaml"}
    assert {"cpu-smoke.yaml", "starter.yaml", "fp8.yaml", "ruler-cpu.yaml"} <= smoke
    assert not smoke & {"starter-gpu.yaml", "qwen2.5-7b-instruct.yaml", "llama-3.1-8b-instruct-128k.yaml"}


def test_validate_says_which_limits_a_config_cannot_resolve(tmp_path):
    """24 needles (two lengths) against the default rules: 5 points over the whole grid, 10 per length."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model: {hf: org/model}\nvariants: {bf16: {}}\ntasks:\n"
                   "  - {type: needle, lengths: [1024, 2048], depths: [0.0, 0.25, 0.5, 0.75, 1.0, 0.1], seeds: 2}\n")
    res = runner.invoke(app, ["validate", str(cfg)])
    assert res.exit_code == 0, res.output
    lines = [ln.removeprefix(f"{cfg}: warning: ") for ln in res.output.splitlines() if ": warning: " in ln]
    # 24 items: the exact bound with no answer changed is 12.5 pt (1 - 0.05^(1/24) = 11.7 but for a count
    # whose statistic joins the observed one between 11.3 and 12.5)
    assert lines[:3] == ["needle/acc: 24 items resolve 12.5 pt, the limit is 5 pt, about 124 needed",
                         "needle/acc/len1024: 12 items resolve 22.1 pt, the limit is 10 pt, about 31 needed",
                         "needle/acc/len2048: 12 items resolve 22.1 pt, the limit is 10 pt, about 31 needed"]
    assert "gate_rules.yaml; 5% of answers changing, 80% power" in lines[3]
    cfg.write_text(cfg.read_text() + "gate_rules: nowhere.yaml\n")
    res = runner.invoke(app, ["validate", str(cfg)])
    assert res.exit_code == 2 and "gate_rules: 'nowhere.yaml' is neither a shipped rule set nor a file here" in res.output


def test_planned_items_follow_each_task_kind():
    cfg = load_config(REPO / "configs" / "cpu-smoke.yaml")
    counts = {p.metric: p.n for t in cfg.tasks for p in planned(t)}
    assert counts == {"mmlu/acc": 48, "mmlu/acc_macro": 48, "legal/balanced_acc": 52, "legal/acc": 52,
                      "needle/acc": 50, "needle/acc/len512": 50}
    ruler = load_config(REPO / "configs" / "ruler-cpu.yaml").tasks[0]
    assert {p.metric: p.n for p in planned(ruler)} == {"ruler/score": 33, "ruler/score/len3072": 33}
    assert {p.metric: p.n for p in planned(ruler, limit=11)} == {"ruler/score": 11, "ruler/score/len3072": 11}
