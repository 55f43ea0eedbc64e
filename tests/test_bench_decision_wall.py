"""bench/decision_wall.py: phases from a run's own records (pure), and the whole bench on the fake
engine, `--full` included (the real CPU engine's figures are docs/benchmarks.md's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from evalsuite.memory.cuda import nvml_missing

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import decision_wall  # noqa: E402


def test_union_counts_overlapping_spans_once():
    assert decision_wall.union_s([(0, 10), (5, 15), (20, 25)]) == 20
    assert decision_wall.union_s([]) == 0
    assert decision_wall.clipped([(0, 10)], [(2, 3), (8, 20)]) == [(2, 3), (8, 10)]


def test_phases_are_unions_sums_and_the_pauses_inside_each_task():
    rows = [{"phase": "items", "start": 0, "end": 2},
            {"phase": "engine_start", "variant": "a", "start": 2, "end": 10},
            {"phase": "engine_start", "variant": "b", "start": 3, "end": 12},
            {"phase": "task", "variant": "a", "task": "mmlu", "start": 10, "end": 30},
            {"phase": "task", "variant": "b", "task": "mmlu", "start": 12, "end": 40},
            {"phase": "paused", "variant": "b", "by": "a", "start": 30, "end": 35},
            {"phase": "task", "variant": "a", "task": "latency", "start": 30, "end": 35}]
    t = decision_wall.phase_table(rows, wall_run=50, run_start=-5)
    assert t["starts"] == {"wall_s": 10, "sum_s": 17, "n": 2}
    assert t["mmlu"]["wall_s"] == 30 and t["mmlu"]["sum_s"] == 48 and t["mmlu"]["paused_s"] == 5
    assert t["latency"]["paused_s"] == 0
    assert t["other"]["wall_s"] == 50 - 40  # the run's wall outside every span


def test_extra_run_arguments_come_after_a_double_dash():
    args = decision_wall.parse_args(["c.yaml", "-V", "a", "--", "--stop", "decided"])
    assert args.variants == ["a"] and args.run_args == ["--stop", "decided"]
    assert decision_wall.parse_args(["c.yaml"]).run_args == []


def test_the_whole_decision_on_the_fake_engine(tmp_path, tiny_model, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({
        "model": {"path": str(tiny_model)}, "engine": {"mode": "fake", "batch_size": 4},
        "defaults": {"max_model_len": 2048, "engine_args": {"kv_cache_memory_bytes": 2**26}},
        "variants": {"bf16": {}, "kv_fp8": {"kv_cache_dtype": "fp8"}}, "baseline": "bf16",
        "tasks": [{"type": "mmlu", "subjects": ["abstract_algebra"], "limit_per_subject": 8, "num_fewshot": 0},
                  {"type": "needle", "lengths": [256], "depths": [0.0, 1.0]}],
        "latency": {"prompt_tokens": [32], "output_tokens": 4, "repeats": 2}}))
    # the "before" alone: the same config on this repository's committed code, extracted from its history
    full = tmp_path / "full"
    assert decision_wall.main([str(config), "--work-dir", str(full), "--before-only", "--before-ref", "HEAD"]) == 0
    out = capsys.readouterr().out
    result = out.strip().splitlines()[-1]
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).parent).stdout.strip()
    assert result.startswith("RESULT bench=decision_wall variants=2 items=full stop=full wall_s=")
    assert " answered=20 " in result and f" code=before@{head[:12]} " in result
    if nvml_missing():  # no card here: said, never a made-up share
        assert " gpu_idle_frac=nan before_s=nan " in result and " run_gpu_idle_frac=nan " in result
        assert f"GPU idle over the bench's wall: not sampled ({nvml_missing()})" in out
    for phase in ("items:", "starts:", "mmlu:", "needle:", "latency:", "closes:", "other:", "report:"):
        assert phase in result
    (run_dir,) = [p for p in (full / "before" / "runs").iterdir() if (p / "run.json").exists()]
    assert json.loads((run_dir / "env.json").read_text())["evalsuite_commit"] == head
    (tmp_path / "before.log").write_text(out)
    # the current code, set against that run's items and verdicts and its wall as before_s
    assert decision_wall.main([str(config), "--work-dir", str(tmp_path / "again"), "--full", str(run_dir),
                               "--before-log", str(tmp_path / "before.log")]) == 0
    out = capsys.readouterr().out
    after = out.strip().splitlines()[-1]
    assert "items_full=20 items_share=1.000 verdicts_match=1" in after and " code=current " in after
    assert decision_wall.result_fields(after)["before_s"] == decision_wall.result_fields(result)["wall_s"]
    assert "verdict kv_fp8:" in out


def test_run_flags_are_read_from_the_arguments_after_the_double_dash():
    assert decision_wall.flag(["--stop", "decided", "--limit=30"], "--stop", "full") == "decided"
    assert decision_wall.flag(["--stop", "decided", "--limit=30"], "--limit", "") == "30"
    assert decision_wall.flag([], "--stop", "full") == "full"


def test_gpu_idle_within_phases_weights_each_span_and_card():
    # card 0 busy 0-10 s then idle to 20 s; card 1 idle throughout; readings each second
    readings = {"0": [(float(t), 100.0 if t <= 10 else 0.0) for t in range(1, 21)],
                "1": [(float(t), 0.0) for t in range(1, 21)]}
    assert decision_wall.idle_within(readings, [(0, 10)]) == 0.5  # card 0 busy, card 1 idle
    assert decision_wall.idle_within(readings, [(5, 15), (0, 10)]) == (5 / 15 + 1) / 2  # the union, 0-15
    assert decision_wall.merged([(0, 2), (1, 3), (5, 6)]) == [(0, 3), (5, 6)]
    assert str(decision_wall.idle_within({}, [(0, 1)])) == "nan"


def test_before_s_from_an_earlier_before_only_runs_log_must_be_the_same_decision(tmp_path):
    import pytest

    log = tmp_path / "bench.log"
    log.write_text("phase ...\nRESULT bench=decision_wall variants=8 items=full stop=decided wall_s=1045.2 "
                   "gpu_idle_frac=0.1900 before_s=nan all_ok=1 code=before@5b522763abcd\n")
    found = decision_wall.logged_before(log, {"variants": "8", "items": "full", "stop": "decided"})
    assert found["wall_s"] == "1045.2" and found["gpu_idle_frac"] == "0.1900"
    with pytest.raises(SystemExit) as e:
        decision_wall.logged_before(log, {"variants": "8", "items": "limit30", "stop": "decided"})
    assert "not the same decision (items full there, limit30 here)" in str(e.value)
    log.write_text(log.read_text().replace("code=before@5b522763abcd", "code=current"))
    with pytest.raises(SystemExit) as e:
        decision_wall.logged_before(log, {})
    assert "no RESULT line of a --before-only run" in str(e.value)
    with pytest.raises(SystemExit):
        decision_wall.parse_args(["c.yaml", "--before-only"])


def test_a_before_ref_that_is_no_commit_is_one_line(tmp_path, capsys):
    import pytest

    args = decision_wall.parse_args(["c.yaml", "--before-ref", "no-such-ref-xyz"])
    with pytest.raises(SystemExit) as e:
        decision_wall.before_tree(args, tmp_path)
    assert "--before-ref no-such-ref-xyz:" in str(e.value) and "allowed: a commit" in str(e.value)
    args = decision_wall.parse_args(["c.yaml", "--before-src", str(tmp_path)])
    with pytest.raises(SystemExit) as e:
        decision_wall.before_tree(args, tmp_path)
    assert "no evalsuite package" in str(e.value)


def test_a_run_that_fails_says_why_and_no_result(tmp_path, tiny_model, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"model": {"path": str(tiny_model)}, "engine": {"mode": "fake"},
                                      "variants": {"a": {}}, "tasks": [{"type": "needle", "lengths": [256]}]}))
    assert decision_wall.main([str(config), "--work-dir", str(tmp_path / "w"), "--", "--no-such-flag"]) == 2
    assert "RESULT" not in capsys.readouterr().out
