"""`run --stop decided` (scheduler.stop: decided): stop a candidate's task once the gate knows.

Each task's items go in a seeded random order (stats.sequential.order_key), for every variant alike.
The baseline runs first and whole (`phases`): its items are the population the candidates are judged
on. A candidate's task is then watched after every batch: once every gate check on it (the rules
config's `gate_rules` that name its metrics) is decided, passed, shown beyond its limit or futile, by
the confidence sequence that verdict/sequential.py shares with `gate`, the task ends. Its record says
at how many items (`VariantResult.stopped`), also where it ran to its end, so that the gate judges
every watched check by that sequence (and, at the last item, its final fixed-n look). `--resume` and
`gate` take the rest as not needed. Tasks that another kind of rule judges (latency), harness tasks
(lm-eval orders its own items) and checks the sequence cannot resolve at the planning discordance run
whole.
"""

from __future__ import annotations

from pathlib import Path

from evalsuite.core.errors import ConfigError
from evalsuite.core.records import RunDir
from evalsuite.core.types import EarlyStop, Metric, MetricKind, Sample
from evalsuite.verdict.rules import Rules, default_rules_path, load_rules, named_rules_path
from evalsuite.verdict.sequential import Gated, checks, decisions, stopped_score
from evalsuite.run.config import RunConfig
from evalsuite.run.progress import console
from evalsuite.stats import CONFIDENCE
from evalsuite.stats.paired import Item, read_scores, scored_items
from evalsuite.stats.sequential import seeded_order
from evalsuite.tasks import Task


def stopping(cfg: RunConfig) -> bool:
    return cfg.scheduler.stop == "decided"


def ordered(cfg: RunConfig, task: Task, samples: list[Sample]) -> list[Sample]:
    """A task's items in the seeded order where it may stop early; a timed pass and a harness as they are."""
    if not stopping(cfg) or task.timed_alone or task.harness:
        return samples
    by_id = {s.id: s for s in samples}
    return [by_id[i] for i in seeded_order(by_id, cfg.seed, task.name)]


def phases(cfg: RunConfig) -> list[RunConfig]:
    """The baseline alone, then the rest: a candidate is judged on items the baseline has scored."""
    if not stopping(cfg) or cfg.baseline not in cfg.variants or len(cfg.variants) == 1:
        return [cfg]
    first = cfg.model_copy(update={"variants": {cfg.baseline: cfg.variants[cfg.baseline]}})
    rest = cfg.model_copy(update={"variants": {k: v for k, v in cfg.variants.items() if k != cfg.baseline}})
    return [first, rest]


# A task that may stop is sent in batches of at most 1/STEPS of its items (MIN_BATCH at least): a
# decision is read after each recorded batch, while the engine answers the next, so it costs up to two
# batches beyond the item that decided it (MMLU: 110 items a batch, not the default 256).
STEPS, MIN_BATCH = 128, 32


def batch_size(total: int, size: int) -> int:
    return min(size, max(MIN_BATCH, -(-total // STEPS)))


class Watch:
    """One candidate task's checks, asked after each batch whether all are decided."""

    def __init__(self, stopper: Stopper, variant: str, task: str, found: list[Gated], total: int):
        self.stopper, self.variant, self.task, self.found, self.total = stopper, variant, task, found, total
        self.result: EarlyStop | None = None
        # each look reads only the lines recorded since the last: a re-read of the whole file after every
        # batch would cost O(items^2) over a task, more than the engine's answers on a GPU
        self._tail, self._items = stopper.run_dir.follow_samples(variant, task), []

    def recorded(self) -> list[Item]:
        """The candidate's scored items so far (stats.paired.scored_items), read on from the last look."""
        rows, again = self._tail.new()
        if again:
            self._items = []
        self._items.extend(scored_items(rows))
        return self._items

    def batch_size(self, size: int) -> int:
        return batch_size(self.total, size)

    def decided(self, scored: int) -> bool:
        """True once every check is decided on the `scored` items recorded; the record is then in `result`."""
        if scored >= self.total:
            return False  # the last item: nothing left to save (`finish` records it)
        found = decisions(self.stopper.rules, self.found, self.recorded())
        if any(v is None for v in found.values()):
            return False
        self.result = self._record(scored, found)
        return True

    def finish(self, scored: int) -> None:
        """The record once the task has ended: where it stopped, or, at its last item, that it ran to
        its end, so that the gate still judges it by the sequence that was watched (a fixed-n bound
        after a look at every batch would not hold its level)."""
        if self.result is not None:
            self.result.items = scored
        elif scored >= self.total:
            found = decisions(self.stopper.rules, self.found, self.recorded())
            self.result = self._record(scored, {k: v for k, v in found.items() if v is not None})

    def _record(self, scored: int, found: dict) -> EarlyStop:
        s = self.stopper
        return EarlyStop(items=scored, of=self.total, seed=s.seed, decided=found, rules=s.rules_path)


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


def fix_intervals(rd: RunDir, baseline: str | None, variant: str, metrics: list[Metric], stop: EarlyStop) -> None:
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


class Stopper:
    def __init__(self, cfg: RunConfig, run_dir: RunDir):
        self.rules_path, self.rules = stop_rules(cfg)
        self.baseline, self.seed, self.run_dir = cfg.baseline, cfg.seed, run_dir
        self._said: set[str] = set()

    def watch(self, variant: str, task: Task, total: int) -> Watch | None:
        """None where the task runs whole: the baseline itself, no usable baseline, or checks that
        cannot stop it early (each said once)."""
        if variant == self.baseline or task.harness or task.timed_alone or not self.baseline:
            return None
        base = self.run_dir.load_result(self.baseline)
        if base is None or base.status != "ok":
            self._note(f"no complete baseline {self.baseline!r} in {self.run_dir.root}: every task runs whole")
            return None
        found = checks(self.rules, self.run_dir, base, task.name, self.seed)
        if isinstance(found, str):
            self._note(f"{task.name} runs whole: {found}")
            return None
        return Watch(self, variant, task.name, found, total)

    def _note(self, text: str) -> None:
        if text not in self._said:
            self._said.add(text)
            console.print(f"note: --stop decided: {text}", markup=False, highlight=False)
