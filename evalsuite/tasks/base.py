"""The task interface: data -> samples; sample + completion -> score; scores -> metrics; and what a task may declare beyond it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalsuite.core.types import Completion, Metric, Request, Sample, Score


@dataclass
class TaskContext:
    """What a task may need from outside itself when it builds its samples."""

    base_dir: Path  # relative paths in a config resolve against the config file's folder
    cache_dir: Path
    seed: int = 0
    tokenizer: Any = None  # a transformers tokenizer of the model under test, if loaded
    max_model_len: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Task:
    """What the runner asks of every task: data -> samples; sample + completion -> score; scores -> metrics.

    The optional capabilities are declared here with the values of a plain task, so the runner asks
    each task the same questions and a task states only where it differs."""

    name: str
    primary_metric: str  # the headline metric's full key, `task/metric`
    # the definition's version, recorded beside its scores (VariantResult.task_versions) as lm-eval's
    # `metadata: version` is: raised where a change to the task moves what it measures (prompt, data,
    # scoring), so that compare and gate say two runs' definitions differ; a Python type sets it on
    # its class, a YAML definition in its `version:`
    version: int = 1
    # the headline's value for answers that ignore the item (1/k for k choices); None where no such
    # level exists (generated answers); reports mark a task whose baseline is there as uninformative
    chance: float | None = None
    batch_size: int | None = None  # requests per engine call; None: the run's engine.batch_size
    limited: bool = True  # `--limit` thins its items (a quick try); a timing pass keeps its design
    # whether a `simulate: true` variant runs it: dense 16-bit kernels stand in for INT4 ones there,
    # so a timing pass would measure the baseline's speed under the variant's name
    runs_simulated: bool = True
    # a timing pass: with engines packed side by side (`run --parallel`) it runs afterwards, its
    # engine alone on the device, or its timings would include the neighbours' work
    timed_alone: bool = False
    # a harness that sends its own requests through evaluate() (lm-eval) instead of the runner
    # sending samples(); its samples() are placeholders that name what it will evaluate
    harness: bool = False
    # a timing pass's design, which its record states (core.types.TimingCondition): untimed requests
    # at each prompt length right before the timed ones, and the timed requests at each length
    warmup: int = 0
    repeats: int | None = None

    def samples(self) -> list[Sample]:
        raise NotImplementedError

    def score(self, sample: Sample, completion: Completion) -> Score:
        raise NotImplementedError

    def metrics(self, scores: list[Score]) -> list[Metric]:
        raise NotImplementedError

    def warmup_request(self) -> Request | None:
        """A request sent before the first batch so that first-request overheads stay out of timings."""
        return None

    def warmup_requests(self) -> list[Request]:
        """The untimed requests sent one at a time before the first batch: warmup_request()'s."""
        first = self.warmup_request()
        return [] if first is None else [first]

    def calibration_samples(self) -> list[Sample]:
        """Items answered before the test items, whose scores calibrate() fits the scoring to."""
        return []

    def calibrate(self, scores: Sequence[Score]) -> None:
        """Fit the scoring to the calibration items' scores."""

    def resume(self, rows: list[dict[str, Any]]) -> bool:
        """A harness shown the rows it recorded before an interruption: True where they are its whole
        run (they are scored as they are), False where evaluate() goes on from them."""
        return True

    def evaluate(self, engine: Any, tokenizer: Any, record: Callable[[list[dict[str, Any]]], None]) -> list[Score]:
        """A harness's own run over the engine; `record` takes its rows as they are to be kept."""
        raise NotImplementedError(f"{self.name}: not a harness")


class DatasetTask(Task):
    """A task over a data set: built from its config, samples loaded once on first use.

    Subclasses set `metric` (the headline metric's name under the task) and implement _build().
    """

    metric = "acc"

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
