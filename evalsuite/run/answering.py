"""A task's items answered on a started engine and recorded as they come.

Every sample's result is appended to disk as soon as its batch returns (scored and written while
the engine answers the next batch), so a killed run resumes where it stopped and final metrics are
always recomputed from the records.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from typing import Any

from evalsuite.core.rundir import RunDir
from evalsuite.core.types import Completion, EarlyStop, Sample, Score
from evalsuite.engine import Engine
from evalsuite.run.config import RunConfig
from evalsuite.run.items import batches, spread
from evalsuite.run.progress import Progress
from evalsuite.run.stopping import Full, WholeTask
from evalsuite.tasks import Task, TaskContext
from evalsuite.tasks.threshold import calibration_name


def _row(sample: Sample, completion: Completion, score: Score) -> dict[str, Any]:
    return {"sample": sample.model_dump(), "completion": completion.model_dump(), "score": score.model_dump()}


class Answering:
    """Answers tasks' items on an engine the caller started, and records each batch as it returns;
    `stop`, the run's stop policy (evalsuite.run.stopping), says which items are still asked."""

    def __init__(self, cfg: RunConfig, run_dir: RunDir, ctx: TaskContext, progress: Progress, stop: Full | None = None):
        self.cfg, self.run_dir, self.ctx, self.progress = cfg, run_dir, ctx, progress
        self.stop = stop or Full()

    def run_task(self, engine: Engine, variant: str, task: Task, samples: list[Sample]) -> list[Score]:
        return self.answer_task(engine, variant, task, samples)[0]

    def answer_task(self, engine: Engine, variant: str, task: Task,
                    samples: list[Sample]) -> tuple[list[Score], EarlyStop | None]:
        """The task's scores, and where the stop policy ended it (None: it asked every item)."""
        if task.harness:
            return self._evaluate(engine, variant, task), None
        # --limit caps the calibration items as it caps the test items: a quick try stays quick
        calibration = spread(task.calibration_samples(), self.cfg.limit if task.limited else None)
        if calibration:  # items whose scores fit the test items' scoring (evalsuite.tasks.threshold): first
            task.calibrate(self._answer(engine, variant, calibration_name(task.name), task, calibration))
        watch = self.stop.start_task(self.run_dir, variant, task, samples)
        return self._answer(engine, variant, task.name, task, samples, watch), watch.result

    def _answer(self, engine: Engine, variant: str, name: str, task: Task, samples: list[Sample],
                watch: WholeTask | None = None) -> list[Score]:
        """Scores of `samples`, those recorded in samples/<name>.jsonl read back, the others asked while
        the `watch` schedules them (the items recorded so far may already decide)."""
        watch = watch or WholeTask()
        done = {r["sample"]["id"]: Score.model_validate(r["score"]) for r in self.run_dir.load_samples(variant, name)}
        todo = [s for s in samples if s.id not in done]
        if done:
            watch.complete_sample(len(done))
        todo = [] if watch.done else todo
        bar = self.progress.add(f"{variant} · {name}", total=len(samples), completed=len(samples) - len(todo))
        size = watch.batch_size(task.batch_size or self.cfg.engine.batch_size)
        for warmup in task.warmup_requests() if todo else []:
            engine.generate([warmup])  # first-request overheads and a cold device are not latency
        # A batch is scored and written (fsync included) on a thread while the engine answers the
        # next one: done in line, that work left the engine idle, a few % of a GPU run of many short
        # items. One thread keeps the records in order; leaving the pool waits for the batch in hand,
        # so an interrupted run still writes every answer it received.
        # Progress stays on this thread: under Ray it is a call to the driver, and that call is how a
        # worker whose driver died learns it.
        # The engine gets the next batch before this one is recorded (Engine.pipelined), so it never
        # waits for the pipe either. Batches are made as the engine takes them, of the items the watch
        # still schedules: a length decided meanwhile is left out of the next.
        sent: deque[list[Sample]] = deque()

        def chunks():
            for b in batches((s for s in todo if watch.schedule_sample(s)), size, self.cfg.engine.batch_tokens):
                sent.append(b)
                yield [s.request for s in b]

        stream = engine.pipelined(chunks())
        # closed at once on a scoring error: the answer to the batch sent ahead is then not taken for a later call's
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="evalsuite-record") as pool, closing(stream):
            recording = None
            for completions in stream:
                batch = sent.popleft()
                if recording is not None:
                    self.progress.advance(bar, recording.result())  # a scoring error surfaces here
                    watch.complete_sample(len(done))
                    if watch.done:
                        # decided on what is on disk: the batch in hand is kept, the one sent ahead dropped
                        recording = pool.submit(self._record, variant, name, task, batch, completions, done)
                        break
                recording = pool.submit(self._record, variant, name, task, batch, completions, done)
            if recording is not None:
                self.progress.advance(bar, recording.result())
        watch.complete_task(len(done))
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
