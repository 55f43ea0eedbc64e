"""Two-choice scoring by a threshold on the log-probability margin (evalsuite.tasks.threshold):
the threshold's choice, the leave-one-out calibration prompts, the metrics of both scorings, and a
real-engine run whose recorded samples reproduce its thresholds and metrics."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from evalsuite.core.errors import ConfigError, EvalsuiteError
from evalsuite.core.types import Completion, Sample, Score, VariantResult
from evalsuite.data.tables import read_records
from evalsuite.tasks import ChoiceConfig, TaskContext
from evalsuite.tasks.choice import choice_request
from evalsuite.tasks.spec import Renderer, load_definition
from evalsuite.tasks.threshold import (apply_threshold, argmax_value, decide, fit_threshold, fit_thresholds, margin)

CUAD = Path(__file__).resolve().parents[1] / "tasks/data/legalbench-cuad"


def LegalConfig(**kw) -> ChoiceConfig:  # noqa: N802 - a run config's `- type: legal` block
    return ChoiceConfig(type="legal", **kw)


def _ctx(tmp_path: Path) -> TaskContext:
    return TaskContext(base_dir=tmp_path, cache_dir=tmp_path / "cache")


@pytest.mark.parametrize("margins, positive, want", [
    # separable: the midpoint of the gap between the labels
    ([-1.0, 0.5, 2.0, 3.0], [False, False, True, True], 1.25),
    # a model that says "Yes" to everything (every margin > 0) is still ordered: 1.5 and 3.5 both
    # reach 0.75, and the one nearer 0 (the argmax rule) wins
    ([1.0, 2.0, 3.0, 4.0], [False, True, False, True], 1.5),
    # the same bias mirrored below 0
    ([-4.0, -3.0, -2.0, -1.0], [False, True, False, True], -1.5),
    # the margins order the labels the wrong way: no threshold beats argmax, which stays
    ([1.0, 2.0], [True, False], 0.0),
    ([-4.0, -3.0, -2.0, -1.0], [True, False, True, False], 0.0),
    # one label only, or no two distinct margins: the argmax rule
    ([1.0, 2.0, 3.0], [True, True, True], 0.0),
    ([2.0, 2.0], [True, False], 0.0),
    ([], [], 0.0),
    # float32 rounding of one bf16 margin (0.99999994, 1.0) is one margin, not a gap to split
    ([0.9999999403953552, 1.0, 1.25], [False, True, True], 1.125),
    # an infinite margin (one choice outside the top-k) counts, but makes no candidate threshold
    ([1.0, 2.0, math.inf], [False, True, True], 1.5),
    ([1.0, -math.inf, math.inf], [False, False, True], 0.0),
])
def test_fit_threshold_known_answers(margins, positive, want):
    assert fit_threshold(margins, positive) == want


def test_fit_threshold_maximizes_balanced_accuracy_with_ties_nearest_zero():
    margins = [-2.5, -1.0, 0.2, 0.7, 1.1, 2.0, 3.3, 5.0]
    positive = [False, True, False, True, False, True, True, False]

    def bal(t: float) -> float:
        pos = [d >= t for d, y in zip(margins, positive) if y]
        neg = [d < t for d, y in zip(margins, positive) if not y]
        return (sum(pos) / len(pos) + sum(neg) / len(neg)) / 2

    cands = [0.0] + sorted((a + b) / 2 for a, b in zip(sorted(margins), sorted(margins)[1:]))
    best = max(bal(t) for t in cands)
    t = fit_threshold(margins, positive)
    assert bal(t) == best and abs(t) == min(abs(c) for c in cands if bal(c) == best)


def test_decision_at_zero_is_the_argmax_rule_ties_to_the_first_choice():
    assert decide(0.0, 0.0, ["Yes", "No"]) == "Yes" and decide(-1e-9, 0.0, ["Yes", "No"]) == "No"
    assert decide(None, 0.0, ["Yes", "No"]) == ""
    assert margin({"Yes": -0.5, "No": -2.0}) == 1.5
    assert margin({"Yes": None, "No": -2.0}) == -math.inf and margin({"Yes": None, "No": None}) is None


def _score(group: str, target: str, yes: float | None, no: float | None, value: float | None = None) -> Score:
    pred = "Yes" if (yes or -99) >= (no or -99) else "No"
    return Score(sample_id=f"{group}/x/{target}{yes}{no}", task="legal", value=float(pred == target) if value is None else value,
                 pred=pred, target=target, group=group, extra={"logprobs": {"Yes": yes, "No": no}})


def test_apply_threshold_judges_by_the_margin_and_keeps_argmax_recoverable():
    s = _score("t", "No", -0.2, -1.0)  # argmax says Yes (wrong); margin 0.8
    judged = apply_threshold(s, 1.0)
    assert (judged.pred, judged.value) == ("No", 1.0)
    assert judged.extra["margin"] == pytest.approx(0.8) and judged.extra["threshold"] == 1.0
    back = argmax_value(judged)
    assert (back.pred, back.value) == ("Yes", 0.0)
    none = apply_threshold(_score("t", "No", None, None), 1.0)
    assert (none.pred, none.value, none.extra["margin"]) == ("", 0.0, None)


def test_thresholds_per_group_from_calibration_scores():
    calib = [_score("a", "No", -0.1, -1.0), _score("a", "Yes", -0.1, -3.0),  # margins 0.9 / 2.9
             _score("b", "Yes", -1.0, -0.5), _score("b", "No", -2.0, -0.5)]  # margins -0.5 / -1.5
    assert fit_thresholds(calib) == {"a": pytest.approx(1.9), "b": pytest.approx(-1.0)}


def test_calibration_prompts_leave_their_own_example_out(tmp_path):
    task = LegalConfig(data_dir=str(CUAD), tasks=["anti_assignment"], limit_per_task=2).build(_ctx(tmp_path))
    train = read_records(CUAD / "anti_assignment/train.tsv")
    render = Renderer(load_definition("legal"))
    calibration = task.calibration_samples()
    assert [s.id for s in calibration] == [f"anti_assignment/train/{i}" for i in range(len(train))]
    for i, s in enumerate(calibration):
        others = [r for j, r in enumerate(train) if j != i]
        assert s.request.prompt == render.build("anti_assignment", train[i], others)
        own = f"Clause: {train[i]['text']}\nLabel: {train[i]['label']}"
        assert own not in s.request.prompt and s.request.prompt.count("\nLabel:") == len(train)
        assert s.meta == {"calibration": True} and s.target == train[i]["label"]
    few = LegalConfig(data_dir=str(CUAD), tasks=["anti_assignment"], num_fewshot=6).build(_ctx(tmp_path))
    assert all(s.request.prompt.count("\nLabel:") == 6 for s in few.calibration_samples())  # 5 others + itself
    argmax = LegalConfig(data_dir=str(CUAD), tasks=["anti_assignment"], scoring="argmax").build(_ctx(tmp_path))
    assert argmax.calibration_samples() == []


def test_yaml_calibration_items_take_every_row_of_the_fewshot_split(tmp_path):
    task = ChoiceConfig(type="legalbench_cuad", groups=["governing_law"], limit=3).build(_ctx(tmp_path))
    assert len(task.samples()) == 3 and len(task.calibration_samples()) == 6
    assert task.chance == 0.5 and ChoiceConfig(type="mmlu").build(_ctx(tmp_path)).chance == 0.25
    arc = ChoiceConfig(type="arc_easy", limit=5).build(_ctx(tmp_path))
    arc.samples()
    assert 0.2 <= arc.chance <= 1 / 3  # 3 to 5 choices an item: uniform guessing's expected score


@pytest.mark.parametrize("name, fragment", [("mmlu", "exactly two choices"), ("boolq", "fewshot.split")])
def test_threshold_scoring_needs_two_choices_and_a_train_split(tmp_path, name, fragment):
    with pytest.raises(ConfigError, match=rf"tasks\.{name}\.scoring: .*{fragment}"):
        ChoiceConfig(type=name, scoring="threshold").build(_ctx(tmp_path))


def test_metrics_follow_the_items_scoring_and_show_argmax_beside(tmp_path):
    task = LegalConfig(data_dir="x").build(_ctx(tmp_path))
    task.thresholds = {"t": 1.0}
    s = lambda target, yes, no: task.score(  # noqa: E731
        Sample(id=f"t/test/{target}{yes}", task="legal", request=choice_request(prompt="p"), target=target,
               choices=["Yes", "No"], group="t"),
        Completion(text="", top_logprobs=[{" Yes": yes, " No": no}]))
    # argmax says Yes to all four (balanced 0.5); margins 2.0 / 1.5 (Yes) and 0.5 / 0.2 (No) split at 1.0
    scores = [s("Yes", -0.1, -2.1), s("Yes", -0.2, -1.7), s("No", -0.4, -0.9), s("No", -0.5, -0.7)]
    m = {x.name: x.value for x in task.metrics(scores)}
    assert m["legal/balanced_acc"] == 1.0 and m["legal/balanced_acc/t"] == 1.0 and m["legal/acc"] == 1.0
    assert m["legal/argmax_balanced_acc"] == 0.5
    assert task.primary_metric == "legal/balanced_acc" and task.chance == 0.5
    old = _score("t", "Yes", -0.1, -2.0)  # recorded by an argmax run: no threshold
    with pytest.raises(EvalsuiteError, match="1 of 5 recorded items were scored without a threshold"):
        task.metrics(scores + [old])
    assert "legal/argmax_balanced_acc" not in {x.name for x in task.metrics([old])}  # an argmax record as it was


def test_a_result_written_before_chance_existed_loads():
    assert VariantResult.model_validate({"variant": "bf16", "status": "ok"}).chance == {}


@pytest.mark.engine
def test_calibrated_run_records_train_items_thresholds_and_both_metrics(tmp_path, tiny_model, repo_root):
    """A real engine run of the CUAD task under threshold scoring: the train items are answered and
    recorded apart, the test items carry the thresholds those give, and `evalsuite finish` computes
    the same metrics from the recorded lines."""
    cfg = {"model": {"path": str(tiny_model)},
           "defaults": {"dtype": "bfloat16", "max_model_len": 2048, "enforce_eager": True,
                        "engine_args": {"kv_cache_memory_bytes": 64 * 2**20}},
           "engine": {"batch_size": 8, "env": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}},
           "variants": {"bf16": {}},
           "tasks": [{"type": "legalbench_cuad", "groups": ["governing_law", "anti_assignment"], "limit": 4}],
           "tracking": {"enabled": False}, "output_dir": str(tmp_path / "runs")}
    path = tmp_path / "cuad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    res = subprocess.run([sys.executable, "-m", "evalsuite", "run", str(path), "--no-progress"], capture_output=True,
                         text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    (run,) = [p for p in (tmp_path / "runs").iterdir() if (p / "run.json").exists()]
    rows = lambda name: [json.loads(x) for x in (run / "bf16" / "samples" / f"{name}.jsonl").read_text().splitlines()]  # noqa: E731
    train, test = rows("legalbench_cuad.calibration"), rows("legalbench_cuad")
    assert sorted(r["sample"]["id"] for r in train) == sorted(f"{g}/train/{i}" for g in ("anti_assignment", "governing_law")
                                                              for i in range(6))
    assert all("margin" in r["score"]["extra"] and r["sample"]["meta"]["calibration"] for r in train)
    thresholds = fit_thresholds([Score.model_validate(r["score"]) for r in train])
    assert len(test) == 8
    for r in test:
        extra = r["score"]["extra"]
        assert extra["threshold"] == thresholds[r["score"]["group"]]
        assert r["score"]["pred"] == decide(margin(extra["logprobs"]), extra["threshold"], ["Yes", "No"])
    result = json.loads((run / "bf16" / "result.json").read_text())
    metrics = {m["name"]: m["value"] for m in result["metrics"]}
    assert {"legalbench_cuad/balanced_acc", "legalbench_cuad/argmax_balanced_acc"} <= set(metrics)
    assert result["chance"] == {"legalbench_cuad/balanced_acc": 0.5}
    # recomputed from the recorded lines alone, as `evalsuite finish` does for a cut run
    (run / "bf16" / "result.json").write_text(json.dumps({**result, "status": "running", "metrics": []}))
    res = subprocess.run([sys.executable, "-m", "evalsuite", "finish", str(run)], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    again = json.loads((run / "bf16" / "result.json").read_text())
    assert {m["name"]: m["value"] for m in again["metrics"] if not m["name"].endswith("_s")} == \
        {k: v for k, v in metrics.items() if not k.endswith("_s")}
    assert again["chance"] == result["chance"]
