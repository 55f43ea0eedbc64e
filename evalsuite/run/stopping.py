"""`run --stop decided` (`stop: decided`): stop a candidate's task once the gate knows.

One policy a run (stop_policy), built once by run_config and handed to the runner, after inspect_ai's
EarlyStopping protocol: `start_task` gives a task's watch, whose `schedule_sample` says whether an item
is still asked, `complete_sample` reads each recorded batch and `complete_task` gives the record
(`VariantResult.stopped`). `full` asks every item. `decided` orders each task's items by a seed, alike
for every variant; the baseline runs first and whole (`phases`): its items are the population the
candidates are judged on. A candidate's checks (the `gate_rules` naming its metrics) are asked after
every batch by the confidence sequence verdict/sequential.py shares with `gate`. The task ends once
all are decided. Per length (RULER, the needles): once the task-wide checks are decided, a length whose
own checks are decided is no longer asked, and a length whose check the sequence cannot resolve runs
to its fixed n. Checks of another kind (latency), harness tasks and task-wide checks the sequence
cannot resolve run the task whole.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from evalsuite.core.errors import ConfigError
from evalsuite.core.rundir import RunDir
from evalsuite.core.types import EarlyStop, Metric, MetricKind, Sample
from evalsuite.verdict.rules import Rules, default_rules_path, load_rules, named_rules_path
from evalsuite.verdict.sequential import Gated, decisions, stopped_score, watched
from evalsuite.run.config import RunConfig
from evalsuite.run.progress import console
from evalsuite.stats import CONFIDENCE
from evalsuite.stats.paired import Item, read_scores, scored_items
from evalsuite.stats.sequential import seeded_order
from evalsuite.tasks import Task

# A task that may stop is sent in batches of at most 1/STEPS of its items (MIN_BATCH at least): a
# decision is read after each recorded batch, while the engine answers the next, so it costs up to two
# batches beyond the item that decided it (MMLU: 110 items a batch, not the default 256).
STEPS, MIN_BATCH = 128, 32


def batch_size(total: int, size: int) -> int:
    return min(size, max(MIN_BATCH, -(-total // STEPS)))


def sample_length(sample: Sample) -> int | None:
    """The prompt length an item was built for (RULER's and the needles' `length`), the key of its checks."""
    length = (sample.meta or {}).get("length")
    return length if isinstance(length, int) else None


class WholeTask:
    """A task asked for every item: the watch of `--stop full`, and of a task `decided` cannot stop."""

    done = False
    result: EarlyStop | None = None

    def batch_size(self, size: int) -> int:
        return size

    def schedule_sample(self, sample: Sample) -> bool:
        return True

    def complete_sample(self, scored: int) -> None:
        """Called with the items recorded so far, after each batch."""

    def complete_task(self, scored: int) -> EarlyStop | None:
        return None


class Watch(WholeTask):
    """One candidate task's checks, asked after each batch which are decided. `done`: every one, and
    no length left that must run to its fixed n; `stopped`: the lengths no longer asked."""

    def __init__(self, policy: Decided, run_dir: RunDir, variant: str, task: str, found: list[Gated],
                 fixed: set[int], lengths: set[int | None], total: int):
        self.policy, self.found, self.total = policy, found, total
        self.fixed, self.lengths = fixed, lengths  # fixed: lengths whose check runs to its fixed n
        self.stopped: dict[int, int] = {}  # length -> its items scored when it stopped being asked
        self.done, self.result = False, None
        # each look reads only the lines recorded since the last: a re-read of the whole file after every
        # batch would cost O(items^2) over a task, more than the engine's answers on a GPU
        self._tail, self._items = run_dir.follow_samples(variant, task), []

    def recorded(self) -> list[Item]:
        """The candidate's scored items so far (stats.paired.scored_items), read on from the last look."""
        rows, again = self._tail.new()
        if again:
            self._items = []
        self._items.extend(scored_items(rows))
        return self._items

    def batch_size(self, size: int) -> int:
        return batch_size(self.total, size)

    def schedule_sample(self, sample: Sample) -> bool:
        return not self.done and sample_length(sample) not in self.stopped

    def _decisions(self) -> dict[str, str | None]:
        return decisions(self.policy.rules, self.found, self.recorded(), prefix=True)

    def complete_sample(self, scored: int) -> None:
        """Looks at the `scored` items recorded: the lengths decided stop, and the task once all are."""
        if scored >= self.total or self.done:
            return  # the last item: nothing left to save (`complete_task` records it)
        found = self._decisions()
        wide = [g for g in self.found if g.metric.length is None or g.metric.depth is not None]
        if any(found[g.metric.name] is None for g in wide):
            return  # the task-wide checks need the first items of every length until they are decided
        if not self.fixed and all(v is not None for v in found.values()):
            self.done, self.result = True, self._record(scored, found)
            return
        for length in self.lengths - self.fixed - {None} - self.stopped.keys():
            own = [g for g in self.found if g.metric.length == length and g.metric.depth is None]
            if all(found[g.metric.name] is not None for g in own):
                self.stopped[length] = sum(1 for i in self._items if i[6] == length)

    def complete_task(self, scored: int) -> EarlyStop | None:
        """The record once the task has ended: where it stopped, or, at its last item, that it ran to
        its end, so that the gate still judges it by the sequence that was watched (a fixed-n bound
        after a look at every batch would not hold its level)."""
        if self.result is not None:
            self.result.items = scored
        elif scored >= self.total or self.stopped:
            found = self._decisions()
            self.result = self._record(scored, {k: v for k, v in found.items() if v is not None})
        return self.result

    def _record(self, scored: int, found: dict) -> EarlyStop:
        p = self.policy
        return EarlyStop(items=scored, of=self.total, seed=p.seed, decided=found, rules=p.rules_path,
                         lengths=dict(self.stopped))


class Full:
    """`--stop full`: every item of every task, in the config's order, every variant at once."""

    decided = False

    def order(self, task: Task, samples: list[Sample]) -> list[Sample]:
        return samples

    def phases(self, cfg: RunConfig) -> list[RunConfig]:
        return [cfg]

    def start_task(self, run_dir: RunDir, variant: str, task: Task, samples: list[Sample]) -> WholeTask:
        return WholeTask()


class Decided(Full):
    """`--stop decided`: the items in a seeded order, the baseline first, each candidate task watched."""

    decided = True

    def __init__(self, cfg: RunConfig):
        self.rules_path, self.rules = stop_rules(cfg)
        self.baseline, self.seed = cfg.baseline, cfg.seed
        self._said: set[str] = set()

    def order(self, task: Task, samples: list[Sample]) -> list[Sample]:
        """A task's items in the seeded order; a timed pass and a harness as they are."""
        if task.timed_alone or task.harness:
            return samples
        by_id = {s.id: s for s in samples}
        return [by_id[i] for i in seeded_order(by_id, self.seed, task.name)]

    def phases(self, cfg: RunConfig) -> list[RunConfig]:
        """The baseline alone, then the rest: a candidate is judged on items the baseline has scored."""
        if cfg.baseline not in cfg.variants or len(cfg.variants) == 1:
            return [cfg]
        first = cfg.model_copy(update={"variants": {cfg.baseline: cfg.variants[cfg.baseline]}})
        rest = cfg.model_copy(update={"variants": {k: v for k, v in cfg.variants.items() if k != cfg.baseline}})
        return [first, rest]

    def start_task(self, run_dir: RunDir, variant: str, task: Task, samples: list[Sample]) -> WholeTask:
        """The task's watch; a whole task for the baseline itself, without a usable baseline, or where
        its task-wide checks cannot stop it early (each said once)."""
        if variant == self.baseline or task.harness or task.timed_alone or not self.baseline:
            return WholeTask()
        base = run_dir.load_result(self.baseline)
        if base is None or base.status != "ok":
            self._note(f"no complete baseline {self.baseline!r} in {run_dir.root}: every task runs whole")
            return WholeTask()
        found = watched(self.rules, run_dir, base, task.name, self.seed)
        if isinstance(found, str):
            self._note(f"{task.name} runs whole: {found}")
            return WholeTask()
        checks, fixed = found
        lengths = {sample_length(s) for s in samples}
        if not lengths - fixed.keys():  # nothing could stop: watched, its checks would only lose alpha
            self._note(f"{task.name} runs whole: every length's check runs to its fixed n")
            return WholeTask()
        for length, why in sorted(fixed.items()):
            self._note(f"{task.name} at length {length} runs to its {why}")
        return Watch(self, run_dir, variant, task.name, checks, set(fixed), lengths, len(samples))

    def _note(self, text: str) -> None:
        if text not in self._said:
            self._said.add(text)
            console.print(f"note: --stop decided: {text}", markup=False, highlight=False)


def stop_policy(cfg: RunConfig) -> Full:
    """The run's one stop policy; a bad `gate_rules` is one line before any engine starts."""
    return Decided(cfg) if cfg.stop == "decided" else Full()


def stop_rules(cfg: RunConfig) -> tuple[str | None, Rules]:
    """(the path recorded, None for the shipped default; the rules) whose checks decide: the config's
    `gate_rules`, so that the rules that stop a run are those that gate it. scheduler.stop_rules, read
    from older configs, must name the same file; a bad one is one line before any engine starts."""
    try:
        path = named_rules_path(cfg.gate_rules)
        rules = load_rules(path)
    except ConfigError as e:
        raise ConfigError(f"gate_rules: {e}") from None
    if cfg.scheduler.stop_rules:
        other = Path(cfg.scheduler.stop_rules).expanduser()
        if not other.is_file() or other.resolve() != path.resolve():
            raise ConfigError(f"scheduler.stop_rules: {cfg.scheduler.stop_rules!r} is not gate_rules ({path}); the "
                              "rules that stop a run are the rules that gate it: drop scheduler.stop_rules, or set "
                              "gate_rules to that file")
    return (None if path.resolve() == default_rules_path().resolve() else str(path)), rules


def fix_intervals(rd: RunDir, baseline: str | None, variant: str, metrics: Iterable[Metric], stop: EarlyStop) -> None:
    """Each item score's 95% interval (`Metric.ci95`) of a task that ended before its last item: the
    confidence sequence of its mean ([] where none can be given), never a fixed-n interval at the n
    the looks chose."""
    if not stop.early:
        return  # every item scored: the fixed-n interval over all of them holds
    for m in metrics:
        if not m.item_score or m.kind == MetricKind.bound:
            continue
        found = stopped_score(read_scores(rd, baseline, m), read_scores(rd, variant, m), m, stop, CONFIDENCE) \
            if baseline else "no baseline"
        m.ci95 = [] if isinstance(found, str) else list(found)
