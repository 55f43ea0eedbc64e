"""The runner scores and writes a batch while the engine answers the next one, and loses nothing to it."""

from __future__ import annotations

import threading

import pytest

from evalsuite.core.rundir import RunDir
from evalsuite.core.types import Completion, Request, Sample, Score
from evalsuite.engine import one_at_a_time
from evalsuite.run.config import RunConfig
from evalsuite.run.progress import Progress
from evalsuite.run.runner import Runner
from evalsuite.tasks import Task, TaskContext

N, BATCH = 10, 2


class EchoTask(Task):
    """Scores a completion right when it echoes the sample id; optionally waits in score()."""

    name, batch_size = "echo", BATCH

    def __init__(self, before_score=None):
        self.before_score = before_score

    def score(self, sample: Sample, completion: Completion) -> Score:
        if self.before_score:
            self.before_score(sample)
        return Score(sample_id=sample.id, task=self.name, value=float(completion.text == sample.id),
                     pred=completion.text, target=sample.target)


class EchoEngine:
    def __init__(self, fail_at_call: int | None = None):
        self.calls, self.fail_at_call = 0, fail_at_call
        self.started = [threading.Event() for _ in range(N)]

    def generate(self, requests: list[Request], on_done=None) -> list[Completion]:
        self.started[self.calls].set()
        self.calls += 1
        if self.calls == self.fail_at_call:
            raise KeyboardInterrupt
        return [Completion(text=r.prompt) for r in requests]

    def pipelined(self, batches):
        return one_at_a_time(self, batches)


def samples() -> list[Sample]:
    return [Sample(id=f"s{i}", task="echo", request=Request(prompt=f"s{i}"), target=f"s{i}") for i in range(N)]


def runner(tmp_path) -> tuple[Runner, RunDir]:
    cfg = RunConfig.model_validate({"model": {"path": "m"}, "variants": {"bf16": {}}, "tasks": []})
    run_dir = RunDir(tmp_path / "run")
    return Runner(cfg, run_dir, "m", TaskContext(base_dir=tmp_path, cache_dir=tmp_path), Progress(False)), run_dir


def test_a_batch_is_recorded_while_the_engine_answers_the_next(tmp_path):
    """Scoring the first batch waits until the engine has been asked for the second: were the two
    done one after the other, that wait could only end in its timeout."""
    engine = EchoEngine()
    overlapped = []
    task = EchoTask(before_score=lambda s: s.id == "s0" and overlapped.append(engine.started[1].wait(timeout=30)))
    r, run_dir = runner(tmp_path)
    scores = r.run_task(engine, "bf16", task, samples())
    assert overlapped == [True]
    assert [s.sample_id for s in scores] == [f"s{i}" for i in range(N)] and all(s.value == 1.0 for s in scores)
    assert [row["sample"]["id"] for row in run_dir.load_samples("bf16", "echo")] == [f"s{i}" for i in range(N)]


def test_an_interrupt_keeps_every_batch_the_engine_answered(tmp_path):
    """The engine is interrupted on its third call: the two batches it answered are on disk, in order."""
    r, run_dir = runner(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        r.run_task(EchoEngine(fail_at_call=3), "bf16", EchoTask(), samples())
    assert [row["sample"]["id"] for row in run_dir.load_samples("bf16", "echo")] == ["s0", "s1", "s2", "s3"]


def test_a_scoring_error_stops_the_task(tmp_path):
    def fail(sample):
        if sample.id == "s2":
            raise ValueError("bad completion")

    r, run_dir = runner(tmp_path)
    with pytest.raises(ValueError, match="bad completion"):
        r.run_task(EchoEngine(), "bf16", EchoTask(before_score=fail), samples())
    assert [row["sample"]["id"] for row in run_dir.load_samples("bf16", "echo")] == ["s0", "s1"]
