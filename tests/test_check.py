"""`evalsuite check` on synthetic run folders and the planner: verdicts, numbers, intervals, exit codes."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from evalsuite.check import evaluate as ev
from evalsuite.check.runs import NotMeasurable, open_run
from evalsuite.check.schema import load_claims
from evalsuite.cli.main import app
from evalsuite.core.rundir import RunDir
from evalsuite.core.types import EngineStats, Metric, RunRecord, Score, VariantResult
from evalsuite.stats import metrics as M
from evalsuite.stats.strata import mean_stderr

REPO = Path(__file__).resolve().parent.parent
SHIPPED = REPO / "configs" / "claims" / "long-context-128k.yaml"
LLAMA2 = REPO / "configs" / "models" / "llama-2-7b.json"
LLAMA31 = REPO / "configs" / "models" / "llama-3.1-8b.json"
runner = CliRunner()


def build_run(root: Path, run_id: str, variants: dict[str, dict], n: int = 200) -> Path:
    """Spec keys: wrong (MMLU item indices scored 0), status, reason, metrics (name -> value), engine (fields)."""
    rd = RunDir(root / run_id)
    rd.write_config({"model": {"hub": "org/tiny"}, "variants": {v: {} for v in variants},
                     "latency": {"prompt_tokens": [4096], "output_tokens": 8, "repeats": 3}})
    record = RunRecord(run_id=run_id, model="tiny", config_path=f"configs/{run_id.split('-', 2)[2]}.yaml")
    for name, spec in variants.items():
        result = VariantResult(variant=name, status=spec.get("status", "ok"), reason=spec.get("reason"))
        if result.status == "ok":
            wrong = set(spec.get("wrong", ()))
            scores = [Score(sample_id=f"q{i}", task="mmlu", value=0.0 if i in wrong else 1.0, pred="A", target="A",
                            group="math" if i % 2 else "law") for i in range(n)]
            rd.append_samples(name, "mmlu", [{"sample": {"id": s.sample_id}, "completion": {}, "score": s.model_dump()}
                                             for s in scores])
            result.metrics = [M.accuracy(scores, "mmlu/acc"),
                              *(metric(k, v) for k, v in spec.get("metrics", {}).items())]
            result.engine = EngineStats(**spec.get("engine", {}))
        rd.write_result(result)
        record.variants.append(result)
    rd.write_run(record)
    return rd.root


def metric(name: str, v) -> Metric:
    """A recorded metric from a value, or from (value, stderr, n)."""
    value, stderr, n = v if isinstance(v, tuple) else (v, None, 3)
    return Metric(name=name, value=value, stderr=stderr, n=n)


def write_claims(tmp: Path, claims: list[dict], **top) -> Path:
    path = tmp / "claims.yaml"
    path.write_text(yaml.safe_dump({"claims": claims, **top}, sort_keys=False))
    return path


def claim(cid: str, *checks: dict) -> dict:
    return {"id": cid, "text": f"claim {cid}", "where": "a blog post", "checks": list(checks)}


@pytest.fixture
def runs(tmp_path) -> list[Path]:
    a = build_run(tmp_path / "runs", "20260101-000000-shape", {
        "defaults": {"metrics": {"latency/ttft_ms_p50/ctx130000": 1000.0, "latency/ttft_ms_p50": 300.0},
                     "engine": {"required_gib": 34.0, "kv_cache_tokens": 914_304, "num_preemptions": 0}},
        "block32": {"metrics": {"latency/ttft_ms_p50/ctx130000": 900.0},
                    "engine": {"required_gib": 34.1, "kv_cache_tokens": 914_304}},
        "fp8": {"wrong": range(10), "engine": {"required_gib": 27.5}},
        "broken": {"status": "skipped", "reason": "no FP8 kernel on this CPU"},
    })
    b = build_run(tmp_path / "runs", "20260102-000000-qwen", {"bf16": {}, "fp8": {"wrong": range(10)}})
    return [a, b]


def check(*args: str):
    return runner.invoke(app, ["check", *map(str, args)])


TTFT_HELD = {"what": "TTFT at 128K, block 32 vs 16", "metric": "latency/ttft_ms_p50@130000",
             "baseline": "shape:defaults", "candidate": "shape:block32",
             "effect": {"kind": "change_pct", "equals": -8.3, "tolerance": 4}}
MMLU_NOT_HELD = {"what": "MMLU, fp8 vs bf16", "metric": "mmlu/acc", "baseline": "qwen:bf16", "candidate": "qwen:fp8",
                 "effect": {"kind": "points", "above": -0.3}}
MISSING = {"what": "ITL", "metric": "latency/itl_ms_p50@130000", "baseline": "shape:defaults",
           "candidate": "shape:block32", "effect": {"kind": "change_pct", "below": 0}}


def test_held_not_held_not_measurable(tmp_path, runs):
    claims = write_claims(tmp_path, [claim("3", TTFT_HELD), claim("5", MMLU_NOT_HELD), claim("8", MISSING)])
    out = tmp_path / "report.json"
    res = check(claims, *runs, "--json", out)
    assert res.exit_code == 1, res.output
    rep = json.loads(out.read_text())
    verdicts = {c["id"]: c["verdict"] for c in rep["claims"]}
    assert verdicts == {"3": "held", "5": "not held", "8": "not measurable"}
    assert rep["summary"] == {"held": 1, "not held": 1, "not measurable": 1}
    held, not_held, missing = (c["checks"][0] for c in rep["claims"])
    assert held["measured"] == pytest.approx(-10.0) and held["unit"] == "%"
    assert [s["label"] for s in held["sides"]] == ["20260101-000000-shape:defaults", "20260101-000000-shape:block32"]
    assert not_held["measured"] == pytest.approx(-5.0) and not_held["unit"] == "pt"
    iv = not_held["interval"]
    assert iv["high"] < -0.3 and iv["low"] < -5.0 < iv["high"]
    assert "paired over 200 items: exact unconditional test on Tango's statistic; exact McNemar" in iv["method"]  # gate's and compare's test
    assert iv["p_value"] == pytest.approx(2 * 0.5**10)  # exact McNemar: 10 discordant pairs, all one way
    assert "has no metric latency/itl_ms_p50@130000" not in missing["detail"]
    assert "no metric latency/itl_ms_p50/ctx130000" in missing["detail"]
    assert res.output.startswith("## evalsuite check: 1 held · 1 not held · 1 not measurable")


def test_exit_0_when_nothing_is_contradicted(tmp_path, runs):
    claims = write_claims(tmp_path, [claim("3", TTFT_HELD), claim("8", MISSING)])
    res = check(claims, *runs)
    assert res.exit_code == 0, res.output
    assert "✅ held" in res.output and "➖ not measurable" in res.output


def test_planner_answers_claims_1_and_4_without_a_run(tmp_path):
    per_token = {"what": "KV per token", "source": "planner", "model": str(LLAMA2), "metric": "kv_bytes_per_token",
                 "effect": {"kind": "value", "equals": 2.0e6, "tolerance_pct": 25}}
    request = {**per_token, "what": "KV of a 128K request", "metric": "kv_gib_per_request",
               "settings": {"max_model_len": 131072}, "effect": {"kind": "value", "equals": 0.2384, "tolerance_pct": 25}}
    seqs = {"what": "KV of 16 x 128K", "source": "planner", "model": str(LLAMA31), "metric": "kv_gib_all_seqs",
            "settings": {"max_model_len": 131072, "max_num_seqs": 16},
            "effect": {"kind": "value", "equals": 3.725, "tolerance_pct": 25}}
    per_token_8b = {**seqs, "what": "8B per token", "metric": "kv_bytes_per_token",
                    "effect": {"kind": "value", "equals": 131072}}
    claims = write_claims(tmp_path, [claim("1", per_token, request), claim("4", seqs, per_token_8b)])
    out = tmp_path / "r.json"
    res = check(claims, "--json", out)
    assert res.exit_code == 1, res.output
    (c1, c4) = json.loads(out.read_text())["claims"]
    assert c1["verdict"] == c4["verdict"] == "not held"
    assert c1["checks"][0]["measured"] == 524_288  # 2 x 32 layers x 32 KV heads x 128 x 2 bytes = 512 KiB
    assert c1["checks"][0]["unit"] == "bytes"
    assert c1["checks"][1]["measured"] == 64.0  # 512 KiB x 131,072 tokens = 64 GiB, not 256 MB
    assert c4["checks"][0]["measured"] == 256.0  # 128 KiB x 131,072 x 16 = 256 GiB, not 4 GB
    assert c4["checks"][1]["verdict"] == "held" and c4["checks"][1]["measured"] == 131_072


def test_shipped_claims_file(monkeypatch):
    """Every claim of the issue is there; without runs the planner still answers 1, 2 and 4."""
    def no_vllm(ctx, check):
        raise NotMeasurable("vLLM not imported in this test")

    monkeypatch.setattr(ev, "measure_vllm_default", no_vllm)
    spec = load_claims(SHIPPED)
    assert [c.id for c in spec.claims] == [str(i) for i in range(1, 12)]
    results = {r.claim.id: r for r in ev.evaluate(spec, SHIPPED.parent, [])}
    assert results["1"].verdict == results["2"].verdict == results["4"].verdict == "not held"
    assert [c.measured for c in results["1"].checks] == [524_288, 64.0]
    assert results["4"].checks[0].measured == 256.0
    assert results["2"].checks[1].measured == pytest.approx(1.84, abs=0.01)  # 128K over 4K, not 3.99
    assert "not a setting vLLM has: kv_cache_dtype" in results["6"].checks[0].detail
    int4 = next(c for c in results["6"].checks if "int4_per_token_head" in c.what)  # 68 of 256 bytes a head
    assert int4.measured == pytest.approx(68 / 256) and int4.verdict == "held"
    assert results["10"].verdict == "not measurable" and results["10"].claim.why
    tp = [c for c in results["11"].checks if "TP=4" in c.what]
    assert tp and all("h200x4-llama8b-tp" in c.detail for c in tp)


def test_not_measurable_reasons(tmp_path, runs):
    few = {"what": "few items", "metric": "mmlu/acc", "variant": "qwen:bf16", "effect": {"kind": "value", "above": 0.5}}
    skipped = {"what": "skipped variant", "metric": "engine/required_gib", "variant": "shape:broken",
               "effect": {"kind": "value", "below": 10}}
    ambiguous = {"what": "plain fp8", "metric": "mmlu/acc", "variant": "fp8", "effect": {"kind": "value", "above": 0.5}}
    no_engine = {"what": "no stat", "metric": "engine/num_preemptions", "variant": "shape:block32",
                 "effect": {"kind": "value", "above": 0}}
    unmet = {**no_engine, "what": "precondition", "variant": "shape:defaults",
             "given": [{"what": "over capacity", "metric": "engine/kv_cache_tokens", "variant": "shape:defaults",
                        "effect": {"kind": "value", "above": 1e7}}]}
    claims = write_claims(tmp_path, [claim("a", few), claim("b", skipped), claim("c", ambiguous), claim("d", no_engine),
                                     claim("e", unmet)], min_n=500)
    out = tmp_path / "r.json"
    assert check(claims, *runs, "--json", out).exit_code == 0
    why = [c["checks"][0]["detail"] for c in json.loads(out.read_text())["claims"]]
    assert "insufficient n: " in why[0] and "n=200 < min_n 500" in why[0]
    assert "is skipped: no FP8 kernel on this CPU" in why[1]
    assert "runs of different configs" in why[2] and "run:fp8" in why[2]
    assert "the engine did not report num_preemptions" in why[3]
    assert why[4].startswith("precondition not met (over capacity: 914,304 tokens, needs value > 10,000,000)")


def test_interval_that_straddles_the_claim_is_insufficient_n(tmp_path, runs):
    loose = {**MMLU_NOT_HELD, "effect": {"kind": "points", "above": -6}}  # -5 pt, interval reaches below -6
    claims = write_claims(tmp_path, [claim("5", loose)])
    out = tmp_path / "r.json"
    assert check(claims, *runs, "--json", out).exit_code == 0
    c = json.loads(out.read_text())["claims"][0]["checks"][0]
    assert c["verdict"] == "not measurable" and c["detail"].startswith("insufficient n: the 95% interval")
    est = write_claims(tmp_path, [claim("5", loose)], decide_on="estimate")
    assert check(est, *runs).exit_code == 0
    assert "✅ held" in check(est, *runs).output


def test_single_accuracy_gets_a_wilson_interval(tmp_path, runs):
    acc = {"what": "fp8 accuracy", "metric": "mmlu/acc", "variant": "qwen:fp8",
           "effect": {"kind": "value", "between": [0.9, 1.0]}}
    out = tmp_path / "r.json"
    check(write_claims(tmp_path, [claim("x", acc)]), *runs, "--json", out)
    c = json.loads(out.read_text())["claims"][0]["checks"][0]
    p, n, z = 0.95, 200, 1.959963984540054  # Wilson score interval, by hand
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    assert c["interval"]["low"] == pytest.approx(centre - half) and c["interval"]["high"] == pytest.approx(centre + half)
    assert c["interval"]["method"].startswith("Wilson") and c["verdict"] == "held"  # 0.910..0.973 within 0.9..1


def test_single_length_run_reads_the_pooled_latency_key(tmp_path, runs):
    pooled = {"what": "TTFT at 4K", "metric": "latency/ttft_ms_p50@4096", "variant": "shape:defaults",
              "effect": {"kind": "value", "below": 500}}
    out = tmp_path / "r.json"
    assert check(write_claims(tmp_path, [claim("x", pooled)]), *runs, "--json", out).exit_code == 0
    c = json.loads(out.read_text())["claims"][0]["checks"][0]
    assert c["verdict"] == "held" and c["measured"] == 300.0 and c["unit"] == "ms"


@pytest.mark.parametrize("mutate, expected", [
    (lambda c: c["checks"][0].update(effekt=1), "claims.0.checks.0.effekt: unknown key (allowed:"),
    (lambda c: c["checks"][0]["effect"].update(kind="ratioo"),
     "claims.0.checks.0.effect.kind: Input should be 'ratio', 'change_pct', 'difference', 'points' or 'value', got 'ratioo'"),
    (lambda c: c["checks"][0].update(metric="engine/kv_tokens"), "'kv_tokens' is not an engine stat; allowed: startup_s"),
    (lambda c: c["checks"][0]["effect"].update(above=1), "give exactly one of equals, between, above, below"),
    (lambda c: c["checks"][0].update(requires={"kv_dtype": "int2"}), "unknown engine setting kv_dtype; allowed: model"),
    (lambda c: c["checks"][0].update(source="planner", settings={"gpu": "H300"}),
     "claims.0.checks.0.settings.gpu: unknown device 'H300' (allowed: H200, H100-SXM,"),
])
def test_bad_claims_file_is_one_line_exit_2(tmp_path, runs, mutate, expected):
    c = claim("3", dict(TTFT_HELD, effect=dict(TTFT_HELD["effect"])))
    mutate(c)
    res = check(write_claims(tmp_path, [c]), *runs)
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.output
    assert lines[0].startswith(f"evalsuite: error: {tmp_path / 'claims.yaml'}: ") and expected in lines[0]


def test_bad_run_folder_and_bad_yaml_exit_2(tmp_path, runs):
    claims = write_claims(tmp_path, [claim("3", TTFT_HELD)])
    res = check(claims, tmp_path / "nope")
    assert res.exit_code == 2 and "not a run folder (no run.json)" in res.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("claims: [\n")
    res = check(bad)
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1 and "invalid YAML" in res.output


def test_a_comparison_is_made_within_the_newest_run_holding_both_variants(tmp_path, runs):
    """A later run of the config that holds only block32 does not pair with the older run's defaults
    (a timing moves with the machine and the day); once a later run holds both, it is the one read."""
    later = build_run(tmp_path / "runs", "20260103-000000-shape", {
        "block32": {"metrics": {"latency/ttft_ms_p50/ctx130000": 950.0}}})
    out = tmp_path / "r.json"
    claims = write_claims(tmp_path, [claim("3", TTFT_HELD)])
    check(claims, *runs, later, "--json", out)
    c = json.loads(out.read_text())["claims"][0]["checks"][0]
    assert [s["label"] for s in c["sides"]] == ["20260101-000000-shape:defaults", "20260101-000000-shape:block32"]
    assert c["measured"] == pytest.approx(-10.0)
    both = build_run(tmp_path / "runs", "20260104-000000-shape", {
        "defaults": {"metrics": {"latency/ttft_ms_p50/ctx130000": 1000.0}},
        "block32": {"metrics": {"latency/ttft_ms_p50/ctx130000": 950.0}}})
    check(claims, *runs, later, both, "--json", out)
    c = json.loads(out.read_text())["claims"][0]["checks"][0]
    assert [s["label"] for s in c["sides"]] == ["20260104-000000-shape:defaults", "20260104-000000-shape:block32"]
    assert c["measured"] == pytest.approx(-5.0)


def test_without_a_run_holding_both_each_side_is_its_latest(tmp_path, runs):
    only = build_run(tmp_path / "runs", "20260103-000000-shape", {
        "mnbt65536": {"metrics": {"latency/ttft_ms_p50/ctx130000": 960.0}}})
    out = tmp_path / "r.json"
    ttft = dict(TTFT_HELD, candidate="shape:mnbt65536", effect={"kind": "change_pct", "below": -3})
    check(write_claims(tmp_path, [claim("8", ttft)]), *runs, only, "--json", out)
    c = json.loads(out.read_text())["claims"][0]["checks"][0]
    assert [s["label"] for s in c["sides"]] == ["20260101-000000-shape:defaults", "20260103-000000-shape:mnbt65536"]
    assert c["verdict"] == "held" and c["measured"] == pytest.approx(-4.0)


def test_check_writes_nothing_but_its_reports(tmp_path, runs, monkeypatch):
    monkeypatch.chdir(tmp_path)
    claims = write_claims(tmp_path, [claim("3", TTFT_HELD), claim("5", MMLU_NOT_HELD)])
    before = sorted(p for p in tmp_path.rglob("*"))
    check(claims, *runs)
    after = sorted(p for p in tmp_path.rglob("*"))
    assert [p for p in after if p not in before] == []
    assert open_run(runs[0]).results["fp8"].engine.required_gib == 27.5


def test_stratified_scores_bootstrap_the_metrics_own_aggregate():
    """legal/balanced_acc (mean over tasks of per-label recall) and acc_macro are recomputed from the items;
    a recorded value the items do not reproduce falls back to the recorded standard errors."""
    import random

    from evalsuite.check import stats
    from evalsuite.tasks.balanced import mean_over_tasks

    rng = random.Random(1)
    rows = [("t1" if i % 3 else "t2", "Yes" if i % 4 else "No") for i in range(300)]

    def variant(p):
        scores = [Score(sample_id=f"s{i}", task="legal", value=float(rng.random() < p), pred="", target=t, group=g)
                  for i, (g, t) in enumerate(rows)]
        items = {s.sample_id: {"value": s.value, "group": s.group, "target": s.target, "labels": {s.group}} for s in scores}
        per_task = [M.balanced_accuracy(g, f"legal/balanced_acc/{t}") for t, g in M.by_group(scores).items()]
        balanced = mean_over_tasks(per_task, "legal/balanced_acc")
        return items, balanced, M.macro_accuracy(M.by_group(scores), "legal/acc_macro"), M.accuracy(scores, "legal/acc")

    (b, bal, mac, acc), (c, c_bal_m, c_mac_m, _) = variant(0.8), variant(0.7)
    b_bal, c_bal, b_mac, c_mac = bal.value, c_bal_m.value, mac.value, c_mac_m.value
    iv = stats.paired_interval(b, c, bal, (b_bal, c_bal), 0.95)
    # balanced accuracy weighs items by task and label: an item-count McNemar p would test another metric
    assert iv is not None and iv.p_value is None
    assert "paired over 300 items: Tango score bounds within 4 strata, combined by MOVER" in iv.method
    assert "McNemar" not in iv.method
    plain = stats.paired_interval(b, c, acc, (np.mean([v["value"] for v in b.values()]),
                                                      np.mean([v["value"] for v in c.values()])), 0.95)
    assert plain is not None and plain.p_value is not None and "exact McNemar" in plain.method
    assert iv.low < c_bal - b_bal < iv.high
    assert stats.paired_interval(b, c, mac, (b_mac, c_mac), 0.95) is not None
    assert stats.paired_interval(b, c, bal, (b_bal + 0.01, c_bal), 0.95) is None
    one = stats.single_interval(c, bal, c_bal, 0.95)
    assert one is not None and one.method.startswith("normal over 4 fixed strata") and one.low < c_bal < one.high


def test_welch_interval_is_scipys_on_the_raw_repeats():
    from scipy.stats import ttest_ind

    from evalsuite.stats import timing
    from evalsuite.stats.strata import mean_stderr

    a, b = [10_280.0, 10_291.0, 10_303.0], [10_270.0, 10_301.0, 10_269.0, 10_288.0]
    (ma, sa), (mb, sb) = mean_stderr(a), mean_stderr(b)
    iv = timing.welch_interval("difference", Metric(name="x", value=ma, stderr=sa, n=3),
                              Metric(name="x", value=mb, stderr=sb, n=4), 0.95)
    ref = ttest_ind(b, a, equal_var=False).confidence_interval(0.95)
    assert (iv.low, iv.high) == (pytest.approx(ref.low), pytest.approx(ref.high))
    pct = timing.welch_interval("change_pct", Metric(name="x", value=ma, stderr=sa, n=3),
                               Metric(name="x", value=mb, stderr=sb, n=4), 0.95)
    assert pct.low == pytest.approx(ref.low / ma * 100) and pct.high == pytest.approx(ref.high / ma * 100)
    assert timing.welch_interval("ratio", Metric(name="x", value=ma, stderr=None, n=1),
                                Metric(name="x", value=mb, stderr=sb, n=4), 0.95) is None


@pytest.mark.parametrize("cand_mean, cand_se, verdict", [
    (900.0, 2.0, "held"),              # -10% +- ~1%: inside -8.3 +- 4
    (995.0, 2.0, "not held"),          # -0.5% +- ~1%: outside
    (930.0, 60.0, "not measurable"),   # -7% +- ~20%: straddles
])
def test_timing_checks_decide_on_welchs_interval_of_the_means(tmp_path, cand_mean, cand_se, verdict):
    key = "latency/ttft_ms_{}/ctx130000"
    base = {key.format("p50"): 1000.0, key.format("mean"): (1000.0, 2.0, 3)}
    cand = {key.format("p50"): cand_mean, key.format("mean"): (cand_mean, cand_se, 3)}
    run = build_run(tmp_path / "runs", "20260101-000000-shape", {"defaults": {"metrics": base},
                                                                  "block32": {"metrics": cand}})
    out = tmp_path / "r.json"
    check(write_claims(tmp_path, [claim("3", TTFT_HELD)], decide_on="interval"), run, "--json", out)
    c = json.loads(out.read_text())["claims"][0]["checks"][0]
    assert c["verdict"] == verdict, c
    assert "Welch t on the per-request means (" in c["interval"]["method"] and "; n=3 vs 3, df=" in c["interval"]["method"]


def _timed_run(root: Path, ttfts: dict[str, list[float]], ids: dict[str, list[str]] | None = None) -> Path:
    """A run whose variants timed 130,000-token requests (latency samples) with the given TTFTs."""
    rd = RunDir(root / "20260101-000000-shape")
    rd.write_config({"model": {"hub": "org/tiny"}, "variants": {v: {} for v in ttfts},
                     "latency": {"prompt_tokens": [4096, 130000], "output_tokens": 8, "repeats": 3}})
    record = RunRecord(run_id=rd.run_id, model="tiny", config_path="configs/shape.yaml")
    for name, values in ttfts.items():
        keys = (ids or {}).get(name) or [f"len130000-r{i}" for i in range(len(values))]
        rows = [{"sample": {"id": k}, "completion": {},
                 "score": Score(sample_id=k, task="latency", value=1.0, pred="", target="", group="130000",
                                extra={"ttft_ms": v}).model_dump()} for k, v in zip(keys, values)]
        rows.append({"sample": {"id": "len4096-r0"}, "completion": {}, "score": Score(
            sample_id="len4096-r0", task="latency", value=1.0, pred="", target="", group="4096",
            extra={"ttft_ms": 5.0}).model_dump()})
        rd.append_samples(name, "latency", rows)
        mean, se = mean_stderr(values)
        result = VariantResult(variant=name, status="ok", engine=EngineStats(), metrics=[
            Metric(name="latency/ttft_ms_p50/ctx130000", value=float(np.median(values)), n=len(values)),
            Metric(name="latency/ttft_ms_mean/ctx130000", value=mean, stderr=se, n=len(values))])
        rd.write_result(result)
        record.variants.append(result)
    rd.write_run(record)
    return rd.root


def test_timings_of_the_same_requests_are_paired_by_id(tmp_path):
    """Request i of both variants sits at the same place in the batch: the paired interval is scipy's
    ttest_rel on the differences, much narrower than Welch's over requests that differ among themselves."""
    from scipy.stats import ttest_rel

    base, cand = [1000.0, 2000.0, 3000.0, 4000.0], [800.0, 1790.0, 2780.0, 3770.0]
    run = _timed_run(tmp_path, {"defaults": base, "block32": cand})
    out = tmp_path / "r.json"
    check(write_claims(tmp_path, [claim("3", TTFT_HELD)]), run, "--json", out)
    c = json.loads(out.read_text())["claims"][0]["checks"][0]
    ref = ttest_rel(cand, base).confidence_interval(0.95)
    assert c["interval"]["method"] == "paired t on the per-request means (-8.60%), 4 requests matched by id"
    assert c["interval"]["low"] == pytest.approx(ref.low / 2500 * 100)
    assert c["interval"]["high"] == pytest.approx(ref.high / 2500 * 100)
    assert c["verdict"] == "held"  # -8.6% [-9.4, -7.8] (the 4096-token request is not counted)


def test_timings_of_different_requests_fall_back_to_welch(tmp_path):
    run = _timed_run(tmp_path, {"defaults": [1000.0, 2000.0, 3000.0], "block32": [900.0, 1800.0, 2700.0]},
                     ids={"block32": ["len130000-r0", "len130000-r1", "len130000-r9"]})
    out = tmp_path / "r.json"
    check(write_claims(tmp_path, [claim("3", TTFT_HELD)]), run, "--json", out)
    c = json.loads(out.read_text())["claims"][0]["checks"][0]
    assert c["interval"]["method"].startswith("Welch t on the per-request means (-10.00%; n=3 vs 3")
    assert c["verdict"] == "not measurable" and "straddles" in c["detail"]


def test_a_variant_an_interrupted_run_never_started_is_no_holder(tmp_path):
    """A `pending` entry holds nothing: the plain variant name still means the run that measured it,
    not "runs of different configs"."""
    from datetime import datetime, timezone

    from evalsuite.check.runs import Run, find_variant
    from evalsuite.core.rundir import RunDir
    from evalsuite.core.types import RunRecord, VariantResult

    def run(run_id: str, status: str, when: int) -> Run:
        record = RunRecord(run_id=run_id, model="m", created_at=datetime(2026, 1, when, tzinfo=timezone.utc))
        return Run(RunDir(tmp_path / run_id), record, {}, {"fp8": VariantResult(variant="fp8", status=status)})

    measured, cut = run("20260101-000000-a", "ok", 1), run("20260102-000000-b", "pending", 2)
    assert [f.run.run_id for f in find_variant([measured, cut], "fp8")] == ["20260101-000000-a"]


def test_a_vllm_default_claim_prints_only_checks_report(tmp_path):
    """Reading a default imports the installed vLLM, whose import-time warnings (a CPU build finding
    Triton without its CPU backend) must not become lines of check's output."""
    import subprocess
    import sys

    claims = tmp_path / "claims.yaml"
    claims.write_text(yaml.safe_dump({"claims": [{"id": 1, "text": "vLLM reserves 90% of GPU memory by default.",
                                                  "where": "docs", "checks": [{
                                                      "what": "default utilization", "source": "vllm_default",
                                                      "metric": "gpu_memory_utilization",
                                                      "effect": {"kind": "value", "equals": 0.9}}]}]}))
    res = subprocess.run([sys.executable, "-m", "evalsuite", "check", str(claims)], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode in (0, 1) and res.stderr == "", res.stderr
    assert "EngineArgs default" in res.stdout


@pytest.mark.parametrize("mutate, expected", [
    (lambda c: c.update(baseline="shape:defualts"),
     "claims.0.checks.0.baseline.variant: 'shape:defualts': the runs matching 'shape' define no variant 'defualts'; "
     "allowed: shape:block32, shape:broken, shape:defaults, shape:fp8"),
    (lambda c: c.update(given=[{"what": "pre", "metric": "engine/kv_cache_tokens", "variant": "shape:blok32",
                                "effect": {"kind": "value", "above": 1}}]),
     "claims.0.checks.0.given.0.variant: 'shape:blok32': the runs matching 'shape' define no variant 'blok32'"),
])
def test_a_misspelled_variant_of_a_given_run_is_bad_input(tmp_path, runs, mutate, expected):
    """A claim naming a variant that the run it points at never defined would read "not measurable"
    and exit 0: a typo in a claims file must not pass for a missing measurement."""
    c = dict(TTFT_HELD)
    mutate(c)
    res = check(write_claims(tmp_path, [claim("3", c)]), *runs)
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], lines


def test_a_variant_defined_but_not_measured_or_a_run_not_given_stays_not_measurable(tmp_path, runs):
    """Measuring some variants (`-V`) or checking against some runs is not bad input."""
    rd = RunDir(runs[0])
    cfg = rd.read_config()
    cfg["variants"]["block64"] = {}
    rd.write_config(cfg)
    unmeasured = dict(TTFT_HELD, candidate="shape:block64")
    elsewhere = dict(TTFT_HELD, baseline="other:defaults")
    out = tmp_path / "r.json"
    assert check(write_claims(tmp_path, [claim("3", unmeasured), claim("4", elsewhere)]), *runs, "--json", out).exit_code == 0
    why = [c["checks"][0]["detail"] for c in json.loads(out.read_text())["claims"]]
    assert "variant 'block64' is not in runs matching 'shape'" in why[0]
    assert "no run matching 'other' was given" in why[1]


def test_a_vllm_default_that_vllm_lacks_is_bad_input(tmp_path):
    """`vllm_default` reads the installed vLLM's EngineArgs: a name it lacks is a misspelling, said with
    the nearest names, not a claim left unanswered."""
    bad = {"what": "default utilization", "source": "vllm_default", "metric": "gpu_memory_utilisation",
           "effect": {"kind": "value", "equals": 0.9}}
    res = check(write_claims(tmp_path, [claim("1", bad)]))
    assert res.exit_code == 2, res.output
    line = res.output.strip().splitlines()
    assert len(line) == 1 and "claims.0.checks.0.metric: vLLM" in line[0]
    assert "no engine argument 'gpu_memory_utilisation'" in line[0] and "gpu_memory_utilization" in line[0]
    text = {**bad, "metric": "tokenizer_mode"}
    res = check(write_claims(tmp_path, [claim("1", text)]))
    assert res.exit_code == 2 and "no numeric default for the engine argument" in res.output


@pytest.mark.parametrize("timed, why", [
    ({"block32": {"neighbours": "running"}}, "not comparable: the candidate timed beside running engines"),
    ({"defaults": {"warmup": 2}, "block32": {"warmup": 0}},
     "not comparable: timed with other warm-ups (baseline: 2, candidate: 0)"),
    ({"defaults": {"warmup": 2}, "block32": {"warmup": 2}}, None),
])
def test_a_latency_claim_between_passes_not_timed_alike_is_not_comparable(tmp_path, timed, why):
    """The gate's rule (core.types.timing_unlike): block32's -8.6%, measured beside running engines or
    after another warm-up, measures the conditions as much as the block size; check said "held"."""
    from evalsuite.core.types import TimingCondition

    run = _timed_run(tmp_path, {"defaults": [1000.0, 2000.0, 3000.0, 4000.0],
                                "block32": [800.0, 1790.0, 2780.0, 3770.0]})
    rd = RunDir(run)
    record = rd.load_run()
    for v in record.variants:
        v.timing = TimingCondition(**timed.get(v.variant, {}))
        rd.write_result(v)
    rd.write_run(record)
    out = tmp_path / "r.json"
    res = check(write_claims(tmp_path, [claim("3", TTFT_HELD)]), run, "--json", out)
    c = json.loads(out.read_text())["claims"][0]["checks"][0]
    if why is None:  # timed alike: the paired interval decides, as before
        assert c["verdict"] == "held" and res.exit_code == 0, c
    else:
        assert c["verdict"] == "not measurable" and c["detail"] == why and c["interval"] is None, c
        assert c["measured"] == pytest.approx(-8.6) and res.exit_code == 0  # the number shown, not judged
