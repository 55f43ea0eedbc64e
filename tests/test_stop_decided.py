"""`run --stop decided`: a candidate's task ends once the gate's checks on it are decided, the record
says at how many items, and `--resume` and `gate` take the rest as not needed.

Pure logic here: a stand-in engine that answers right or wrong by the item, the real runner,
records and gate; and the CLI end to end on the fake engine. The real engine: test_e2e_engine.py.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from evalsuite.cli.main import app
from evalsuite.core.rundir import RunDir
from evalsuite.core.types import Completion, EarlyStop, Request, RunRecord, Sample, Score, VariantResult
from evalsuite.engine import one_at_a_time
from evalsuite.verdict.gate import run_gate
from evalsuite.verdict.sides import Side
from evalsuite.verdict.rules import default_rules_path, load_rules
from evalsuite.verdict.sequential import decisions, stopped_interval
from evalsuite.run.config import RunConfig
from evalsuite.run.progress import Progress
from evalsuite.run.finish import finish_run
from evalsuite.run.resume import finished
from evalsuite.run.runner import Runner
from evalsuite.run.stopping import Decided, Full, Watch, stop_policy
from evalsuite.stats.metrics import accuracy, accuracy_interval
from evalsuite.stats.paired import scored_items
from evalsuite.stats.sequential import seeded_order
from evalsuite.tasks import Task, TaskContext

N, BATCH = 2000, 50


class EchoTask(Task):
    """Right when the completion echoes the sample id."""

    name, batch_size, primary_metric = "echo", BATCH, "echo/acc"

    def samples(self) -> list[Sample]:
        return [Sample(id=f"s{i}", task="echo", request=Request(prompt=f"s{i}"), target=f"s{i}") for i in range(N)]

    def score(self, sample: Sample, completion: Completion) -> Score:
        return Score(sample_id=sample.id, task=self.name, value=float(completion.text == sample.id),
                     pred=completion.text, target=sample.target)

    def metrics(self, scores: list[Score]):
        return [accuracy(scores, "echo/acc")]


class Engine:
    """Echoes each prompt, but for a `wrong` share of the items (by a hash of the prompt)."""

    def __init__(self, wrong: float):
        self.wrong, self.asked = wrong, 0

    def generate(self, requests: list[Request], on_done=None) -> list[Completion]:
        self.asked += len(requests)
        return [Completion(text="x" if _unit(r.prompt) < self.wrong else r.prompt) for r in requests]

    def pipelined(self, batches):
        return one_at_a_time(self, batches)


def _unit(text: str) -> float:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) / 16**8


def config() -> RunConfig:
    return RunConfig.model_validate({"model": {"path": "m"}, "variants": {"bf16": {}, "cut": {}, "same": {}},
                                     "baseline": "bf16", "stop": "decided", "seed": 3})


@pytest.fixture(scope="module")
def stopped(tmp_path_factory) -> tuple[RunDir, dict[str, Engine], Runner]:
    """The baseline whole, then a candidate wrong on 30% of the items and one that answers alike."""
    tmp = tmp_path_factory.mktemp("stop")
    cfg, task = config(), EchoTask()
    run_dir = RunDir(tmp / "run")
    policy = stop_policy(cfg)
    runner = Runner(cfg, run_dir, "m", TaskContext(base_dir=tmp, cache_dir=tmp), Progress(False), policy)
    samples = policy.order(task, task.samples())
    engines = {"bf16": Engine(0.0), "cut": Engine(0.3), "same": Engine(0.0)}
    record = RunRecord(run_id="stop", model="m", mode="fake")
    for name, engine in engines.items():
        scores, stop = runner.answer_task(engine, name, task, samples)
        result = VariantResult(variant=name, status="ok", metrics=task.metrics(scores))
        if stop is not None:
            result.stopped[task.name] = stop
        run_dir.write_result(result)
        record.variants.append(result)
    run_dir.write_run(record)
    return run_dir, engines, runner


def test_the_baseline_runs_whole_and_in_the_seeded_order(stopped):
    run_dir, engines, _ = stopped
    ids = [r["sample"]["id"] for r in run_dir.load_samples("bf16", "echo")]
    assert engines["bf16"].asked == N and ids == seeded_order((f"s{i}" for i in range(N)), 3, "echo")
    assert not run_dir.load_result("bf16").stopped


def test_a_regression_stops_early_as_failed(stopped):
    run_dir, engines, _ = stopped
    stop = run_dir.load_result("cut").stopped["echo"]
    rows = run_dir.load_samples("cut", "echo")
    # a 30% loss: shown beyond the limit, which ends it
    assert stop.decided["echo/acc"] == "fail" and stop.of == N and stop.seed == 3
    assert stop.items == len(rows) < N // 4
    # the items it scored are the first of the seeded order; the engine answered one batch more at most
    assert [r["sample"]["id"] for r in rows] == [r["sample"]["id"] for r in run_dir.load_samples("bf16", "echo")][:len(rows)]
    assert engines["cut"].asked <= len(rows) + BATCH


def test_a_candidate_that_answers_alike_stops_early_as_passed(stopped):
    run_dir, _, _ = stopped
    stop = run_dir.load_result("same").stopped["echo"]
    assert stop.decided == {"echo/acc": "pass"} and stop.items < N



def test_a_watch_reads_each_batch_once_and_decides_as_a_whole_read_would(stopped, tmp_path):
    """The watch follows the candidate's samples file (each line read once, not the whole file after
    every batch); after each batch its decisions are those on a fresh read of everything recorded."""
    shutil.copytree(stopped[0].root, tmp_path / "run")
    run_dir = RunDir(tmp_path / "run")
    rows = run_dir.load_samples("same", "echo")
    watch = stop_policy(config()).start_task(run_dir, "late", EchoTask(), EchoTask().samples())
    assert isinstance(watch, Watch)
    found = watch.found
    for at in range(BATCH, 6 * BATCH + 1, BATCH):
        run_dir.append_samples("late", "echo", rows[at - BATCH:at])
        ours = decisions(watch.policy.rules, found, watch.recorded())
        whole = decisions(watch.policy.rules, found, scored_items(run_dir.load_samples("late", "echo")))
        assert ours == whole and len(watch._items) == at
        assert watch._tail.offset == run_dir.samples_file("late", "echo").stat().st_size


def test_gate_judges_a_stopped_task_by_the_sequential_test(stopped):
    """Not by a fixed-n bound on the items it stopped at, and never as items missing."""
    run_dir, _, _ = stopped
    report = run_gate(Side(run_dir, "bf16"), [Side(run_dir)], load_rules(default_rules_path()), "shipped")
    checks = {c.candidate: c for c in report.checks if c.metric == "echo/acc"}
    assert report.verdicts() == {"cut": "failed", "same": "passed"}
    for name, c in checks.items():
        assert "confidence sequence" in c.method and "stopped early" in c.detail and "missing" not in c.detail
        assert c.n == run_dir.load_result(name).stopped["echo"].items
    assert checks["cut"].low > 2.0 and checks["same"].high < 2.0


def test_check_judges_a_stopped_task_by_the_gates_sequence(stopped, tmp_path):
    """`evalsuite check` on a stopped run's record: the confidence sequence's two-sided interval (the
    one `compare` shows), either way round, never the recorded standard errors' fixed-n interval;
    two sides that both stopped early are not measurable."""
    run_dir, _, _ = stopped

    def points(base: str, cand: str) -> dict:
        return {"what": f"{cand} vs {base}", "metric": "echo/acc", "baseline": f"run:{base}",
                "candidate": f"run:{cand}", "effect": {"kind": "points", "above": -3}}

    claims = tmp_path / "claims.yaml"
    pairs = [("bf16", "cut"), ("bf16", "same"), ("cut", "bf16"), ("same", "cut")]
    claims.write_text(yaml.safe_dump({"claims": [
        {"id": f"{b}-{c}", "text": "t", "where": "w", "checks": [points(b, c)]} for b, c in pairs]}))
    out = tmp_path / "report.json"
    CliRunner().invoke(app, ["check", str(claims), str(run_dir.root), "--json", str(out)])
    found = {c["id"]: c for c in json.loads(out.read_text())["claims"]}
    rules, base = load_rules(default_rules_path()), run_dir.load_result("bf16")
    for name, verdict in (("cut", "not held"), ("same", "held")):
        iv = found[f"bf16-{name}"]["checks"][0]["interval"]
        seq = stopped_interval(rules, run_dir, base, run_dir, run_dir.load_result(name), "echo/acc", 0.975)
        assert "confidence sequence" in iv["method"] and "normal from the recorded" not in iv["method"]
        assert iv["n"] == run_dir.load_result(name).stopped["echo"].items < N
        assert (iv["low"], iv["high"]) == pytest.approx((-seq.high * 100, -seq.low * 100))
        assert found[f"bf16-{name}"]["verdict"] == verdict
    mirrored = found["cut-bf16"]["checks"][0]["interval"]
    cut = found["bf16-cut"]["checks"][0]["interval"]
    assert (mirrored["low"], mirrored["high"]) == pytest.approx((-cut["high"], -cut["low"]))
    both = found["same-cut"]
    assert both["verdict"] == "not measurable" and "both" in both["checks"][0]["detail"]


def test_resume_takes_the_rest_as_not_needed(stopped, tmp_path):
    run_dir, _, runner = stopped
    cfg, task = config(), EchoTask()
    samples = {"echo": stop_policy(cfg).order(task, task.samples())}
    for name in ("cut", "same"):
        assert finished(run_dir.load_result(name), run_dir, cfg.variants[name], [task], samples)
    # a candidate cut mid-run (its record gone) is asked for nothing: what it recorded decides already
    engine = Engine(0.3)
    assert len(runner.run_task(engine, "cut", task, samples["echo"])) < N and engine.asked == 0


def test_the_baseline_goes_first_then_the_candidates():
    first, rest = Decided(config()).phases(config())
    assert list(first.variants) == ["bf16"] and list(rest.variants) == ["cut", "same"]
    full = config().model_copy(update={"stop": "full"})
    assert isinstance(stop_policy(full), Full) and not isinstance(stop_policy(full), Decided)
    assert len(stop_policy(full).phases(full)) == 1


def test_a_config_that_stops_without_a_baseline_is_refused(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"model": {"path": "m"}, "variants": {"a": {}, "b": {}},
                                    "stop": "decided"}))
    res = CliRunner().invoke(app, ["validate", str(path)])
    assert res.exit_code == 2 and "stop: decided needs `baseline:`" in res.output


# ---------------------------------------------------------------- the CLI on the fake engine


BUILDS: list[int] = []


@pytest.fixture(scope="module")
def fake_run(tmp_path_factory, tiny_model) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("fake-stop")
    rules = tmp / "rules.yaml"
    rules.write_text(yaml.safe_dump({"rules": [{"metrics": ["*/acc"], "max_drop_points": 10.0},
                                               {"metrics": ["*/acc_macro"], "max_drop_points": 10.0,
                                                "strata": "group"}]}))
    cfg = {"model": {"path": str(tiny_model)}, "defaults": {"dtype": "bfloat16", "max_model_len": 2048},
           "engine": {"mode": "fake", "batch_size": 16},
           "variants": {"bf16": {}, "same": {"engine_args": {"fake_disagree": 0.0}}, "kv_fp8": {"kv_cache_dtype": "fp8"}},
           "baseline": "bf16",
           "tasks": [{"type": "mmlu", "subjects": ["abstract_algebra", "anatomy", "astronomy", "college_biology",
                                                   "high_school_geography"], "limit_per_subject": 60, "num_fewshot": 0}],
           "gate_rules": str(rules), "tracking": {"enabled": False}, "output_dir": str(tmp / "runs")}
    path = tmp / "stop.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    from evalsuite.run import items

    with pytest.MonkeyPatch.context() as mp:  # counts the items built: once, for both parts of the run
        mp.setattr(items, "preflight", lambda *a, _real=items.preflight: BUILDS.append(1) or _real(*a))
        res = CliRunner().invoke(app, ["run", str(path), "--no-progress", "--stop", "decided"])
    assert res.exit_code == 0, res.output
    (tmp / "output.txt").write_text(res.output)
    (run,) = [p for p in (tmp / "runs").iterdir() if (p / "run.json").exists()]
    return path, run


def test_run_stop_decided_records_where_each_task_stopped(fake_run):
    _, run = fake_run
    record = json.loads((run / "run.json").read_text())
    assert [v["variant"] for v in record["variants"]] == ["bf16", "same", "kv_fp8"]  # the config's order
    base = len((run / "bf16" / "samples" / "mmlu.jsonl").read_text().splitlines())
    assert base == 300 and not record["variants"][0]["stopped"]
    for v in record["variants"][1:]:
        stop = EarlyStop.model_validate(v["stopped"]["mmlu"])
        assert stop.items == len((run / v["variant"] / "samples" / "mmlu.jsonl").read_text().splitlines()) < base
        assert set(stop.decided) == {"mmlu/acc", "mmlu/acc_macro"} and stop.rules.endswith("rules.yaml")



def test_items_are_built_once_for_the_baseline_and_the_candidates(fake_run):
    """The baseline's part and the candidates' part of the run share one build of the items."""
    _, run = fake_run
    assert len(BUILDS) == 1
    spans = [json.loads(line) for line in (run / "phases.jsonl").read_text().splitlines()]
    assert [s["items"] for s in spans if s["phase"] == "items"] == [300]


def test_the_run_records_its_wall_and_says_the_gpu_was_not_sampled_here(fake_run):
    from evalsuite.memory.cuda import nvml_missing

    _, run = fake_run
    wall = json.loads((run / "run.json").read_text())["wall"]
    assert wall["wall_s"] > 0
    if nvml_missing():  # this machine: no number made up
        assert wall["gpu_idle_frac"] is None and wall["sampled"] == nvml_missing()
        said = " ".join((run.parent.parent / "output.txt").read_text().split())
        assert f"GPU idle not sampled ({nvml_missing()})" in said


def test_a_score_of_a_task_stopped_early_gets_its_confidence_sequence_not_wilson(fake_run, tmp_path):
    """Each item score of a stopped task records the sequence's 95% interval (Metric.ci95), which the
    run's metrics, compare and `check` give; Wilson at the n the looks chose would not hold its level."""
    _, run = fake_run
    rd = RunDir(run)
    base = {m.name: m for m in rd.load_result("bf16").metrics}
    assert all(m.ci95 is None for m in base.values())  # run whole: its fixed-n interval holds
    cand = rd.load_result("kv_fp8")
    got = {m.name: m for m in cand.metrics}
    for name in ("mmlu/acc", "mmlu/acc_macro", "mmlu/acc/anatomy"):
        m = got[name]
        low, high = m.ci95
        assert low <= m.value <= high and accuracy_interval(m) == (low, high)
        assert high - low > 2 * 1.96 * math.sqrt(m.value * (1 - m.value) / m.n)  # wider than a fixed-n interval
    assert (got["mmlu/acc_ci95_low"].value, got["mmlu/acc_ci95_high"].value) == tuple(got["mmlu/acc"].ci95)
    shown = CliRunner().invoke(app, ["compare", str(run)], env={"COLUMNS": "200"}).output
    low, high = got["mmlu/acc"].ci95
    assert f"({low:.3f}–{high:.3f}".replace("0.", ".") in shown and "Tasks ended early by run --stop decided: same (mmlu); kv_fp8 (mmlu)" \
        in " ".join(shown.split()), shown
    claims = tmp_path / "claims.yaml"
    claims.write_text(yaml.safe_dump({"claims": [{"id": "one", "text": "t", "where": "w", "checks": [
        {"what": "kv_fp8 alone", "metric": "mmlu/acc", "variant": f"{run.name}:kv_fp8", "effect": {"kind": "value", "above": 0.0}}]}]}))
    out = tmp_path / "report.json"
    res = CliRunner().invoke(app, ["check", str(claims), str(run), "--json", str(out)])
    found = json.loads(out.read_text())["claims"][0]["checks"][0]
    iv = found["interval"]
    assert iv and "confidence sequence" in iv["method"] and "Wilson" not in iv["method"], (found, res.output)
    assert (iv["low"], iv["high"]) == pytest.approx(tuple(got["mmlu/acc"].ci95))



def test_finish_keeps_a_stopped_tasks_sequence_intervals(fake_run, tmp_path):
    """A run cut after a task stopped early, scored by `finish` without an engine: the stopped task's
    scores keep the sequence's intervals."""
    _, run = fake_run
    shutil.copytree(run, tmp_path / "run")
    rd = RunDir(tmp_path / "run")
    cut = rd.load_result("kv_fp8")
    before = {m.name: m.ci95 for m in cut.metrics if m.ci95 is not None}
    rd.write_result(cut.model_copy(update={"status": "running", "metrics": []}))
    finish_run(rd.root, tmp_path / "cache")
    after = {m.name: m.ci95 for m in rd.load_result("kv_fp8").metrics if m.ci95 is not None}
    assert before and after == before


def test_resume_and_gate_on_the_stopped_run(fake_run):
    path, run = fake_run
    res = CliRunner().invoke(app, ["run", str(path), "--no-progress", "--stop", "decided", "--resume"])
    assert res.exit_code == 0, res.output
    assert res.output.count("left as recorded (ok)") == 3 and "starting engine" not in res.output
    rules = path.parent / "rules.yaml"
    res = CliRunner().invoke(app, ["gate", "--baseline", f"{run}:bf16", "--candidate", str(run), "--rules", str(rules),
                                   "--format", "markdown"])
    assert "missing in candidate" not in res.output and res.output.count("stopped early at n=") == 4


def test_stop_rules_that_contradict_gate_rules_are_one_line_before_any_engine(tmp_path, tiny_model):
    """The rules that stop a run are those that gate it: an older config's scheduler.stop_rules must
    name its gate_rules file."""
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"model": {"path": str(tiny_model)}, "engine": {"mode": "fake"},
                                    "variants": {"a": {}, "b": {}}, "baseline": "a",
                                    "stop": "decided", "scheduler": {"stop_rules": "nope.yaml"},
                                    "output_dir": str(tmp_path / "runs")}))
    res = CliRunner().invoke(app, ["run", str(path), "--no-progress"])
    assert res.exit_code == 2 and "scheduler.stop_rules: 'nope.yaml' is not gate_rules" in res.output
    assert not (tmp_path / "runs").exists()


def test_the_rules_that_stop_are_the_gate_rules(tmp_path):
    from evalsuite.run.stopping import stop_rules
    rules = tmp_path / "r.yaml"
    rules.write_text(yaml.safe_dump({"rules": [{"metrics": ["*/acc"], "max_drop_points": 7.0}]}))
    cfg = config().model_copy(update={"gate_rules": str(rules)})
    path, found = stop_rules(cfg)
    assert path == str(rules.resolve()) and found.rule_for("echo/acc").max_drop_points == 7.0
    same = cfg.model_copy(update={"scheduler": cfg.scheduler.model_copy(update={"stop_rules": str(rules)})})
    assert stop_rules(same)[0] == path
    assert stop_rules(config())[0] is None  # the shipped default: recorded as such
