"""bench/latency_isolation.py: every phase on the fake engine (configs, resumable parts, the report),
the report's arithmetic on saved parts, and the packed phase on the real CPU engine, where two
identical variants are timed packed, one of them with its neighbour paused in the middle of its long
requests: the record says so, and the control's latency checks are not failed (the benches measure
the figures; a test does not time)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import latency_isolation as li  # noqa: E402

IDLE = {"neighbours": "none", "idle": "nvml", "idle_ok": True, "drain_s": 0.0, "warmup": 2, "repeats": 5,
        "engine": "offline", "device": "NVIDIA H100 80GB HBM3"}
PAUSED = {**IDLE, "neighbours": "paused", "drain_s": 0.84,
          "paused": {"busy": {"task": "needle", "requests": 3, "longest_prompt": 32000}}}


def _variant(ttft: float, itl: float, timing: dict) -> dict:
    spread = [0.98, 0.99, 1.0, 1.01, 1.02]
    return {"status": "ok", "timing": timing, "host_load": None,
            "requests": {"ttft_ms": {"1024": [ttft * f for f in spread]}, "itl_ms": {"1024": [itl * f for f in spread]}}}


def _part(work: Path, phase: str, k: int, variants: dict, checks: list[dict]) -> None:
    (work / "parts").mkdir(parents=True, exist_ok=True)
    (work / "parts" / f"{phase}-{k}.json").write_text(json.dumps({
        "phase": phase, "run": k, "dir": "-", "wall_s": 1.0, "baseline": "bf16", "control": "bf16_repeat",
        "control_checks": checks, "variants": variants}))


def test_the_report_sets_each_packed_run_against_the_alone_one(tmp_path, capsys):
    ok = [{"metric": "latency/itl_ms_p50/ctx1024", "status": "pass", "change": 3.0, "low": 1.0, "high": 5.0,
           "detail": "growth +3.0%"}]
    for k, fp8_itl in ((1, 2.0), (2, 2.1)):
        _part(tmp_path, "packed", k, {"bf16": _variant(20.0, 2.3, PAUSED), "bf16_repeat": _variant(20.5, 2.37, PAUSED),
                                      "fp8": _variant(18.0, fp8_itl, PAUSED)}, ok)
    _part(tmp_path, "stop", 1, {"bf16": _variant(20.0, 2.3, IDLE), "bf16_repeat": _variant(20.0, 2.3, PAUSED),
                                "fp8": _variant(18.0, 2.0, {**PAUSED, "idle": None, "idle_ok": None})},
          [{**ok[0], "status": "warn", "change": -12.0}])
    _part(tmp_path, "alone", 1, {n: _variant(20.0 if n != "fp8" else 18.0, 2.3 if n != "fp8" else 2.0, IDLE)
                                 for n in ("bf16", "bf16_repeat", "fp8")}, [])
    line = li.report(tmp_path, ["bf16", "bf16_repeat", "fp8"], 32000, "bf16", "bf16_repeat")
    out = capsys.readouterr().out
    assert line.startswith("RESULT bench=latency_isolation variants=3 control_max_change_pct=12.0 "
                           "packed_vs_alone_max_pct=5.0 runs=3 control_passed=2/3 not_comparable=2 ")
    assert line.endswith("busy_prefill_tokens=32000 timed_beside_long=8 target_met=False")
    assert "packed-2 fp8 itl_ms @1024: packed 2.10 vs alone 2.00: +5.0%" in out
    assert "stop-1 fp8 ttft_ms @1024: not comparable (the candidate neighbours paused but the device not " \
           "verified idle" in out
    assert "packed-1: bf16 timed with busy paused mid-needle (3 request(s) in flight, up to 32,000 prompt tokens), " \
           "the device idle after 0.84 s (nvml)" in out


def test_every_phase_on_the_fake_engine_resumable_by_part(tmp_path, tiny_model, capsys, monkeypatch):
    from typer.testing import CliRunner

    from evalsuite.cli.main import app

    def in_process(argv: list[str]) -> tuple[int, str]:
        res = CliRunner().invoke(app, argv)
        return res.exit_code, res.output

    monkeypatch.setattr(li, "EVALSUITE", in_process)  # the runs as the bench asks for them, without a new Python
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({
        "model": {"path": str(tiny_model)}, "engine": {"mode": "fake", "batch_size": 2},
        "defaults": {"max_model_len": 2048, "engine_args": {"kv_cache_memory_bytes": 2**26}},
        "variants": {"busy": {}, "bf16": {}, "bf16_repeat": {}}, "baseline": "bf16", "controls": ["bf16_repeat"],
        "tasks": [{"type": "needle", "lengths": [256], "depths": [0.0, 0.5, 1.0]}],
        "latency": {"prompt_tokens": [32, 64], "output_tokens": 4, "repeats": 3, "warmup": 1},
        "timing": {"quiet": "pause"}, "tracking": {"enabled": False}}))
    work = tmp_path / "w"
    assert li.main([str(config), "-w", str(work), "--phase", "packed", "--busy", "busy"]) == 0
    assert li.main([str(config), "-w", str(work), "--busy", "busy"]) == 0  # the phases left, then the report
    result = capsys.readouterr().out.strip().splitlines()[-1]
    assert result.startswith("RESULT bench=latency_isolation variants=2 ") and " runs=3 " in result
    assert sorted(p.name for p in (work / "parts").iterdir()) == ["alone-1.json", "packed-1.json", "packed-2.json",
                                                                "stop-1.json"]
    alone = json.loads((work / "parts" / "alone-1.json").read_text())
    assert sorted(alone["variants"]) == ["bf16", "bf16_repeat"]  # the busy neighbour is not measured
    assert all(v["timing"]["neighbours"] == "none" and set(v["requests"]["ttft_ms"]) == {"32", "64"}
               for v in alone["variants"].values())
    (run,) = [p for p in (work / "alone-1").iterdir() if (p / "run.json").exists()]
    assert not list(run.glob("*/samples/needle.jsonl"))  # latency only
    assert li.run_phase(config, work, "alone", ["busy"]) is None  # saved: not run again
    assert not list(config.parent.glob(".c-latency_isolation-*"))


@pytest.mark.engine
def test_two_identical_variants_packed_agree_with_a_neighbour_paused_mid_request(tmp_path, tiny_model, capsys):
    """bf16 and its repeat packed on the CPU engine, every engine on every core: whichever ends its
    needle cells first times its pass with the other paused mid-batch of 1,000-token prompts, its
    processes found still (no CPU time) before the warm-up. The gate then sets the control against the
    baseline through the interval of its repeats: never a failure (on a loaded host: not comparable)."""
    work = tmp_path / "w"
    assert li.main(["--demo", "--model", str(tiny_model), "-w", str(work), "--phase", "packed"]) == 0
    assert li.main(["--demo", "--model", str(tiny_model), "-w", str(work), "--report", "--long", "900"]) == 0
    out = capsys.readouterr().out
    result = out.strip().splitlines()[-1]
    assert result.startswith("RESULT bench=latency_isolation variants=2 control_max_change_pct=") and " runs=1 " in result
    part = json.loads((work / "parts" / "packed-1.json").read_text())
    timings = {n: v["timing"] for n, v in part["variants"].items()}
    busy = [(n, t) for n, t in timings.items() if any(f["requests"] for f in t["paused"].values())]
    assert busy, timings  # one pass had its neighbour mid-request
    name, t = busy[0]
    (flight,) = t["paused"].values()
    assert flight["task"] == "needle" and flight["longest_prompt"] > 900
    assert t["neighbours"] == "paused" and t["idle"] == "cpu_time" and t["idle_ok"] is True and t["warmup"] == 2
    assert "timed_beside_long=0" not in result and f"{name} timed with " in out
    checks = part["control_checks"]
    assert checks and all(c["status"] != "fail" for c in checks), checks
    assert all(c["status"] != "skip" or c["detail"].startswith("not comparable") for c in checks)
