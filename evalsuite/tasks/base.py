"""The task protocol: data -> samples; sample + completion -> score; scores -> metrics."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from evalsuite.core.types import Completion, Metric, Sample, Score


@dataclass
class TaskContext:
    """What a task may need from outside itself when it builds its samples."""

    base_dir: Path  # relative paths in a config resolve against the config file's folder
    cache_dir: Path
    seed: int = 0
    tokenizer: Any = None  # a transformers tokenizer of the model under test, if loaded
    max_model_len: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Task(Protocol):
    name: str

    def samples(self) -> list[Sample]: ...

    def score(self, sample: Sample, completion: Completion) -> Score: ...

    def metrics(self, scores: list[Score]) -> list[Metric]: ...


class DatasetTask:
    """A task over a data set: built from its config, samples loaded once on first use.

    Subclasses set `metric` (the headline metric's name under the task) and implement _build().
    """

    metric = "acc"
    # the headline's value for answers that ignore the item (1/k for k choices); None where no such
    # level exists (generated answers); reports mark a task whose baseline is there as uninformative
    chance: float | None = None

    def __init__(self, cfg: Any, ctx: TaskContext):
        self.cfg, self.ctx = cfg, ctx
        self.name: str = cfg.name
        self.primary_metric = f"{cfg.name}/{self.metric}"
        self.source: str | None = None  # where the data came from, for the record
        self._samples: list[Sample] | None = None

    def samples(self) -> list[Sample]:
        if self._samples is None:
            self._samples = self._build()
        return self._samples

    def _build(self) -> list[Sample]:
        raise NotImplementedError
