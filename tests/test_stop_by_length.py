"""`run --stop decided` on a task of several prompt lengths (RULER, the needles): each length's check is
decided by its own confidence sequence, a decided length stops being asked, an undecided one keeps
running, a length too small for the sequence runs to its fixed n, and the task stops once every
length is decided.

Pure logic: a stand-in engine that answers right or wrong by the item, the real runner, records and gate.
"""

from __future__ import annotations

import hashlib
from collections import Counter

import pytest
import yaml

from evalsuite.core.rundir import RunDir
from evalsuite.core.types import Completion, Request, RunRecord, Sample, Score, VariantResult
from evalsuite.engine import one_at_a_time
from evalsuite.run.config import RunConfig
from evalsuite.run.progress import Progress
from evalsuite.run.runner import Runner
from evalsuite.run.stopping import Watch, stop_policy
from evalsuite.stats.metrics import accuracy
from evalsuite.tasks import Task, TaskContext
from evalsuite.verdict.gate import Side, run_gate
from evalsuite.verdict.rules import load_rules

LONG, SHORT, TINY = 8192, 4096, 2048
SIZES = {SHORT: 1500, LONG: 400, TINY: 8}  # TINY: too few items for the sequence to resolve
BATCH = 50


class Lengths(Task):
    """Right when the completion echoes the sample id; items at three prompt lengths."""

    name, batch_size, primary_metric = "lens", BATCH, "lens/acc"

    def samples(self) -> list[Sample]:
        return [Sample(id=f"L{n}-{i}", task=self.name, request=Request(prompt=f"L{n}-{i}"), target=f"L{n}-{i}",
                       group=f"len{n}", meta={"length": n}) for n, size in SIZES.items() for i in range(size)]

    def score(self, sample: Sample, completion: Completion) -> Score:
        return Score(sample_id=sample.id, task=self.name, value=float(completion.text == sample.id),
                     pred=completion.text, target=sample.target, group=sample.group)

    def metrics(self, scores: list[Score]):
        by_len = {n: [s for s in scores if s.group == f"len{n}"] for n in SIZES}
        return [accuracy(scores, "lens/acc")] + [accuracy(g, f"lens/acc/len{n}", length=n)
                                                   for n, g in sorted(by_len.items()) if g]


class Engine:
    """Echoes each prompt, but for `wrong[length]` of the items of that length (by a hash of the prompt)."""

    def __init__(self, wrong: dict[int, float]):
        self.wrong, self.asked = wrong, Counter()

    def generate(self, requests: list[Request], on_done=None) -> list[Completion]:
        out = []
        for r in requests:
            n = int(r.prompt.split("-")[0][1:])
            self.asked[n] += 1
            out.append(Completion(text="x" if _unit(r.prompt) < self.wrong.get(n, 0.0) else r.prompt))
        return out

    def pipelined(self, batches):
        return one_at_a_time(self, batches)


def _unit(text: str) -> float:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) / 16**8


@pytest.fixture(scope="module")
def by_length(tmp_path_factory) -> tuple[RunDir, dict[str, Engine]]:
    """The baseline whole, then a candidate that answers alike at every length, and one that answers
    alike at the short length and loses near the limit (8 of 10 points) at the long one."""
    tmp = tmp_path_factory.mktemp("lengths")
    rules = tmp / "rules.yaml"
    rules.write_text(yaml.safe_dump({"rules": [{"metrics": ["*/acc"], "max_drop_points": 10.0},
                                               {"metrics": ["*/acc/len*"], "max_drop_points": 10.0}]}))
    cfg = RunConfig.model_validate({"model": {"path": "m"}, "variants": {"base": {}, "same": {}, "edge": {}},
                                    "baseline": "base", "stop": "decided", "seed": 5,
                                    "gate_rules": str(rules)})
    policy, task = stop_policy(cfg), Lengths()
    run_dir = RunDir(tmp / "run")
    runner = Runner(cfg, run_dir, "m", TaskContext(base_dir=tmp, cache_dir=tmp), Progress(False), policy)
    samples = policy.order(task, task.samples())
    engines = {"base": Engine({}), "same": Engine({}), "edge": Engine({LONG: 0.08})}
    record = RunRecord(run_id="lengths", model="m", mode="fake")
    for name, engine in engines.items():
        scores, stop = runner.answer_task(engine, name, task, samples)
        result = VariantResult(variant=name, status="ok", metrics=task.metrics(scores))
        if stop is not None:
            result.stopped[task.name] = stop
        run_dir.write_result(result)
        record.variants.append(result)
    run_dir.write_run(record)
    return run_dir, engines, load_rules(rules)


def _recorded(run_dir: RunDir, variant: str) -> Counter:
    return Counter(r["sample"]["meta"]["length"] for r in run_dir.load_samples(variant, "lens"))


def test_a_decided_length_stops_while_an_undecided_one_keeps_running(by_length):
    run_dir, engines, _ = by_length
    got, stop = _recorded(run_dir, "edge"), run_dir.load_result("edge").stopped["lens"]
    assert got[SHORT] < SIZES[SHORT] // 2 and SHORT in stop.lengths  # passed early: no longer asked
    # a drop near the limit: undecided while the short length stopped, asked to its last item
    assert got[LONG] == SIZES[LONG] and LONG not in stop.lengths
    assert got[TINY] == SIZES[TINY] and TINY not in stop.lengths  # the sequence cannot resolve 8 items
    assert stop.early and stop.items == sum(got.values())
    assert engines["edge"].asked[SHORT] <= got[SHORT] + 2 * BATCH  # at most the batches already sent


def test_a_task_whose_lengths_are_all_decided_stops(by_length):
    run_dir, engines, _ = by_length
    got, stop = _recorded(run_dir, "same"), run_dir.load_result("same").stopped["lens"]
    assert got[SHORT] < SIZES[SHORT] and got[TINY] == SIZES[TINY]
    assert got[LONG] < SIZES[LONG] and stop.early and set(stop.lengths) == {SHORT, LONG}
    assert stop.decided["lens/acc"] == "pass" and stop.decided[f"lens/acc/len{SHORT}"] == "pass"


def test_the_watch_runs_a_length_the_sequence_cannot_resolve_to_its_fixed_n(by_length, tmp_path):
    run_dir, _, rules = by_length
    cfg = RunConfig.model_validate({"model": {"path": "m"}, "variants": {"base": {}, "c": {}}, "baseline": "base",
                                    "stop": "decided", "seed": 5, "gate_rules": "default"})
    watch = stop_policy(cfg).start_task(run_dir, "c", Lengths(), Lengths().samples())
    assert isinstance(watch, Watch) and watch.fixed == {TINY}
    assert all(watch.schedule_sample(s) for s in Lengths().samples())  # nothing recorded: every length asked
    tiny = [s for s in Lengths().samples() if s.meta["length"] == TINY]
    whole = stop_policy(cfg).start_task(run_dir, "c", Lengths(), tiny)
    assert not isinstance(whole, Watch)  # every length fixed-n: nothing could stop, so nothing is watched


def test_the_gate_judges_each_length_by_what_ran(by_length):
    """A stopped length by its sequence, one that ran to its end also by the final fixed-n look, one too
    small for the sequence fixed-n, as without --stop; the task-wide check by its sequence on the items
    that are the first of the seeded order: the fast path never fails what the full data pass."""
    run_dir, _, rules = by_length
    report = run_gate(Side(run_dir, "base"), [Side(run_dir)], rules, "rules")
    checks = {(c.candidate, c.metric): c for c in report.checks}
    short, long_, tiny = (checks[("edge", f"lens/acc/len{n}")] for n in (SHORT, LONG, TINY))
    assert "stopped early at n=" in short.detail and short.status == "pass"
    assert f"all {SIZES[LONG]} items in the seeded order" in long_.detail and "exact McNemar, at 50% of alpha" in long_.detail
    assert "run under --stop decided" not in tiny.detail and "seeded order" not in tiny.detail
    for name in ("same", "edge"):
        wide = checks[(name, "lens/acc")]
        assert wide.status == "pass" and "stopped early at n=" in wide.detail
