"""`evalsuite finish`: an interrupted run's recorded samples become a `partial` variant that
compare and gate read, with no engine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from evalsuite.core.rundir import RunDir
from evalsuite.core.types import HostLoad, RunRecord, Score, VariantResult
from evalsuite.run.finish import NOT_STARTED, finish_run

REPO = Path(__file__).resolve().parent.parent


def interrupted_run(root: Path, wrong: set[int], recorded: int = 150) -> Path:
    """Two variants: bf16 interrupted after its mmlu and 3 needle cells, fp8 before any sample."""
    rd = RunDir(root)
    rd.write_config({"model": {"hub": "org/tiny", "name": "tiny"}, "variants": {"bf16": {}, "fp8": {}},
                     "tasks": [{"type": "mmlu", "num_fewshot": 0},
                               {"type": "needle", "lengths": [1024], "depths": [0.0, 1.0]}], "seed": 0})
    rd.write_run(RunRecord(run_id=root.name, model="tiny"))  # killed before any variant ended
    for name in ("bf16", "fp8"):
        rd.write_result(VariantResult(variant=name, status="running"))
    rows = [Score(sample_id=f"q{i}", task="mmlu", value=0.0 if i in wrong else 1.0, pred="A", target="A",
                  group="law") for i in range(recorded)]
    rd.append_samples("bf16", "mmlu", [{"sample": {"id": s.sample_id}, "completion": {}, "score": s.model_dump()}
                                       for s in rows])
    cells = [Score(sample_id=f"n{i}", task="needle", value=1.0, pred="7", target="7", group="len1024_depth0",
                   extra={"length": 1024, "depth": 0, "seed": i}) for i in range(3)]
    rd.append_samples("bf16", "needle", [{"sample": {"id": s.sample_id}, "completion": {}, "score": s.model_dump()}
                                         for s in cells])
    return root


def test_finish_scores_what_was_recorded(tmp_path):
    root = interrupted_run(tmp_path / "r1", wrong=set(range(30)))
    record = finish_run(root, tmp_path / "cache")
    bf16 = record.variant("bf16")
    assert bf16.status == "partial" and "mmlu 150" in bf16.reason and "needle 3" in bf16.reason
    metrics = {m.name: m for m in bf16.metrics}
    assert metrics["mmlu/acc"].value == 120 / 150 and metrics["mmlu/acc"].n == 150
    assert metrics["needle/acc"].value == 1.0
    assert metrics["mmlu/acc_ci95_low"].value < 0.8 < metrics["mmlu/acc_ci95_high"].value
    assert record.variant("fp8").status == "partial" and record.variant("fp8").metrics == []
    assert RunDir(root).load_result("bf16").status == "partial"  # written back, so a re-read agrees


def test_gate_pairs_partial_variants_by_id(tmp_path):
    base = finish_run(interrupted_run(tmp_path / "base", wrong=set()), tmp_path / "cache")
    cand = finish_run(interrupted_run(tmp_path / "cand", wrong=set(range(40)), recorded=100), tmp_path / "cache")
    assert base.variant("bf16").status == cand.variant("bf16").status == "partial"
    rules = tmp_path / "rules.yaml"
    rules.write_text("rules:\n  - {name: accuracy, metrics: [mmlu/acc], max_drop_points: 2.0}\n")
    res = subprocess.run([sys.executable, "-m", "evalsuite", "gate", "--baseline", f"{tmp_path / 'base'}:bf16",
                          "--candidate", f"{tmp_path / 'cand'}:bf16", "--rules", str(rules), "--markdown",
                          str(tmp_path / "gate.md")], capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    report = (tmp_path / "gate.md").read_text()
    assert "n=100" in report and "40 lost/0 gained" in report and "exact McNemar" in report


def test_finish_takes_memory_from_the_engine_log(tmp_path):
    """vLLM 0.26 logs weights and KV capacity at start; an interrupted variant keeps those."""
    root = interrupted_run(tmp_path / "r", wrong=set())
    (RunDir(root).variant_dir("bf16") / "engine.log").write_text(
        "(EngineCore pid=5461) INFO 12-01 07:14:24 [model_runner.py:305] Model loading took 1.51 GiB and 58.1 seconds\n"
        "(EngineCore pid=5461) INFO 12-01 07:15:10 [kv_cache_utils.py:2177] GPU KV cache size: 599,184 tokens\n")
    record = finish_run(root, tmp_path / "cache")
    engine = record.variant("bf16").engine
    assert (engine.weights_gib, engine.kv_cache_tokens) == (1.51, 599_184)
    assert engine.source["weights_gib"] == engine.source["kv_cache_tokens"] == "log"
    assert record.variant("fp8").engine.weights_gib is None  # no log, nothing invented


def test_finish_scores_a_cut_latency_pass(tmp_path):
    """A latency pass stopped at a time limit keeps the lengths it finished, each with its n, and the
    host's load as the pass started."""
    rd = RunDir(tmp_path / "lat")
    rd.write_config({"model": {"hub": "org/tiny", "name": "tiny"}, "variants": {"bf16": {}}, "tasks": [],
                     "latency": {"prompt_tokens": [1024, 32000, 130000], "output_tokens": 128, "repeats": 2},
                     "seed": 0})
    rd.write_run(RunRecord(run_id="lat", model="tiny"))
    cut = HostLoad(cpus=2, start=[4.5, 3.0, 2.0])
    rd.write_result(VariantResult(variant="bf16", status="running", host_load=cut))
    rows = [Score(sample_id=f"len{n}-r{r}", task="latency", value=1.0, pred="", target="", group=str(n),
                  extra={"ttft_ms": ttft, "itl_ms": 2.5, "e2e_ms": ttft + 127 * 2.5, "prompt_tokens": n,
                         "output_tokens": 128, "cached_prompt_tokens": 0})
            for n, ttft in ((1024, 30.0), (32000, 3900.0)) for r in range(2)]
    rd.append_samples("bf16", "latency", [{"sample": {"id": s.sample_id}, "completion": {}, "score": s.model_dump()}
                                          for s in rows])
    bf16 = finish_run(tmp_path / "lat", tmp_path / "cache").variant("bf16")
    assert bf16.status == "partial" and "latency 4" in bf16.reason
    metrics = {m.name: m for m in bf16.metrics}
    assert metrics["latency/ttft_ms_p50/ctx32000"].value == 3900.0 and metrics["latency/ttft_ms_p50/ctx32000"].n == 2
    assert "latency/ttft_ms_p50/ctx130000" not in metrics
    assert "latency/ttft_ms_p50" in bf16.primary_metrics
    assert bf16.host_load == cut and bf16.host_load.loaded


def test_finish_rescores_a_resumed_variant_cut_again(tmp_path):
    """A resumed partial variant that is interrupted again: run.json still holds its earlier
    `partial` (scored on 3 needle cells), its result.json says `running`, and its samples hold more.
    The samples decide, and run.json is brought in line."""
    root = interrupted_run(tmp_path / "r1", wrong=set(range(30)))
    first = finish_run(root, tmp_path / "cache")
    assert "mmlu 150" in first.variant("bf16").reason
    rd = RunDir(root)
    rd.write_result(VariantResult(variant="bf16", status="running"))  # --resume started it again
    more = [Score(sample_id=f"n{i}", task="needle", value=0.0, pred="1", target="7", group="len1024_depth1",
                  extra={"length": 1024, "depth": 1, "seed": i}) for i in range(3, 5)]
    rd.append_samples("bf16", "needle", [{"sample": {"id": s.sample_id}, "completion": {}, "score": s.model_dump()}
                                         for s in more])
    again = finish_run(root, tmp_path / "cache")
    bf16 = again.variant("bf16")
    assert bf16.status == "partial" and "needle 5" in bf16.reason
    assert {m.name: m for m in bf16.metrics}["needle/acc"].value == 3 / 5
    assert rd.load_result("bf16").reason == bf16.reason == rd.load_run().variant("bf16").reason


def test_finish_records_the_selected_variants_that_never_started(tmp_path):
    """A variant without result.json never started: listed `pending` where the run selected it, and
    left so by a later finish (no samples to score), never turned `partial`."""
    root = interrupted_run(tmp_path / "r", wrong=set())
    (root / "fp8" / "result.json").unlink()
    assert [v.variant for v in finish_run(root, tmp_path / "cache").variants] == ["bf16"]
    record = finish_run(root, tmp_path / "cache", selected=["bf16", "fp8"])
    assert [(v.variant, v.status) for v in record.variants] == [("bf16", "partial"), ("fp8", "pending")]
    assert record.variant("fp8").reason == NOT_STARTED and RunDir(root).load_result("fp8") is None
    again = finish_run(root, tmp_path / "cache")
    assert again.variant("fp8").status == "pending" and again == RunDir(root).load_run()


def test_a_folder_without_config_yaml_is_bad_input_as_one_without_run_json(tmp_path):
    """Either file missing: the same one line, exit 2 (bad input), never 1 for one and 2 for the other."""
    for keep in ("run.json", "config.yaml"):
        root = interrupted_run(tmp_path / keep, wrong=set())
        (root / ({"run.json", "config.yaml"} - {keep}).pop()).unlink()
        res = subprocess.run([sys.executable, "-m", "evalsuite", "finish", str(root)], capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
        assert res.returncode == 2 and "not a run directory" in res.stderr and res.stderr.count("\n") == 1, res.stderr
