"""The capacity pass's logic without an engine: its config, the load generator's command, level
verdicts and brackets, the /metrics summary, the gate's bracket check, a level cut at its deadline."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from evalsuite.capacity.config import CapacityConfig
from evalsuite.capacity.loadgen import Resident, bench_command
from evalsuite.capacity.predict import kv_bound_users
from evalsuite.capacity.scrape import HITS, KV_USAGE, PREEMPTIONS, QUERIES, RUNNING, summarize
from evalsuite.capacity.sweep import Level, bracket, from_summary, judge
from evalsuite.capacity.task import CapacityTask, level_id
from evalsuite.core.errors import ConfigError
from evalsuite.core.types import HostLoad, Sample, Score
from evalsuite.verdict.capacity import Sweeps, judge_brackets
from evalsuite.run.config import load_config
from evalsuite.tasks.base import TaskContext

SLO = {"ttft_p90_ms": 2000.0, "itl_p90_ms": 50.0}


def level(x: float, ttft: float = 100.0, itl: float = 10.0, length: int = 512, status: str = "ok",
          loaded: bool = False, mode: str = "concurrency") -> Level:
    load = HostLoad(cpus=2, start=[9.0 if loaded else 0.5, 0, 0], end=[0.5, 0, 0], engine_threads=0)
    lv = Level(length=length, output_tokens=128, mode=mode, level=x, requests=100, slo=SLO, status=status,
               reason=None if status == "ok" else "timed out after 5 s", completed=100,
               percentiles={"ttft": {"50": ttft / 2, "90": ttft}, "itl": {"50": itl / 2, "90": itl}}, host_load=load)
    return judge(lv)


# ---------------------------------------------------------------- config


def test_config_defaults_and_percentiles():
    c = CapacityConfig()  # no levels listed: users are searched, on a grid of factor sqrt(2) from 1
    assert c.searching and c.mode == "concurrency" and c.levels[:10] == [1, 2, 3, 4, 6, 8, 11, 16, 23, 32]
    assert c.levels[-1] == 1024 and c.search.min_requests == 20
    assert c.percentiles == [50.0, 90.0, 99.0] and c.percentiles_for(20) == [50.0, 90.0]
    assert CapacityConfig(concurrency=[1, 2, 4]).levels == [1, 2, 4] and not CapacityConfig(concurrency=[1]).searching
    assert CapacityConfig(slo={"tpot_p95_ms": 30}).percentiles == [50.0, 90.0, 95.0, 99.0]
    assert CapacityConfig(request_rate=[0.5, 1, 2]).mode == "request_rate"


@pytest.mark.parametrize("bad, words", [
    ({"concurrency": [1, 2], "request_rate": [1.0]}, "not both"),
    ({"concurrency": [4, 2]}, "not strictly increasing"),
    ({"concurrency": [2, 2]}, "not strictly increasing"),
    ({"requests": 50}, "greater than or equal to 100"),
    ({"slo": {"ttft_p90": 2000}}, "not an SLO term"),
    ({"slo": {"ttft_p100_ms": 2000}}, "not an SLO term"),
    ({"slo": {"e2el_p99.9_ms": 9000}}, "needs >= 1000 requests"),
])
def test_config_refuses(bad, words):
    with pytest.raises(ValueError, match=words):
        CapacityConfig(**bad)


def _config_file(tmp_path: Path, **over) -> Path:
    cfg = {"model": {"path": str(tmp_path)}, "variants": {"bf16": {"max_model_len": 1024}},
           "engine": {"mode": "server"}, "capacity": {"prompt_tokens": [512], "output_tokens": 64}}
    cfg.update(over)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_run_config_needs_a_server_and_room(tmp_path):
    assert load_config(_config_file(tmp_path)).capacity.prompt_tokens == [512]
    with pytest.raises(ConfigError, match=r"capacity: needs engine.mode server, the mode is offline \(allowed: server"):
        load_config(_config_file(tmp_path, engine={"mode": "offline"}))
    too_long = {"prompt_tokens": [1000], "output_tokens": 64}
    with pytest.raises(ConfigError, match=r"capacity.prompt_tokens: \[1000\] \+ output_tokens 64 exceeds "
                                          r"variants.bf16.max_model_len 1024"):
        load_config(_config_file(tmp_path, capacity=too_long))
    spread = {"prompt_tokens": [800], "output_tokens": 64, "range_ratio": 0.5}  # up to 1200 + 96
    with pytest.raises(ConfigError, match="max_model_len"):
        load_config(_config_file(tmp_path, capacity=spread))


# ---------------------------------------------------------------- the load generator's command


def test_bench_command_levels_and_no_key(tmp_path):
    c = CapacityConfig(concurrency=[4], requests=120, warmups=3)
    cmd = bench_command(c, "http://127.0.0.1:9", "served", "/tok", 512, 4.0, tmp_path / "x.json", seed=7)
    text = " ".join(cmd)
    assert "bench serve" in text and "--max-concurrency 4 --request-rate inf" in text
    assert "--num-prompts 120" in text and "--num-warmups 3" in text and "--random-input-len 512" in text
    assert "--metric-percentiles 50,90,99" in text and "--percentile-metrics ttft,itl,tpot,e2el" in text
    assert "--ignore-eos" in cmd and "--save-detailed" in cmd and "--seed 7" in text
    assert "key" not in text.lower() and "authorization" not in text.lower()
    rate = bench_command(CapacityConfig(request_rate=[0.5], burstiness=0.5), "u", "m", "t", 64, 0.5,
                         tmp_path / "y.json", seed=0)
    assert "--request-rate 0.5 --burstiness 0.5" in " ".join(rate) and "--max-concurrency" not in rate


def test_a_failing_load_generator_leaves_its_exit_code(tmp_path):
    """A level whose `vllm bench serve` exits with an error: its code and what it printed (the
    deadline's end is tests/test_capacity_search.py's)."""
    stand_in = tmp_path / "stand_in.py"
    stand_in.write_text("import json, sys\nprint(json.dumps({'ready': True}), flush=True)\nfor line in sys.stdin:\n"
                        "    open(json.loads(line)['log'], 'w').write('no route to server\\n')\n"
                        "    print(json.dumps({'rc': 3}), flush=True)\n")
    cmd = ["python", "-m", "x", "bench", "serve", "--result-dir", str(tmp_path), "--result-filename", "r.json"]
    gen = Resident(None, tmp_path / "loadgen.log", [sys.executable, str(stand_in)])
    try:
        run = gen.run(cmd, tmp_path / "r.log", timeout_s=60)
    finally:
        gen.close()
    assert run.returncode == 3 and "no route to server" in run.output_tail and run.summary is None


# ---------------------------------------------------------------- levels and brackets


def test_from_summary_reads_the_load_generators_fields():
    summary = {"completed": 100, "failed": 0, "duration": 20.0, "request_throughput": 5.0, "output_throughput": 640.0,
               "total_token_throughput": 3200.0, "max_concurrent_requests": 4, "total_output_tokens": 12_800, "p50_ttft_ms": 80.0,
               "p90_ttft_ms": 150.0, "p99_ttft_ms": 300.0, "p90_itl_ms": 12.5, "mean_ttft_ms": 90.0}
    base = Level(length=512, output_tokens=128, mode="concurrency", level=4, requests=100, slo=SLO)
    lv = judge(from_summary(base, summary, [50.0, 90.0, 99.0]))
    assert lv.req_per_s == 5.0 and lv.output_tok_per_s == 640.0 and lv.peak_concurrent == 4
    assert lv.percentile("ttft", 90) == 150.0 and lv.percentile("itl", 90) == 12.5 and lv.mean_ms["ttft"] == 90.0
    assert lv.met is True and lv.misses == [] and lv.output_tokens == 128  # asked a request, not the total


def test_judge_names_each_miss():
    lv = level(8, ttft=2500.0, itl=60.0)
    assert lv.met is False and lv.misses == ["ttft_p90_ms 2,500.0 > 2000", "itl_p90_ms 60.0 > 50"]
    assert level(8, status="broken").met is None


def test_bracket_reads_from_the_bottom_up():
    levels = [level(1), level(2), level(4, ttft=2500.0), level(8)]
    b = bracket(levels, [1, 2, 4, 8], 512, "concurrency")
    assert (b.at_slo, b.broke_at, b.why) == (2.0, 4.0, "ttft_p90_ms 2,500.0 > 2000")
    assert b.at.level == 2 and "8" in b.notes[0] and not b.censored
    assert b.text() == "2 users (4 broke it: ttft_p90_ms 2,500.0 > 2000)"


def test_bracket_censored_broken_and_cut():
    assert bracket([level(1), level(2)], [1, 2], 512, "concurrency").text() == ">= 2 users (every level met the SLO)"
    broken = bracket([level(1, status="broken"), level(2)], [1, 2], 512, "concurrency")
    assert (broken.at_slo, broken.broke_at, broken.why) == (0.0, 1.0, "timed out after 5 s")
    cut = bracket([level(1)], [1, 2, 4], 512, "concurrency")
    assert cut.censored and cut.missing == [2, 4] and cut.text() == ">= 1 users (levels 2, 4 not run)"
    other = bracket([level(1, length=1024)], [1], 512, "concurrency")
    assert other.missing == [1] and other.at is None


def test_bracket_marks_a_loaded_host_up_to_the_break_only():
    assert bracket([level(1, loaded=True), level(2)], [1, 2], 512, "concurrency").loaded
    above = [level(1), level(2, ttft=3000.0), level(4, loaded=True)]
    assert not bracket(above, [1, 2, 4], 512, "concurrency").loaded


# ---------------------------------------------------------------- /metrics


def test_summarize_peaks_means_and_preemptions():
    readings = [{KV_USAGE: 0.2, RUNNING: 3}, {KV_USAGE: 0.6, RUNNING: 4}, {}]
    view = summarize(readings, {PREEMPTIONS: 5.0, HITS: 100.0, QUERIES: 1000.0},
                     {PREEMPTIONS: 9.0, HITS: 116.0, QUERIES: 1800.0})
    assert view.readings == 3 and view.kv_usage_peak == 0.6 and view.kv_usage_mean == pytest.approx(0.4)
    assert view.running_peak == 4 and view.waiting_peak is None and view.preemptions == 4
    assert view.prefix_hit_rate == pytest.approx(16 / 800)
    assert summarize([], {}, {}).preemptions is None and summarize([], {}, {}).prefix_hit_rate is None


def test_kv_bound_users_counts_whole_blocks():
    assert kv_bound_users(10_000, 1000, 100, 16) == 10_000 // 1104  # 1,100 tokens take 69 blocks of 16
    assert kv_bound_users(10_000, 1000, 100, 16, max_num_seqs=5) == 5
    assert kv_bound_users(None, 1000, 100, 16) is None


# ---------------------------------------------------------------- the gate's bracket check


def _sweeps(levels: list[Level], declared: list[float], **cfg) -> Sweeps:
    c = CapacityConfig(prompt_tokens=[512], output_tokens=128, concurrency=declared, slo=SLO, **cfg)
    return Sweeps(c, levels, {512: bracket(levels, c.levels, 512, c.mode)})


def _judge(base_met: int, cand_met: int, declared: list[int], limit: float = 10.0, **kw):
    def sweep(top: int):
        return _sweeps([level(x, ttft=100 if x <= top else 5000) for x in declared], declared, **kw)

    b, c = sweep(base_met), sweep(cand_met)
    return judge_brackets(b, b.brackets[512], c, c.brackets[512], limit)


def test_gate_fails_only_a_drop_shown_beyond_the_limit():
    v = _judge(8, 2, [1, 2, 4, 8, 16])  # candidate < 4 users, baseline >= 8
    assert v.status == "fail" and "shown beyond" in v.detail and v.change == pytest.approx(75.0)


def test_gate_passes_only_where_the_grid_resolves_the_limit():
    assert _judge(8, 8, [1, 2, 4, 8, 16]).status == "insufficient"  # [8, 16) against [8, 16): 2x apart
    fine = list(range(10, 21))
    assert _judge(15, 15, fine).status == "pass"  # baseline <= 15, candidate >= 15
    assert _judge(15, 14, fine).status == "pass"  # 14 >= 0.9 x 15
    assert _judge(15, 13, fine).status == "fail"  # whole users: exactly 13 against exactly 15
    assert _judge(14, 12, list(range(10, 21, 2))).status == "insufficient"  # 12-13 against 14-15
    assert _judge(20, 19, fine).status == "insufficient"  # baseline beyond the sweep: no pass possible
    assert _judge(20, 15, fine).status == "fail"  # 15 against at least 20
    assert _judge(15, 16, fine).status == "pass"


def test_gate_baseline_at_no_level_and_loaded_and_unlike_workloads():
    assert _judge(0, 0, [1, 2]).status == "uninformative"
    b = _sweeps([level(1, loaded=True), level(2)], [1, 2])
    assert judge_brackets(b, b.brackets[512], b, b.brackets[512], 10).status == "skip"
    c = CapacityConfig(prompt_tokens=[512], output_tokens=256, concurrency=[1, 2], slo=SLO)
    unlike = Sweeps(c, [level(1)], {512: bracket([level(1)], [1, 2], 512, "concurrency")})
    q = _sweeps([level(1), level(2)], [1, 2])
    assert judge_brackets(q, q.brackets[512], unlike, unlike.brackets[512], 10).status == "fail"


def test_gate_rates_are_continuous():
    rates = [1.0, 2.0, 4.0]

    def sweep(top: float) -> Sweeps:
        lv = [level(x, ttft=100 if x <= top else 5000, mode="request_rate") for x in rates]
        c = CapacityConfig(prompt_tokens=[512], output_tokens=128, request_rate=rates, slo=SLO)
        return Sweeps(c, lv, {512: bracket(lv, rates, 512, "request_rate")})

    b, c = sweep(4.0), sweep(1.0)  # candidate < 2 req/s, baseline >= 4: beyond 10%
    assert judge_brackets(b, b.brackets[512], c, c.brackets[512], 10).status == "fail"
    b, c = sweep(2.0), sweep(2.0)  # [2, 4) both: a rate may be 3.99
    assert judge_brackets(b, b.brackets[512], c, c.brackets[512], 10).status == "insufficient"


# ---------------------------------------------------------------- the task's records


def test_task_metrics_and_resume(tmp_path):
    cfg = CapacityConfig(prompt_tokens=[512], output_tokens=128, concurrency=[1, 2, 4], slo=SLO)
    task = CapacityTask(cfg, TaskContext(base_dir=tmp_path, cache_dir=tmp_path))
    assert [s.id for s in task.samples()] == ["ctx512_c1", "ctx512_c2", "ctx512_c4"] == \
        [level_id(cfg, 512, x) for x in (1, 2, 4)]
    levels = [level(1), level(2), level(4, itl=80.0)]
    for lv in levels:
        lv.req_per_s, lv.output_tok_per_s, lv.kv_cache_tokens, lv.block_size = lv.level, 128 * lv.level, 20_000, 16
    scores = [task.score_of(Sample(id=level_id(cfg, 512, lv.level), task="capacity", request=task.samples()[0].request,
                                   target=""), lv) for lv in levels]
    by_name = {m.name: m for m in task.metrics(scores)}
    assert by_name["capacity/users_at_slo/ctx512"].value == 2 and by_name["capacity/users_at_slo/ctx512"].unit == "users"
    assert by_name["capacity/broke_at/ctx512"].value == 4
    assert by_name["capacity/output_tok_per_s_at_slo/ctx512"].value == 256
    assert by_name["capacity/kv_bound_users/ctx512"].value == 20_000 // 640
    assert by_name["capacity/itl_ms_p90/ctx512_c4"].value == 80.0 and by_name["capacity/met_slo/ctx512_c4"].value == 0
    assert by_name["capacity/host_loaded/ctx512"].value == 0
    assert task.primary_metric == "capacity/users_at_slo/ctx512"
    rows = [{"sample": {"id": s.sample_id}, "score": s.model_dump()} for s in scores[:2]]
    assert task.resume(rows) is False and task.resume(rows + [{"sample": {"id": "ctx512_c4"}}]) is True
    assert isinstance(scores[0], Score) and scores[2].value == 0.0


def test_stop_after_ends_a_length_past_its_first_miss_only(tmp_path):
    """stop_after 1: one level runs past the first that missed the SLO; a broken level (an error) is
    no miss and stops nothing; another length starts afresh."""
    cfg = CapacityConfig(prompt_tokens=[64, 128], output_tokens=8, concurrency=[1, 2, 4, 8], slo=SLO, stop_after=1)
    task = CapacityTask(cfg, TaskContext(base_dir=tmp_path, cache_dir=tmp_path))
    samples = {s.id: s for s in task.samples()}

    def row(lv: Level) -> dict:
        return {"sample": {"id": level_id(cfg, lv.length, lv.level)}, "score": {"extra": lv.model_dump(mode="json")}}

    rows = {r["sample"]["id"]: r for r in [row(level(1, length=64)), row(level(2, length=64, ttft=3000.0)),
                                            row(level(4, length=64))]}
    assert task._stopped(samples["ctx64_c8"], rows) and not task._stopped(samples["ctx128_c1"], rows)
    broken = {r["sample"]["id"]: r for r in [row(level(1, length=64, status="broken")), row(level(2, length=64))]}
    assert not task._stopped(samples["ctx64_c4"], broken)
    assert task.resume(list(rows.values())) is False  # ctx128 is still to run


def test_a_broken_level_says_why():
    from evalsuite.capacity.loadgen import LevelRun
    from evalsuite.capacity.task import _broken

    base = Level(length=64, output_tokens=8, mode="concurrency", level=2, requests=100, slo=SLO)
    ok = base.model_copy(update={"completed": 100})
    assert _broken(LevelRun({}, 0, 1.0, "", []), ok, 60) == ("ok", None)
    assert _broken(LevelRun(None, None, 60.0, "", []), base, 60)[1] == "timed out after 60 s (the load generator was ended)"
    assert _broken(LevelRun(None, 1, 1.0, "x\nConnection refused\n", []), base, 60)[1] == \
        "vllm bench serve exited with code 1: Connection refused"
    failed = base.model_copy(update={"completed": 97, "failed": 3})
    assert _broken(LevelRun({}, 0, 1.0, "", ["HTTP 500: engine dead"]), failed, 60)[1] == \
        "3 of 100 requests failed: HTTP 500: engine dead"
    short = base.model_copy(update={"completed": 60})
    assert "fewer than the 100" in _broken(LevelRun({}, 0, 1.0, "", []), short, 60)[1]
    assert judge(base.model_copy(update={"status": "broken"})).met is None
