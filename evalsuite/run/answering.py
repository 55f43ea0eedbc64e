"""A task's items answered on a started engine and recorded as they come.

Every sample's result is appended to disk as soon as its batch returns (scored and written while
the engine answers the next batch), so a killed run resumes where it stopped and final metrics are
always recomputed from the records.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from typing import Any

from evalsuite.core.records import RunDir
from evalsuite.core.types import Completion, EarlyStop, Sample, Score
from evalsuite.engine import Engine
from evalsuite.run.config import RunConfig
from evalsuite.run.items import batches, spread
from evalsuite.run.progress import Progress
from evalsuite.run.stopping import Stopper, Watch, stopping
from evalsuite.tasks import Task, TaskContext
from evalsuite.tasks.threshold import calibration_name


def _row(sample: Sample, completion: Completion, score: Score) -> dict[str, Any]:
    return {"sample": sample.model_dump(), "completion": completion.model_dump(), "score": score.model_dump()}


class Answering:
    """Answers tasks' items on an engine the caller started, and records each batch as it returns."""

    def __init__(self, cfg: RunConfig, run_dir: RunDir, ctx: TaskContext, progress: Progress):
        self.cfg, self.run_dir, self.ctx, self.progress = cfg, run_dir, ctx, progress
        self.stopper = Stopper(cfg, run_dir) if stopping(cfg) else None  # --stop decided
        self.stops: dict[tuple[str, str], EarlyStop] = {}  # (variant, task): the tasks it ended early

    def run_task(self, engine: Engine, variant: str, task: Task, samples: list[Sample]) -> list[Score]:
        if task.harness:
            return self._evaluate(engine, variant, task)
        # --limit caps the calibration items as it caps the test items: a quick try stays quick
        calibration = spread(task.calibration_samples(), self.cfg.limit if task.limited else None)
        if calibration:  # items whose scores fit the test items' scoring (evalsuite.tasks.threshold): first
            task.calibrate(self._answer(engine, variant, calibration_name(task.name), task, calibration))
        watch = self.stopper.watch(variant, task, len(samples)) if self.stopper else None
        scores = self._answer(engine, variant, task.name, task, samples, watch)
        if watch is not None and watch.result is not None:
            self.stops[(variant, task.name)] = watch.result
        return scores

    def _answer(self, engine: Engine, variant: str, name: str, task: Task, samples: list[Sample],
                watch: Watch | None = None) -> list[Score]:
        """Scores of `samples`, those recorded in samples/<name>.jsonl read back, the others asked; with
        a `watch`, only until it says every check is decided (the items recorded so far may already)."""
        done = {r["sample"]["id"]: Score.model_validate(r["score"]) for r in self.run_dir.load_samples(variant, name)}
        todo = [s for s in samples if s.id not in done]
        if watch is not None and done and watch.decided(len(done)):
            todo = []
        bar = self.progress.add(f"{variant} · {name}", total=len(samples), completed=len(samples) - len(todo))
        size = task.batch_size or self.cfg.engine.batch_size
        size = watch.batch_size(size) if watch is not None else size
        for warmup in task.warmup_requests() if todo else []:
            engine.generate([warmup])  # first-request overheads and a cold device are not latency
        # A batch is scored and written (fsync included) on a thread while the engine answers the
        # next one: done in line, that work left the engine idle, a few % of a GPU run of many short
        # items. One thread keeps the records in order; leaving the pool waits for the batch in hand,
        # so an interrupted run still writes every answer it received.
        # Progress stays on this thread: under Ray it is a call to the driver, and that call is how a
        # worker whose driver died learns it.
        # The engine gets the next batch before this one is recorded (Engine.pipelined), so it never
        # waits for the pipe either.
        chunks = list(batches(todo, size, self.cfg.engine.batch_tokens))
        stream = engine.pipelined([s.request for s in b] for b in chunks)
        # closed at once on a scoring error: the answer to the batch sent ahead is then not taken for a later call's
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="evalsuite-record") as pool, closing(stream):
            recording = None
            for batch, completions in zip(chunks, stream, strict=True):
                if recording is not None:
                    self.progress.advance(bar, recording.result())  # a scoring error surfaces here
                    if watch is not None and watch.decided(len(done)):
                        # decided on what is on disk: the batch in hand is kept, the one sent ahead dropped
                        recording = pool.submit(self._record, variant, name, task, batch, completions, done)
                        break
                recording = pool.submit(self._record, variant, name, task, batch, completions, done)
            if recording is not None:
                self.progress.advance(bar, recording.result())
        if watch is not None:
            watch.finish(len(done))
        return [done[s.id] for s in samples if s.id in done]

    def _record(self, variant: str, name: str, task: Task, batch: list[Sample], completions: list[Completion],
                done: dict[str, Score]) -> int:
        rows, scores = [], []
        for s, c in zip(batch, completions, strict=True):
            sc = task.score(s, c)
            scores.append(sc)
            rows.append(_row(s, c, sc))
        self.run_dir.append_samples(variant, name, rows)
        done.update({sc.sample_id: sc for sc in scores})
        return len(batch)

    def _evaluate(self, engine: Engine, variant: str, task: Task) -> list[Score]:
        recorded = self.run_dir.load_samples(variant, task.name)
        if recorded and task.resume(recorded):  # finished before an interruption: its rows hold every item
            return [Score.model_validate(r["score"]) for r in recorded]
        with self.progress.status(f"{variant}: {task.name}"):
            return task.evaluate(engine, self.ctx.tokenizer,
                                 lambda rows: self.run_dir.write_samples(variant, task.name, rows))
