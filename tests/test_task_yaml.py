"""Tasks as data: the definitions in tasks/*.yaml, their prompts, scoring and metrics.

MMLU's definition must give lm-eval's prompts byte for byte (tests/test_mmlu.py compares them with
lm-eval itself); CUAD's LegalBench's (tests/test_legal.py). tests/test_task_golden.py holds both,
under their run-config names `mmlu` and `legal`, to the items and prompts of the kept results.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml

from evalsuite.run.config import RunConfig, format_validation_error
from evalsuite.core.errors import ConfigError
from evalsuite.tasks import ChoiceConfig, TaskContext
from evalsuite.tasks import spec as specmod
from evalsuite.tasks.spec import ChoiceTaskDef, defined_tasks, load_definition
from evalsuite.core.types import Completion

OLMO_TASKS = ["arc_challenge", "arc_easy", "boolq", "hellaswag", "openbookqa", "piqa", "winogrande"]


def ctx(tmp_path: Path) -> TaskContext:
    from evalsuite.data.assets import default_cache_dir

    return TaskContext(base_dir=tmp_path, cache_dir=default_cache_dir())


def completions(n: int, keys: list[str], seed: int = 0) -> list[Completion]:
    rng = random.Random(seed)
    return [Completion(text="", top_logprobs=[{k: rng.uniform(-4, 0) for k in keys}]) for _ in range(n)]


def test_every_definition_validates_and_is_named_after_its_file():
    names = defined_tasks()
    assert {"mmlu", "legalbench_cuad", *OLMO_TASKS} <= set(names)
    for name in names:
        spec = load_definition(name)
        assert spec.name == name and spec.prompt


def test_unknown_key_in_a_definition_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(specmod, "tasks_dir", lambda: tmp_path)
    raw = yaml.safe_load((Path(specmod.__file__).parent / "defs" / "boolq.yaml").read_text())
    (tmp_path / "boolq.yaml").write_text(yaml.safe_dump({**raw, "promt": "x"}))
    with pytest.raises(ConfigError) as e:
        load_definition("boolq")
    msg = str(e.value)
    assert "\n" not in msg and "boolq.yaml" in msg and "promt: unknown key" in msg and "prompt" in msg


def test_an_alias_is_the_same_definition_under_its_own_name(tmp_path):
    """`type: legal` is legalbench_cuad.yaml: the same items, prompts, scores and metrics, keyed `legal/...`."""
    c = ctx(tmp_path)
    tasks = ["governing_law", "anti_assignment"]
    generic_task = ChoiceConfig(type="legalbench_cuad", groups=tasks, limit=6).build(c)
    legal_task = ChoiceConfig(type="legal", tasks=tasks, limit_per_task=6).build(c)
    assert legal_task.name == "legal" and generic_task.name == "legalbench_cuad"
    generic, legal = generic_task.samples(), legal_task.samples()
    assert [(s.id, s.request.prompt, s.target, s.group) for s in generic] == [
        (s.id, s.request.prompt, s.target, s.group) for s in legal]
    calibration = generic_task.calibration_samples()
    assert [(s.id, s.request.prompt) for s in calibration] == [(s.id, s.request.prompt) for s in legal_task.calibration_samples()]
    answered = completions(len(calibration), [" Yes", " no", "Yes", " A"], seed=1)
    for task in (generic_task, legal_task):
        task.calibrate([task.score(s, d) for s, d in zip(calibration, answered)])
    assert generic_task.thresholds == legal_task.thresholds and set(legal_task.thresholds) == set(tasks)
    done = completions(len(generic), [" Yes", " no", "Yes", " A"])
    gm = {m.name.split("/", 1)[1]: m for m in generic_task.metrics([generic_task.score(s, d) for s, d in zip(generic, done)])}
    lm = {m.name.split("/", 1)[1]: m for m in legal_task.metrics([legal_task.score(s, d) for s, d in zip(legal, done)])}
    assert gm.keys() == lm.keys()
    for k in gm:
        assert (gm[k].value, gm[k].stderr, gm[k].n) == pytest.approx((lm[k].value, lm[k].stderr, lm[k].n), nan_ok=True), k


def test_old_keys_and_new_ones_together_are_refused():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="subjects"):
        ChoiceConfig(type="mmlu", groups=["anatomy"], subjects=["virology"])


@pytest.mark.parametrize("name", OLMO_TASKS)
def test_olmo_tasks_build_lettered_items(tmp_path, name):
    task = ChoiceConfig(type=name, limit=3, num_fewshot=1).build(ctx(tmp_path))
    samples = task.samples()
    assert len(samples) == 3
    for s in samples:
        assert s.target in s.choices and s.request.prompt.endswith("Answer:") and s.request.logprobs
        assert s.request.prompt.count("Answer:") == 2  # one shot, then the item
    scores = [task.score(s, d) for s, d in zip(samples, completions(3, [" " + c for c in samples[0].choices]))]
    metrics = {m.name: m for m in task.metrics(scores)}
    assert metrics[f"{name}/acc"].n == 3 and f"{name}/no_choice_rate" in metrics


def test_arc_prompt_literal(tmp_path):
    (s,) = ChoiceConfig(type="arc_easy", limit=1).build(ctx(tmp_path)).samples()
    lines = s.request.prompt.split("\n")
    assert lines[0].startswith("Question: ") and lines[1].startswith("A. ") and lines[-1] == "Answer:"
    assert s.choices == ["A", "B", "C", "D"][: len(lines) - 2]


def test_run_config_names_tasks_and_overrides_fields():
    cfg = RunConfig.model_validate({"model": {"path": "m"}, "variants": {"bf16": {}},
                                    "tasks": ["mmlu", "arc_challenge", {"type": "boolq", "limit": 50, "name": "bq"}]})
    mmlu, arc, boolq = cfg.tasks
    assert isinstance(mmlu, ChoiceConfig) and isinstance(arc, ChoiceConfig) and arc.name == "arc_challenge"
    assert (boolq.type, boolq.name, boolq.limit) == ("boolq", "bq", 50)


@pytest.mark.parametrize("tasks,fragments", [
    (["arc_chalenge"], ["tasks.0", "arc_chalenge", "'arc_challenge'", "'mmlu'"]),
    ([{"type": "arc_easy", "limt": 5}], ["tasks.0", "limt: unknown key", "limit"]),
    ([{"type": "legalbench_cuad", "groups": ["governing_lw"]}], ["tasks.0", "groups", "'governing_lw'", "'governing_law'"]),
])
def test_bad_task_references_are_one_line(tasks, fragments):
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as e:
        RunConfig.model_validate({"model": {"path": "m"}, "variants": {"bf16": {}}, "tasks": tasks})
    msg = format_validation_error(e.value, RunConfig)
    assert "\n" not in msg
    for frag in fragments:
        assert frag in msg, msg


def test_adding_a_task_is_one_yaml_file(tmp_path, monkeypatch):
    """A new definition and its data, no code: found by name, prompts and metrics as declared."""
    monkeypatch.setattr(specmod, "tasks_dir", lambda: tmp_path)
    (tmp_path / "data" / "colors").mkdir(parents=True)
    rows = [{"q": f"Which color is item {i}?", "options": ["red", "blue", "green"], "gold": i % 3} for i in range(6)]
    (tmp_path / "data" / "colors" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "colors.yaml").write_text(yaml.safe_dump({
        "name": "colors", "data": {"path": "data/colors"}, "split": "test",
        "description": "Colors.\n\n", "prompt": "{{ q }}\n{% for o in options %}{{ 'ABC'[loop.index0] }}. {{ o }}\n{% endfor %}Answer:",
        "choices": ["A", "B", "C"], "target": "gold", "fewshot": {"num": 1}, "metric": "balanced"}))
    cfg = RunConfig.model_validate({"model": {"path": "m"}, "variants": {"bf16": {}}, "tasks": ["colors"]})
    task = cfg.tasks[0].build(ctx(tmp_path))
    samples = task.samples()
    assert samples[0].request.prompt == ("Colors.\n\nWhich color is item 1?\nA. red\nB. blue\nC. green\nAnswer: B\n\n"
                                         "Which color is item 0?\nA. red\nB. blue\nC. green\nAnswer:")
    assert [s.target for s in samples] == ["A", "B", "C"] * 2
    scores = [task.score(s, Completion(text="", top_logprobs=[{" A": -0.1, " B": -2.0}])) for s in samples]
    metrics = {m.name: m.value for m in task.metrics(scores)}
    assert metrics["colors/balanced_acc"] == pytest.approx(1 / 3) and metrics["colors/acc"] == pytest.approx(1 / 3)


def test_definition_templates_run_sandboxed(tmp_path, monkeypatch):
    monkeypatch.setattr(specmod, "tasks_dir", lambda: tmp_path)
    spec = ChoiceTaskDef(name="x", data={"path": "d"}, split="test", choices=["A"], target="0",
                         prompt="{{ q.__class__.__mro__[1].__subclasses__() }}")
    from jinja2.exceptions import SecurityError

    with pytest.raises(SecurityError):
        specmod.Renderer(spec).build(None, {"q": "x"}, [])
