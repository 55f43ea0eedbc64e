"""Extension points: a toy engine mode and a toy task type, each added the way docs/architecture.md's
"How to add an engine" and "How to add a task type" say (one module and one registration; here both from
this module), reach config validation, `--limit`, gate sizing and make_engine through their registries,
and an unknown name is refused with the names there are."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pytest
import yaml
from pydantic import BaseModel, ConfigDict, Field

from evalsuite.core.errors import ConfigError, UnknownName
from evalsuite.core.types import Completion, EngineStats, Metric, MetricKind, Request, Sample, Score
from evalsuite.engine import one_at_a_time, registry as engines
from evalsuite.engine.factory import make_engine
from evalsuite.engine.registry import EngineKind, engine_kind, register_engine
from evalsuite.run.config import load_config
from evalsuite.run.needs import needs
from evalsuite.run.progress import start_key
from evalsuite.run.session import narrowed
from evalsuite.run.sizing import planned, sizing_warnings
from evalsuite.tasks import registry as tasks, spec
from evalsuite.tasks.base import Task, TaskContext
from evalsuite.tasks.planning import Planned
from evalsuite.tasks.registry import register_task_type, task_config
from evalsuite.verdict.rules import load_rules, named_rules_path


# ---------------------------------------------------------------- a toy engine: its module's part


class ToyEngine:
    """Answers every request with 'A'."""

    def __init__(self, model: str, kwargs: dict[str, Any], env: dict[str, str]):
        self.model, self.kwargs, self.env = model, kwargs, env

    def start(self) -> EngineStats:
        return EngineStats()

    def generate(self, requests: list[Request], on_done=None) -> list[Completion]:
        return [Completion(text="A") for _ in requests]

    def pipelined(self, batches):
        return one_at_a_time(self, batches)

    def stats(self) -> EngineStats:
        return EngineStats()

    pid = None

    def close(self, wait: bool = True) -> None:
        pass


def _toy_engine(launch, model: str, kwargs: dict[str, Any], log_path: Path, env: dict[str, str]) -> ToyEngine:
    return ToyEngine(model, kwargs, env)


TOY_ENGINE = EngineKind("toy", _toy_engine, vllm=False, own_args=frozenset({"toy_knob"}), about="answers 'A'")


# ---------------------------------------------------------------- a toy task type: its module's part


class ToyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["toy"] = "toy"
    name: str = "toy"
    items: int = Field(default=40, gt=0)

    def build(self, ctx: TaskContext) -> Task:
        return ToyTask(self)

    def planned(self, limit: int | None) -> list[Planned]:
        return [Planned(f"{self.name}/acc", [()] * min(self.items, limit or self.items))]

    def narrow(self, limit: int) -> None:
        self.items = min(self.items, limit)


class ToyTask(Task):
    def __init__(self, cfg: ToyConfig):
        self.cfg, self.name, self.primary_metric = cfg, cfg.name, f"{cfg.name}/acc"

    def samples(self) -> list[Sample]:
        return [Sample(id=str(i), task=self.name, request=Request(prompt=f"{i}?"), target="A" if i % 2 else "B")
                for i in range(self.cfg.items)]

    def score(self, sample: Sample, completion: Completion) -> Score:
        return Score(sample_id=sample.id, task=self.name, value=float(completion.text == sample.target),
                     pred=completion.text, target=sample.target)

    def metrics(self, scores: list[Score]) -> list[Metric]:
        return [Metric(name=self.primary_metric, value=sum(s.value for s in scores) / len(scores), n=len(scores),
                       kind=MetricKind.proportion)]


@pytest.fixture(scope="module", autouse=True)
def toys():
    """The two registrations, undone afterwards so that other modules of this process see the shipped
    registries only."""
    saved = dict(engines._ENGINES)
    register_engine(TOY_ENGINE)
    register_task_type(ToyConfig)
    yield
    engines._ENGINES.clear()
    engines._ENGINES.update(saved)
    del tasks.PYTHON_TASKS["toy"]
    spec.PYTHON_TYPES.discard("toy")
    for fn in tasks._on_register:
        fn(task_config())


def _config(tmp_path: Path, **over: Any) -> Path:
    raw = {"model": {"path": str(tmp_path)}, "engine": {"mode": "toy"},
           "variants": {"base": {}, "knob": {"engine_args": {"toy_knob": 3}}},
           "tasks": [{"type": "toy", "items": 30}], "tracking": {"enabled": False}, **over}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_a_registered_engine_mode_is_a_config_value_with_its_own_args(tmp_path):
    cfg = load_config(_config(tmp_path))
    assert cfg.engine.mode == "toy" and cfg.engine.kind is TOY_ENGINE
    assert cfg.variants["knob"].engine_args == {"toy_knob": 3}  # its own argument, allowed without the switch
    assert needs(cfg) == [] and start_key("toy", str(tmp_path)) is None  # no vLLM, no device to check


def test_an_unknown_engine_mode_is_one_line_naming_the_file_key_value_and_the_modes(tmp_path):
    path = _config(tmp_path, engine={"mode": "toyy"})
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value) == f"{path}: engine.mode: unknown engine mode 'toyy' (allowed: offline, server, fake, toy)"
    with pytest.raises(UnknownName, match=r"^Unknown engine mode 'toyy'\. Available: offline, server, fake, toy$"):
        engine_kind("toyy")


def test_capabilities_come_from_the_entry(tmp_path):
    with pytest.raises(ConfigError, match=r"capacity: needs engine.mode server, the mode is toy \(allowed: server:"):
        load_config(_config(tmp_path, capacity={"prompt_tokens": [64], "output_tokens": 8}))
    path = _config(tmp_path, variants={"a": {"engine_args": {"fake_disagree": 0.5}}})  # the fake's, not toy's
    with pytest.raises(ConfigError, match=r"variants\.a\.engine_args\.fake_disagree: not an engine argument"):
        load_config(path)


def test_make_engine_builds_the_registered_engine(tmp_path):
    cfg = load_config(_config(tmp_path))
    engine = make_engine(cfg.engine, "m", {"toy_knob": 3}, tmp_path / "log", tmp_path / "cache")
    assert isinstance(engine, ToyEngine) and engine.kwargs == {"toy_knob": 3} and engine.env == {}
    task = cfg.tasks[0].build(TaskContext(base_dir=tmp_path, cache_dir=tmp_path))
    samples = task.samples()
    answers = engine.generate([s.request for s in samples])
    (acc,) = task.metrics([task.score(s, a) for s, a in zip(samples, answers)])
    assert (acc.name, acc.value, acc.n) == ("toy/acc", 0.5, 30)


def test_a_registered_task_type_is_validated_narrowed_and_sized(tmp_path):
    cfg = load_config(_config(tmp_path))
    task = cfg.tasks[0]
    assert isinstance(task, ToyConfig) and task.items == 30
    assert [(p.metric, p.n) for p in planned(task)] == [("toy/acc", 30)]
    lines = sizing_warnings(cfg, load_rules(named_rules_path(cfg.gate_rules)))  # the default rules: */acc within 2 points
    assert len(lines) == 1 and lines[0].startswith("toy/acc: 30 items resolve")
    assert narrowed(cfg, [], 7).tasks[0].items == 7
    with pytest.raises(ConfigError, match=r"c\.yaml: tasks\.0\.toy\.items: Input should be greater than 0, got 0"):
        load_config(_config(tmp_path, tasks=[{"type": "toy", "items": 0}]))


def test_a_task_type_that_declares_no_plan_is_refused_and_an_unknown_type_is_an_error():
    class Unplanned(BaseModel):
        type: Literal["unplanned"] = "unplanned"
        name: str = "unplanned"

        def build(self, ctx: TaskContext) -> Task:
            raise NotImplementedError

    with pytest.raises(TypeError, match=r"task type 'unplanned': Unplanned does not declare planned, narrow"):
        register_task_type(Unplanned)
    with pytest.raises(UnknownName, match=r"^Unknown task type 'unplanned'\. Available: .*\btoy\b"):
        planned(Unplanned())
