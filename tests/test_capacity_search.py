"""The capacity search's logic without an engine: a deterministic load model stands in for the
server (users up to its capacity meet the SLO, some levels break), and the capacity task itself
runs its search and a sweep of the same grid against it, recording as it does on a server; the
resident load generator's lines with a stand-in process; the `capacity:` block's refusals."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from evalsuite.capacity.config import CapacityConfig, SearchConfig
from evalsuite.capacity.loadgen import LevelRun, Resident
from evalsuite.capacity.scrape import PREEMPTIONS
from evalsuite.capacity.search import predict, prefill_bound, requests_for, search_bracket, start_level, step
from evalsuite.capacity.sweep import Level, bracket, judge
from evalsuite.capacity.task import CapacityTask
from evalsuite.core.rundir import RunDir
from evalsuite.tasks.base import TaskContext
from evalsuite.verdict.capacity import brackets_of

SLO = {"ttft_p90_ms": 2000.0, "itl_p90_ms": 50.0}


# ---------------------------------------------------------------- the pure search


def fake(x: float, capacity: float, broken: frozenset = frozenset(), order: int | None = None) -> Level:
    """A level as a load model with this capacity measures it: met up to it, missed above, broken where told."""
    status = "broken" if x in broken else "ok"
    lv = Level(length=512, output_tokens=64, mode="concurrency", level=x, requests=20, slo=SLO, status=status,
               reason="timed out after 60 s" if status == "broken" else None, completed=20, order=order,
               percentiles={"ttft": {"90": 100.0 if x <= capacity else 5000.0}, "itl": {"90": 10.0}},
               loadgen={"wall_s": 10.0})
    return judge(lv)


def search(grid: list[float], capacity: float, start: float, broken: frozenset = frozenset(),
           budget_s: float | None = None) -> tuple[list[Level], str]:
    levels: list[Level] = []
    while (nxt := step(grid, levels, start, budget_s)).level is not None:
        assert nxt.level not in [lv.level for lv in levels], "a level tried twice"
        levels.append(fake(nxt.level, capacity, broken, order=len(levels) + 1))
    return levels, nxt.why


def cfg_for(grid_top: int = 64, **search) -> CapacityConfig:
    return CapacityConfig(prompt_tokens=[512], output_tokens=64, slo=SLO, search={"highest": grid_top, **search})


@settings(max_examples=300, deadline=None)
@given(capacity=st.integers(0, 80), start=st.integers(1, 64), top=st.sampled_from([8, 16, 64]),
       step_=st.sampled_from([math.sqrt(2), 2.0, 1.5]))
def test_the_search_finds_the_sweeps_bracket_in_few_levels(capacity, start, top, step_):
    """Whatever the prediction, the search ends on the bracket a sweep of every grid level gives, in
    about two levels a doubling of its distance from the prediction and one a halving after."""
    cfg = cfg_for(top, step=step_)
    grid = cfg.levels
    levels, why = search(grid, capacity, start_level(grid, start))
    swept = bracket([fake(x, capacity) for x in grid], grid, 512, "concurrency")
    found = search_bracket(cfg, levels, 512)
    assert (found.at_slo, found.broke_at) == (swept.at_slo, swept.broke_at)
    assert found.stopped == why and found.tried == [lv.level for lv in levels]
    assert found.steps in (1, None) and (found.broke_at is None) == (capacity >= grid[-1])
    assert len(levels) <= 2 * math.ceil(math.log2(len(grid))) + 2


def test_a_good_prediction_needs_two_levels():
    grid = cfg_for().levels  # 1, 2, 3, 4, 6, 8, 11, 16, 23, 32, 45, 64
    levels, why = search(grid, capacity=8, start=8)
    assert [lv.level for lv in levels] == [8, 11] and why.startswith("bracketed: 8 met the SLO, 11")
    levels, _ = search(grid, capacity=8, start=11)
    assert [lv.level for lv in levels] == [11, 8]
    up, _ = search(grid, capacity=40, start=2)  # up 1, 2, 4, 8 grid steps (the last cut at the top), then halving
    assert [lv.level for lv in up] == [2, 3, 6, 23, 64, 32, 45]


def test_edges_of_the_grid():
    grid = cfg_for(8).levels
    levels, why = search(grid, capacity=0, start=4)
    assert [lv.level for lv in levels] == [4, 3, 1] and why == "the lowest level, 1, did not meet the SLO"
    levels, why = search(grid, capacity=100, start=4)
    assert levels[-1].level == 8 and why == "the grid's highest level, 8, met the SLO"
    assert search_bracket(cfg_for(8), levels, 512).text() == ">= 8 users (the grid's highest level, 8, met the SLO)"


def test_a_broken_level_is_recorded_and_never_counted():
    """A level that timed out bounds the bracket from above as a miss does, with its reason; it is
    never the level at the SLO, whatever its percentiles, and a sweep reads it the same way."""
    cfg = cfg_for()
    grid = cfg.levels
    levels, why = search(grid, capacity=20, start=8, broken=frozenset({11.0}))
    assert 11.0 in [lv.level for lv in levels] and why.startswith("bracketed: 8 met the SLO, 11")
    b = search_bracket(cfg, levels, 512)
    assert (b.at_slo, b.broke_at, b.why) == (8, 11, "timed out after 60 s") and b.at.level == 8
    broken = next(lv for lv in levels if lv.level == 11)
    assert broken.status == "broken" and broken.met is None
    swept = bracket([fake(x, 20, frozenset({11.0})) for x in grid], grid, 512, "concurrency")
    assert (swept.at_slo, swept.broke_at) == (b.at_slo, b.broke_at)


def test_the_budget_stops_a_search_and_says_so():
    grid = cfg_for().levels
    levels, why = search(grid, capacity=40, start=1, budget_s=25)
    assert len(levels) == 3 and why == "budget spent: 30 s of 25 s, the capacity above 4"
    b = search_bracket(cfg_for(budget_s=25), levels, 512)
    assert b.censored and b.stopped == why


def test_a_cut_search_goes_on_where_its_record_ends():
    grid = cfg_for().levels
    whole, _ = search(grid, capacity=40, start=2)
    again = step(grid, whole[:3], start=grid[0], budget_s=None)  # the record's first level anchors it, not `start`
    assert again.level == whole[3].level and again.why == "up: 6 met the SLO"
    out_of_order = [whole[2], whole[0], whole[1]]  # rows as read back in any order: the order field rules
    assert step(grid, out_of_order, grid[0], None).level == whole[3].level


def test_requests_a_level_sends():
    cfg = cfg_for(min_requests=20, rounds=4)  # requests 200, timeout 1800 s
    assert [requests_for(cfg, x, []) for x in (1, 4, 8, 32, 64)] == [20, 20, 32, 128, 200]
    slow = fake(4, 10)
    slow.req_per_s = 0.05  # 45 requests fill half the deadline
    assert requests_for(cfg, 32, [slow]) == 45 and requests_for(cfg, 2, [slow]) == 20  # only levels below count
    slow.req_per_s = 0.001
    assert requests_for(cfg, 32, [slow]) == 20  # never fewer than its percentiles' floor


def test_the_prediction_takes_the_fewer_of_the_kv_pool_and_the_prefill_curve():
    """Prefill of one 32K prompt 0.3 s, four at once 1.2 s: 0.3 s a user; TTFT p90 <= 2 s holds ~7
    users arriving together (the 90th waits for 90% of their prefills); the KV pool holds 70."""
    cfg = cfg_for(128)
    assert prefill_bound([(1, 0.3), (4, 1.2)], 2.0, 90) == 7
    p = predict(cfg, 70, [(1, 0.3), (4, 1.2)])
    assert (p.users, p.kv_bound, p.prefill_bound, p.basis) == (7, 70, 7, "KV pool 70 and prefill 7")
    assert start_level(cfg.levels, p.users) == 6
    assert predict(cfg, 3, [(1, 0.3), (4, 1.2)]).users == 3
    assert predict(cfg, None, []).users == 1 and predict(cfg, None, []).basis.startswith("no prediction")
    assert prefill_bound([(1, 0.5), (4, 0.4)], 2.0, 90) is None  # more users cost nothing: no bound
    assert predict(cfg_for(start=16), 70, []).users == 16
    capped = predict(cfg, 70, [(1, 0.3), (4, 1.2)], max_num_seqs=4)
    assert capped.users == 4 and capped.basis == "KV pool 70 and max_num_seqs 4 and prefill 7"


# ---------------------------------------------------------------- the task's search against a load model


class LoadModel:
    """A server as the capacity task sees it (its _Target): the load generator's results come from a
    capacity in users, some levels time out, some preempt without end."""

    def __init__(self, folder: Path, capacity: int, broken: set[int] = frozenset(), storm: set[int] = frozenset()):
        self.folder, self.capacity, self.broken, self.storm = folder, capacity, broken, storm
        self.base_url, self.model, self.tokenizer, self.api_key = "http://127.0.0.1:9", "m", "t", "k"
        self.pool_tokens, self.block_size, self.max_num_seqs = 100_000, 16, None
        self.loadgen = self
        self.preempted = 0
        self.runs: list[tuple[int, int]] = []  # (users, requests) per level

    def run(self, cmd: list[str], log: Path, timeout_s: float) -> LevelRun:
        users, n = int(cmd[cmd.index("--max-concurrency") + 1]), int(cmd[cmd.index("--num-prompts") + 1])
        self.runs.append((users, n))
        if users in self.broken:
            return LevelRun(None, None, timeout_s, "", [])
        self.preempted += 10 * n if users in self.storm else 0
        ttft = 50.0 * users if users <= self.capacity else 9000.0
        summary = {"completed": n, "failed": 0, "duration": n / users, "request_throughput": float(users),
                   "output_throughput": 64.0 * users, "p50_ttft_ms": ttft / 2, "p90_ttft_ms": ttft, "p99_ttft_ms": ttft,
                   "p50_itl_ms": 5.0, "p90_itl_ms": 8.0, "p99_itl_ms": 9.0}
        return LevelRun(summary, 0, n / users, "", [])

    def metrics(self) -> dict:
        return {PREEMPTIONS: float(self.preempted)}

    def prefill_curve(self, length, vocab, at_once, seed, timeout_s) -> list[tuple[int, float]]:
        return [(1, 0.1), (4, 0.4)]  # 0.1 s a prompt: the TTFT limit holds 22 arriving together

    def load_now(self):
        return None

    def load_ended(self, load):
        return load

    def check_alive(self, after: str) -> None:
        pass

    def close(self) -> None:
        pass


def run_task(tmp_path: Path, cfg: CapacityConfig, server: LoadModel, tag: str) -> tuple[list[Level], CapacityTask]:
    rd = RunDir(tmp_path)
    (tmp_path / tag / "capacity").mkdir(parents=True, exist_ok=True)
    server.folder = tmp_path / tag / "capacity"
    task = CapacityTask(cfg, TaskContext(base_dir=tmp_path, cache_dir=tmp_path))
    rows = {r["sample"]["id"]: r for r in rd.load_samples(tag, "capacity")}
    for n in cfg.prompt_tokens:
        if cfg.searching:
            task._search(server, n, rows, lambda r: rd.write_samples(tag, "capacity", r), None)
        else:
            for s in task.samples():
                task._keep(rows, lambda r: rd.write_samples(tag, "capacity", r), s, task._measure(server, s))
    return [Level.model_validate(r["score"]["extra"]) for r in rd.load_samples(tag, "capacity")], task


def test_the_tasks_search_and_sweep_of_one_grid_agree(tmp_path):
    """The capacity task's own search and its sweep of the same grid, against one load model: the same
    bracket; the search's rows keep every level tried, in order, why each, the prediction, the requests
    its percentiles need; its metrics say where it started and how many levels it ran."""
    search_cfg = CapacityConfig(prompt_tokens=[512], output_tokens=64, slo=SLO, search={"highest": 64})
    sweep_cfg = CapacityConfig(prompt_tokens=[512], output_tokens=64, slo=SLO, concurrency=search_cfg.levels, requests=100)
    found, task = run_task(tmp_path, search_cfg, LoadModel(tmp_path, capacity=13), "search")
    swept, sweep_task = run_task(tmp_path, sweep_cfg, LoadModel(tmp_path, capacity=13), "sweep")
    a, b = brackets_of(search_cfg, found, 512), brackets_of(sweep_cfg, swept, 512)
    assert (a.at_slo, a.broke_at) == (b.at_slo, b.broke_at) == (11, 16) and a.steps == 1
    assert [lv.level for lv in found] == [16, 11] and len(swept) == 12  # predicted 22 -> 16: down one, bracketed
    first = found[0]
    assert first.order == 1 and first.chosen == "first: KV pool 173 and prefill 22"
    assert found[1].chosen == "down: 16 did not meet the SLO"
    assert first.predicted.users == 22 and first.predicted.prefill_bound == 22 and first.predicted.kv_bound == 173
    assert first.requests == 64 and first.needed == 10 and "99" not in first.percentiles["ttft"]  # 64 < 100: no p99
    assert swept[0].needed == 100 and "99" in swept[0].percentiles["ttft"]
    assert task.resume([{"score": {"extra": lv.model_dump(mode="json")}} for lv in found])
    assert not task.resume([{"score": {"extra": found[0].model_dump(mode="json")}}])
    by_name = {m.name: m.value for m in task.metrics([task.score_of(task._sample(512, lv.level), lv) for lv in found])}
    assert by_name["capacity/users_at_slo/ctx512"] == 11 and by_name["capacity/broke_at/ctx512"] == 16
    assert by_name["capacity/predicted_users/ctx512"] == 22 and by_name["capacity/levels_run/ctx512"] == 2
    assert by_name["capacity/bracket_steps/ctx512"] == 1 and by_name["capacity/search_s/ctx512"] == pytest.approx(4 + 44 / 11)


def test_the_task_records_a_broken_level_and_a_preemption_storm_without_counting_them(tmp_path):
    cfg = CapacityConfig(prompt_tokens=[512], output_tokens=64, slo=SLO, search={"highest": 64, "start": 4})
    levels, _ = run_task(tmp_path, cfg, LoadModel(tmp_path, capacity=40, storm={6}), "storm")
    assert [lv.level for lv in levels] == [4, 6] and levels[1].status == "broken" and levels[1].met is None
    assert levels[1].reason.startswith("preemption storm: 240 preemptions over 24 requests (more than 1 a request)")
    b = brackets_of(cfg, levels, 512)
    assert (b.at_slo, b.broke_at) == (4, 6) and b.at.level == 4 and b.why.startswith("preemption storm")
    levels, _ = run_task(tmp_path, cfg, LoadModel(tmp_path, capacity=40, broken={6}), "timeout")
    b = brackets_of(cfg, levels, 512)
    assert [lv.level for lv in levels] == [4, 6] and levels[1].status == "broken" and levels[1].completed == 0
    assert (b.at_slo, b.broke_at) == (4, 6) and b.why == "timed out after 1800 s (the load generator was ended)"


def test_a_resumed_search_runs_only_the_rest(tmp_path):
    cfg = CapacityConfig(prompt_tokens=[512, 1024], output_tokens=64, slo=SLO, search={"highest": 64})
    server = LoadModel(tmp_path, capacity=13)
    whole, _ = run_task(tmp_path, cfg, server, "v")
    rd = RunDir(tmp_path)
    rows = rd.load_samples("v", "capacity")
    rd.write_samples("v", "capacity", rows[:3])  # cut after the first length and one level of the second
    again = LoadModel(tmp_path, capacity=13)
    resumed, _ = run_task(tmp_path, cfg, again, "v")
    assert [(lv.length, lv.level, lv.order) for lv in resumed] == [(lv.length, lv.level, lv.order) for lv in whole]
    assert len(again.runs) == len(whole) - 3


# ---------------------------------------------------------------- the resident load generator


STAND_IN = textwrap.dedent("""\
    import json, sys, time
    from pathlib import Path
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        argv = json.loads(line)["argv"]
        if "--hang" in argv:
            time.sleep(60)
        out = Path(argv[argv.index("--result-dir") + 1]) / argv[argv.index("--result-filename") + 1]
        out.write_text(json.dumps({"completed": 20, "ttfts": [0.1] * 20}))
        print(json.dumps({"rc": 0}), flush=True)
""")


def test_the_resident_load_generator_runs_levels_and_is_ended_at_a_deadline(tmp_path):
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    gen = Resident("key", tmp_path / "loadgen.log", [sys.executable, str(script)])

    def cmd(*extra: str) -> list[str]:
        return ["python", "-m", "x", "bench", "serve", *extra, "--result-dir", str(tmp_path), "--result-filename", "r.json"]

    try:
        first = gen.run(cmd(), tmp_path / "a.log", 30)
        pid = gen.proc.pid
        assert first.returncode == 0 and first.summary == {"completed": 20}  # per-request lists stay in the file
        assert gen.run(cmd(), tmp_path / "b.log", 30).returncode == 0 and gen.proc.pid == pid  # the same process
        hung = gen.run(cmd("--hang"), tmp_path / "c.log", 1)
        assert hung.returncode is None and hung.summary is None and hung.wall_s < 30 and gen.proc is None
        assert gen.run(cmd(), tmp_path / "d.log", 30).returncode == 0 and gen.proc.pid != pid  # started afresh
    finally:
        gen.close()
    dead = Resident("key", tmp_path / "dead.log", [sys.executable, "-c", "import sys; print('no vllm here'); sys.exit(1)"])
    run = dead.run(cmd(), tmp_path / "e.log", 30)
    assert run.returncode == 1 and "did not start" in run.output_tail


# ---------------------------------------------------------------- the config


@pytest.mark.parametrize("bad, words", [
    ({"concurrency": [1, 2], "search": {}}, "not both"),
    ({"search": {"min_requests": 5}, "slo": {"itl_p90_ms": 50}}, "what a p90 needs"),
    ({"search": {"min_requests": 5}}, "p90 needs >= 10 requests a level, search.min_requests is 5"),
    ({"search": {"lowest": 8, "highest": 4}}, "below lowest"),
    ({"search": {"start": 99, "highest": 64}}, "outside lowest..highest"),
    ({"search": {"step": 1.0}}, "greater than 1.05"),
    ({"search": {"step": float("inf")}}, "finite"),
    ({"search": {"budget_s": float("nan")}}, "finite"),
    ({"search": {"min_requests": 20}, "slo": {"ttft_p99_ms": 4000}}, "needs >= 100 requests a level, search.min_requests is 20"),
    ({"max_preemptions_per_request": -1}, "greater than or equal to 0"),
])
def test_search_config_refuses(bad, words):
    with pytest.raises(ValueError, match=words):
        CapacityConfig(**bad)


def test_a_bad_capacity_block_is_one_line_and_exit_2(tmp_path):
    cfg = {"model": {"path": str(tmp_path)}, "variants": {"bf16": {"max_model_len": 1024}}, "engine": {"mode": "server"},
           "capacity": {"prompt_tokens": [512], "output_tokens": 64, "search": {"highest": 4, "lowest": 8}}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    res = subprocess.run([sys.executable, "-m", "evalsuite", "validate", str(path)], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "capacity.search" in lines[0] and "highest 4 is below lowest 8" in lines[0]
    assert "Traceback" not in res.stderr and str(path.name) in lines[0]
    assert json.loads(json.dumps(SearchConfig().model_dump()))["lowest"] == 1


# ---------------------------------------------------------------- a searched pass read back


def test_a_searched_pass_on_the_report_and_the_gate(tmp_path):
    """Two variants' searches recorded as the task records them (base 13 users, kv 30): the gate sets
    the brackets side by side, the report says where each search started, the levels it ran and why
    it stopped, and its answer in the form a planner quotes."""
    from typer.testing import CliRunner

    from evalsuite.cli.main import app
    from evalsuite.verdict.gate import run_gate
    from evalsuite.verdict.sides import Side
    from evalsuite.verdict.rules import default_rules_path, load_rules
    from tests.mlflow_server import build_run

    raw = {"prompt_tokens": [512], "output_tokens": 64, "slo": SLO, "search": {"highest": 64}}
    cfg = CapacityConfig(**raw)
    run = build_run(tmp_path, "r1", {"base": {}, "kv": {}}, n=400, baseline="base")
    rd = RunDir(run)
    for name, capacity in (("base", 13), ("kv", 30)):
        levels, task = run_task(run, cfg, LoadModel(run, capacity=capacity), name)
        record = rd.load_run()
        result = record.variant(name)
        result.metrics += task.metrics([task.score_of(task._sample(512, lv.level), lv) for lv in levels])
        rd.write_run(record)
        rd.write_result(result)
    config = rd.read_config()
    config["capacity"] = raw
    rd.write_config(config)
    report = run_gate(Side(rd, "base"), [Side(rd)], load_rules(default_rules_path()), "shipped")
    (check,) = [c for c in report.checks if c.metric == "capacity/users_at_slo/ctx512"]
    assert check.status == "pass" and check.baseline == 11 and check.value == 23  # [23, 32) holds >= [11, 16)'s most
    page = CliRunner().invoke(app, ["report", str(run), "--out", str(tmp_path / "page")])
    assert page.exit_code == 0, page.output
    md = (tmp_path / "page" / "report.md").read_text()
    assert "from 22 predicted (KV pool 173 and prefill 22); 16 (64), 11 (44); bracketed: 11 met the SLO, 16" in md
    assert "users searched on a grid of factor 1.41 (1-64) from a predicted level" in md
    assert "`kv`: 2.09x the users of `base` at 512 tokens within TTFT p90 <= 2000 ms, ITL p90 <= 50 ms " \
           "(23 users (32 broke) against 11 users (16 broke))" in md
