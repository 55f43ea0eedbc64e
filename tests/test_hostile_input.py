"""The hostile cases an adversarial pass found, each refused in one line with exit 2 (or handled as the docs
say): engine arguments and variables beyond the allow-lists, damaged records, a resume that must find its
own run, include bombs and includes of files that are not configs, and the small ones (a gate without
shared items, `init` through a symbolic link, a full disk).

The engine is the fake one where a run is needed; records, configs and the CLI are real.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from evalsuite.cli.main import app
from tests.test_bad_input import REPO, assert_bad, cli, write

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


def one_line(res, *fragments: str) -> str:
    """The in-process twin of test_bad_input.assert_bad."""
    assert res.exception is None or isinstance(res.exception, SystemExit), res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("evalsuite: error: "), res.output
    for frag in fragments:
        assert frag in lines[0], lines[0]
    return lines[0]


# ---------------------------------------------------------------- engine.env: an allow-list


@pytest.mark.parametrize("name,value", [
    ("VLLM_LOGGING_CONFIG_PATH", "/tmp/logging.json"),  # dictConfig's "()" calls any function: shown to run code
    ("CXX", "/tmp/evil-compiler"), ("OPENSSL_CONF", "/tmp/openssl.cnf"), ("HF_ENDPOINT", "http://attacker.example"),
    ("HF_MODULES_CACHE", "/tmp/modules"), ("VLLM_PLUGINS", "evil"), ("TORCHINDUCTOR_CACHE_DIR", "/tmp/planted"),
])
def test_a_variable_off_the_allow_list_needs_unsafe_env(tmp_path, name, value):
    cfg = write(tmp_path, f"model: {{path: model_x}}\nvariants: {{bf16: {{}}}}\nengine: {{env: {{{name}: '{value}'}}}}\n")
    line = one_line(invoke("validate", str(cfg)), str(cfg), f"engine.env.{name}", "engine.unsafe_env: true",
                    "docs/safety.md")
    assert value not in line
    allowed = write(tmp_path, cfg.read_text().replace("engine: {", "engine: {unsafe_env: true, "), "allowed.yaml")
    res = invoke("validate", str(allowed))
    assert res.exit_code == 0, res.output
    assert f"note: engine.unsafe_env: true: environment variables pass unchecked (engine.env.{name})" in res.stdout


def test_an_allowed_variable_holds_a_number_switch_or_name_never_a_path(tmp_path):
    cfg = write(tmp_path, "model: {path: model_x}\nvariants: {bf16: {}}\n"
                          "engine: {env: {VLLM_ENABLE_V1_MULTIPROCESSING: '0', CUDA_VISIBLE_DEVICES: /dev/nvidia0}}\n")
    line = one_line(invoke("validate", str(cfg)), "engine.env.CUDA_VISIBLE_DEVICES", "not a path")
    assert "/dev/nvidia0" not in line and "VLLM_ENABLE_V1_MULTIPROCESSING" not in line
    ok = write(tmp_path, "model: {path: model_x}\nvariants: {bf16: {}}\nengine: {env: {VLLM_CPU_OMP_THREADS_BIND: "
                         "'0-3|4-7', PYTORCH_CUDA_ALLOC_CONF: 'expandable_segments:True', HF_HUB_OFFLINE: '1'}}\n", "ok.yaml")
    res = invoke("validate", str(ok))
    assert res.exit_code == 0 and "note:" not in res.stdout, res.output


def test_run_says_the_switches_that_are_on(tmp_path, tiny_model):
    cfg = write(tmp_path, yaml.safe_dump({
        "model": {"path": str(tiny_model)}, "variants": {"bf16": {}}, "tracking": {"enabled": False},
        "engine": {"mode": "fake", "unsafe_env": True, "env": {"MY_OWN": "x"}},
        "tasks": [{"type": "mmlu", "subjects": ["anatomy"], "limit_per_subject": 2, "num_fewshot": 0}]}))
    res = invoke("run", str(cfg), "-o", str(tmp_path / "runs"), "--no-progress")
    assert res.exit_code == 0, res.output
    assert "note: engine.unsafe_env: true: environment variables pass unchecked (engine.env.MY_OWN)" in res.output


# ---------------------------------------------------------------- engine_args: exact vLLM names, an allow-list


SERVER = "engine: {mode: server}\n"


@pytest.mark.parametrize("key,near", [
    ("hos", None),  # made `vllm serve` listen on 0.0.0.0 through argparse's abbreviations
    ("trust_remote_cod", "trust_remote_code"), ("api_ke", None), ("logits_processor", "logits_processors"),
    ("worker_cl", "worker_cls"), ("middlewar", None), ("api-key", None), ("max-model-len", "max_model_len"),
])
def test_an_engine_argument_is_an_exact_vllm_name(tmp_path, key, near):
    for mode in (SERVER, SERVER.replace("server}", "server, unsafe_engine_args: true}"), ""):
        cfg = write(tmp_path, f"model: {{path: model_x}}\nvariants: {{bf16: {{engine_args: {{{key}: x}}}}}}\n{mode}")
        line = one_line(invoke("validate", str(cfg)), f"variants.bf16.engine_args.{key}: not an engine argument",
                        "spelled exactly, never abbreviated")
        if near:
            assert f"did you mean {near!r}" in line


def test_a_file_of_more_engine_arguments_is_refused_even_with_the_switch(tmp_path):
    (tmp_path / "evil.yaml").write_text("host: 0.0.0.0\ntrust-remote-code: true\n")
    for engine in ("", "engine: {mode: server, unsafe_engine_args: true}\n"):
        cfg = write(tmp_path, f"model: {{path: model_x}}\nvariants: {{bf16: {{engine_args: {{config: evil.yaml}}}}}}\n{engine}")
        one_line(invoke("validate", str(cfg)), "variants.bf16.engine_args.config: refused", "a file of more arguments")


@pytest.mark.parametrize("args,key", [
    ("{compilation_config: {inductor_passes: {post_grad: evil.module.Pass}}}", "compilation_config.inductor_passes"),
    ("{compilation_config: {backend: os.system}}", "compilation_config.backend"),
    ("{compilation_config: {inductor_compile_config: {debug_dir: /tmp/x}}}", "compilation_config.inductor_compile_config"),
    ("{compilation_config: {debug_dump_path: /tmp/x}}", "compilation_config.debug_dump_path"),
    ("{speculative_config: {method: eagle, model: /tmp/draft}}", "speculative_config.model"),
    ("{kv_transfer_config: {kv_connector: X, kv_connector_module_path: evil}}", "kv_transfer_config"),
    ("{worker_extension_cls: evil.Ext}", "worker_extension_cls"), ("{scheduler_cls: evil.S}", "scheduler_cls"),
    ("{generation_config: /tmp/folder}", "generation_config"), ("{tokenizer: /tmp/tok}", "tokenizer"),
    ("{model_loader_extra_config: {a: 1}}", "model_loader_extra_config"),
    ("{distributed_executor_backend: evil.Executor}", "distributed_executor_backend"),
    ("{load_format: evil.Loader}", "load_format"),
    ("{kv_cache_dtype_skip_layers: ['--host=0.0.0.0']}", "kv_cache_dtype_skip_layers"),
])
def test_what_names_code_or_a_file_needs_the_switch(tmp_path, args, key):
    cfg = write(tmp_path, f"model: {{path: model_x}}\nvariants: {{bf16: {{engine_args: {args}}}}}\n")
    line = one_line(invoke("validate", str(cfg)), f"variants.bf16.engine_args.{key}", "engine.unsafe_engine_args: true")
    for value in ("evil", "/tmp/x", "/tmp/draft", "/tmp/folder", "/tmp/tok", "os.system", "0.0.0.0"):
        assert value not in line.replace(str(cfg), "")
    allowed = write(tmp_path, cfg.read_text() + "engine: {unsafe_engine_args: true}\n", "allowed.yaml")
    res = invoke("validate", str(allowed))
    assert res.exit_code == 0 and "note: engine.unsafe_engine_args: true: engine arguments pass unchecked (" in res.stdout


def test_the_allowed_engine_arguments_pass_without_a_switch(tmp_path):
    cfg = write(tmp_path, "model: {path: model_x}\nvariants: {bf16: {engine_args: {kv_cache_memory_bytes: 1073741824, "
                          "attention_backend: TRITON_ATTN, kv_cache_dtype_skip_layers: ['0', '1'], "
                          "distributed_executor_backend: mp, compilation_config: {mode: 3, cudagraph_mode: PIECEWISE, "
                          "custom_ops: ['+rms_norm', '-silu_and_mul'], pass_config: {fuse_norm_quant: true}}, "
                          "speculative_config: {method: ngram, num_speculative_tokens: 3, prompt_lookup_max: 4}, "
                          "hf_overrides: {rope_parameters: {rope_type: yarn, factor: 4.0}}}}}\n")
    res = invoke("validate", str(cfg))
    assert res.exit_code == 0 and "note:" not in res.stdout, res.output


def test_serve_flags_are_exact_names_bound_to_their_values():
    from evalsuite.engine.server import serve_command

    cmd = serve_command("/m", 8123, {"max_model_len": 512, "served_model_name": "--host=0.0.0.0", "enforce_eager": True,
                                     "enable_prefix_caching": False, "compilation_config": {"mode": 3},
                                     "kv_cache_dtype_skip_layers": ["0", "1"]})
    assert cmd[cmd.index("serve") + 1:] == [
        "/m", "--host", "127.0.0.1", "--port", "8123", "--max-model-len=512", "--served-model-name=--host=0.0.0.0",
        "--enforce-eager", "--no-enable-prefix-caching", '--compilation-config={"mode": 3}',
        "--kv-cache-dtype-skip-layers", "0", "1"]


def test_the_serve_parser_takes_no_abbreviation_and_no_config_file(monkeypatch):
    """vLLM's own `vllm serve` parser, as evalsuite.engine.vllm_cli starts it: `--hos` was `--host` to argparse."""
    import argparse

    from evalsuite.engine import vllm_cli

    monkeypatch.setattr(argparse.ArgumentParser, "__init__", argparse.ArgumentParser.__init__)  # undone after
    vllm_cli.exact_flags_only()
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    assert parser.parse_args(["/m", "--host=127.0.0.1", "--max-model-len=64"]).host == "127.0.0.1"
    for flag in ("--hos=0.0.0.0", "--trust-remote-cod", "--api-ke=k", "--middlewar=evil.app", "--worker-cl=evil.W"):
        with pytest.raises(SystemExit) as e:
            parser.parse_args(["/m", flag])
        assert e.value.code == 2, flag
    assert vllm_cli.refused_flag(["serve", "/m", "--config", "evil.yaml"]) == "--config"
    assert vllm_cli.refused_flag(["serve", "/m", "--config=evil.yaml"]) == "--config=evil.yaml"
    assert vllm_cli.refused_flag(["serve", "/m", "--config-format=auto", "--served-model-name=--config"]) is None


def test_the_names_read_from_vllms_source_are_those_of_its_parser():
    """The allow-list's names are read from the installed vLLM's source without importing it; here they are
    checked against what importing it says: EngineArgs' fields, and the options of `vllm serve`."""
    import dataclasses

    from vllm.engine.arg_utils import EngineArgs
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from evalsuite.run.safety import ENGINE_ARGS, vllm_arguments

    version, engine, serve = vllm_arguments()
    assert engine == {f.name for f in dataclasses.fields(EngineArgs) if not f.name.startswith("_")}
    options = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))._option_string_actions
    assert all(f"--{name.replace('_', '-')}" in options for name in serve)
    # a few fields are the offline engine's only (vLLM 0.32: mamba_config, model_weights, ...); in server mode
    # `vllm serve` refuses them by name, as it refuses any flag it lacks, abbreviations being off
    assert len([n for n in engine if f"--{n.replace('_', '-')}" not in options]) <= 5
    assert {"host", "port", "api_key", "middleware"} <= serve and "config" not in engine | serve
    assert len(ENGINE_ARGS & engine) >= 50  # the allow-list names this vLLM's arguments, not another's


def test_the_vllm_entry_refuses_a_config_file_in_one_line(tmp_path):
    res = subprocess.run([sys.executable, "-m", "evalsuite.engine.vllm_cli", "serve", "/m", "--config", "x.yaml"],
                         capture_output=True, text=True, timeout=300, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert res.returncode == 2 and res.stderr.strip() == (
        "evalsuite: error: --config: refused: a file of more arguments would pass unchecked"), res.stderr


# ---------------------------------------------------------------- records are data


def fake_run(tmp_path: Path, model: Path, name: str = "fake", extra: dict | None = None) -> tuple[Path, Path]:
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(yaml.safe_dump({
        "model": {"path": str(model)}, "engine": {"mode": "fake", "batch_size": 4}, "baseline": "bf16",
        "variants": {"bf16": {}, "worse": {"engine_args": {"fake_disagree": 0.5}}},
        "tasks": [{"type": "mmlu", "subjects": ["anatomy"], "limit_per_subject": 8, "num_fewshot": 0}],
        "tracking": {"enabled": False}, **(extra or {})}))
    res = invoke("run", str(cfg), "-o", str(tmp_path / "runs"), "--no-progress")
    assert res.exit_code == 0, res.output
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", name)  # as the run id spells the config's name
    (run,) = [p for p in (tmp_path / "runs").iterdir() if p.name.endswith(f"-{stem}")]
    return cfg, run


@pytest.fixture(scope="module")
def made(tmp_path_factory, tiny_model):
    tmp = tmp_path_factory.mktemp("records")
    cfg, run = fake_run(tmp, tiny_model)
    (tmp / "claims.yaml").write_text("min_n: 4\nclaims:\n  - id: 1\n    text: t\n    where: w\n    checks:\n"
                                     "      - {what: m, metric: mmlu/acc, baseline: bf16, candidate: worse,"
                                     " effect: {kind: points, between: [-100, 100]}}\n")
    return cfg, run


def edit_line(path: Path, n: int, change) -> None:
    lines = path.read_text().splitlines()
    row = json.loads(lines[n])
    change(row)
    lines[n] = json.dumps(row)
    path.write_text("\n".join(lines) + "\n")


def set_key(*keys, value=None, drop=False):
    def change(row):
        for k in keys[:-1]:
            row = row[k]
        if drop:
            del row[keys[-1]]
        else:
            row[keys[-1]] = value
    return change


SAMPLES = "worse/samples/mmlu.jsonl"
DAMAGE = {
    "score_string": (SAMPLES, lambda p: edit_line(p, 1, set_key("score", value="1.0")), "line 2", "score"),
    "score_list": (SAMPLES, lambda p: edit_line(p, 0, set_key("score", value=[1])), "line 1", "score"),
    "meta_string": (SAMPLES, lambda p: edit_line(p, 2, set_key("sample", "meta", value="x")), "line 3", "sample.meta"),
    "id_list": (SAMPLES, lambda p: edit_line(p, 0, set_key("sample", "id", value=["a"])), "line 1", "sample.id"),
    "score_missing": (SAMPLES, lambda p: edit_line(p, 0, set_key("score", drop=True)), "line 1", "score"),
    "score_null": (SAMPLES, lambda p: edit_line(p, 0, set_key("score", value=None)), "line 1", "score"),
    "value_text": (SAMPLES, lambda p: edit_line(p, 0, set_key("score", "value", value="high")), "line 1",
                   "score.value"),
    "run_json_deep": ("run.json", lambda p: p.write_text('{"schema_version": 1, "variants": ' + "[" * 200_000
                                                          + "]" * 200_000 + "}"), "run.json", "JSON"),
    "variant_escapes": ("run.json", lambda p: p.write_text(
        p.read_text().replace('"variant": "worse"', '"variant": "../../x"')), "run.json", "not a safe name"),
    "result_of_another": ("worse/result.json", lambda p: p.write_text(
        p.read_text().replace('"variant": "worse"', '"variant": "bf16"')), "result.json", "variant"),
}
COMMANDS = {
    "compare": lambda cfg, run: ["compare", str(run)],
    "gate": lambda cfg, run: ["gate", "--baseline", f"{run}:bf16", "--candidate", f"{run}:worse"],
    "report": lambda cfg, run: ["report", str(run), "--out", str(run.parent / "page")],
    "check": lambda cfg, run: ["check", str(cfg.parent / "claims.yaml"), str(run)],
    "finish": lambda cfg, run: ["finish", str(run)],
    "resume": lambda cfg, run: ["run", str(cfg), "--resume", "-o", str(run.parent), "--no-progress"],
}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_record_is_one_line_in_every_command(tmp_path, made, damage, command):
    cfg, run = made
    copy = tmp_path / "runs" / run.name
    shutil.copytree(run, copy)
    name, harm, *fragments = DAMAGE[damage]
    if command == "finish" and name != "run.json":
        (copy / "worse" / "result.json").write_text(  # finish reads what an interrupted variant recorded
            (copy / "worse" / "result.json").read_text().replace('"status": "ok"', '"status": "running"'))
    harm(copy / name)
    res = invoke(*COMMANDS[command](cfg, copy))
    assert res.exception is None or isinstance(res.exception, SystemExit), res.output
    if name.endswith("result.json") and command in ("compare", "gate", "report"):
        assert res.exit_code in (0, 3), res.output  # they read run.json's copy of each result
        return
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("evalsuite: ")]
    # a resumed run says where it continues, and each variant it leaves as recorded, before it meets the damage
    assert res.exit_code == 2 and errors == lines[-1:] and (len(lines) == 1 or command == "resume"), res.output
    for frag in [str(copy), *fragments]:
        assert frag in errors[0], errors[0]


@pytest.mark.parametrize("fifo", ["config.yaml", "worse/result.json", SAMPLES])
def test_a_fifo_in_a_run_folder_never_blocks_a_command(tmp_path, made, fifo):
    """Through the real CLI, with a time limit: a FIFO opened for reading blocks until a writer comes. `finish`
    is also what an interrupted run does on Ctrl-C or SIGTERM, which hung there before."""
    cfg, run = made
    copy = tmp_path / "runs" / run.name
    shutil.copytree(run, copy)
    (copy / fifo).unlink()
    os.mkfifo(copy / fifo)
    for command, args in COMMANDS.items():
        res = subprocess.run([sys.executable, "-m", "evalsuite", *args(cfg, copy)], capture_output=True, text=True,
                             timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
        assert "Traceback" not in res.stderr, (command, res.stderr)
        assert res.returncode in (0, 1, 2, 3), (command, res.returncode, res.stderr)
        if res.returncode == 2:
            assert f"{copy / fifo}: not a regular file" in res.stderr.strip().splitlines()[-1], (command, res.stderr)


# ---------------------------------------------------------------- resume finds its own run


def test_resume_continues_its_own_config_not_one_whose_name_ends_alike(tmp_path, tiny_model):
    smoke_cfg, smoke = fake_run(tmp_path, tiny_model, "smoke")
    cpu_cfg, cpu = fake_run(tmp_path, tiny_model, "cpu-smoke")
    (smoke / "worse" / "result.json").write_text(  # cut short: the resume has work to do there
        (smoke / "worse" / "result.json").read_text().replace('"status": "ok"', '"status": "running"'))
    before = cpu.joinpath("run.json").read_text()
    res = invoke("run", str(smoke_cfg), "--resume", "-o", str(tmp_path / "runs"), "--no-progress")
    assert res.exit_code == 0 and f"run {smoke.name} ->" in res.output.replace("\n", " "), res.output
    assert cpu.joinpath("run.json").read_text() == before
    assert json.loads((smoke / "worse" / "result.json").read_text())["status"] == "ok"


@pytest.mark.parametrize("name", ["my config", "modèle-é", "日本語"])
def test_a_config_named_with_any_characters_can_be_resumed(tmp_path, tiny_model, name):
    cfg, run = fake_run(tmp_path, tiny_model, name)
    record = json.loads((run / "run.json").read_text())
    assert record["config_path"] == str(cfg.resolve()) and len(record["config_sha256"]) == 64
    res = invoke("run", str(cfg), "--resume", "-o", str(tmp_path / "runs"), "--no-progress")
    assert res.exit_code == 0 and "left as recorded" in res.output, res.output
    assert len(list((tmp_path / "runs").iterdir())) == 1


def test_resume_refuses_in_one_line_without_a_run_or_with_a_changed_config(tmp_path, tiny_model):
    cfg, run = fake_run(tmp_path, tiny_model, "changed")
    other = tmp_path / "never.yaml"
    other.write_text(cfg.read_text())
    one_line(invoke("run", str(other), "--resume", "-o", str(tmp_path / "runs"), "--no-progress"),
             f"--resume: no run of {other} in {tmp_path / 'runs'}")
    cfg.write_text(cfg.read_text().replace("limit_per_subject: 8", "limit_per_subject: 9"))
    one_line(invoke("run", str(cfg), "--resume", "-o", str(tmp_path / "runs"), "--no-progress"),
             f"--resume: {cfg} changed since run {run.name} (tasks.0.limit)")
    cfg.write_text(cfg.read_text().replace("limit_per_subject: 9", "limit_per_subject: 8")
                   .replace("enabled: false", "enabled: false\n  experiment: elsewhere"))
    res = invoke("run", str(cfg), "--resume", "-o", str(tmp_path / "runs"), "--no-progress")
    assert res.exit_code == 0, res.output  # where results are reported is not what was measured


# ---------------------------------------------------------------- includes: bounded and quiet


def test_an_include_bomb_is_refused_at_once(tmp_path):
    for i in range(13):  # each file includes the next four times: 4^12 reads
        nxt = f"b{i + 1}.yaml"
        (tmp_path / f"b{i}.yaml").write_text(("include: [" + ", ".join([nxt] * 4) + "]\n") if i < 12 else "seed: 1\n")
    cfg = write(tmp_path, "include: b0.yaml\nmodel: {path: model_x}\nvariants: {bf16: {}}\n")
    start = time.monotonic()
    res = cli(["validate", str(cfg)], tmp_path)
    assert time.monotonic() - start < 60
    assert_bad(res, "include: more than 64 files read, or includes more than 8 deep")


def test_an_included_file_is_never_shown(tmp_path, monkeypatch):
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$saltsalt$hashhashhash:19000:0:99999:7:::\ndaemon: '*:19000:0:99999:7:::'\n"
                      "token_ghp_abc123: 1\n")
    (tmp_path / "base.yaml").write_text("model: {path: /srv/secret-model-name}\n")
    cases = {"include: shadow\nmodel: {path: model_x}\nvariants: {bf16: {}}\n": ["shadow", "not shown"],
             "include: base.yaml\nvariants: {bf16: {}}\n": ["model.path", "base.yaml", "not shown"],
             "include: '${SECRET_VAR}.yaml'\nmodel: {path: model_x}\nvariants: {bf16: {}}\n": ["${SECRET_VAR}.yaml"]}
    for text, fragments in cases.items():
        cfg = write(tmp_path, text)
        line = assert_bad(cli(["validate", str(cfg)], tmp_path, SECRET_VAR="hunter2-value"), *fragments)
        for leaked in ("saltsalt", "hashhash", "19000", "token_ghp", "daemon", "secret-model-name", "hunter2"):
            assert leaked not in line, line


# ---------------------------------------------------------------- the small ones


def test_no_pass_without_shared_items_under_any_rules(tmp_path):
    from tests.mlflow_server import build_run

    base = build_run(tmp_path / "runs", "20250101-000000-a", {"bf16": {}}, n=300)
    cand = build_run(tmp_path / "runs", "20250101-000000-b", {"fp8": {}}, n=300)
    samples = cand / "fp8" / "samples" / "mmlu.jsonl"
    samples.write_text(samples.read_text().replace('"q', '"other-q'))  # the same scores, other items
    rules = yaml.safe_load((REPO / "evalsuite" / "verdict" / "gate_rules.yaml").read_text())
    for insufficient in ("pass", "warn", "fail"):
        path = tmp_path / f"rules-{insufficient}.yaml"
        path.write_text(yaml.safe_dump({**rules, "insufficient_n": insufficient}))
        res = invoke("gate", "--baseline", f"{base}:bf16", "--candidate", f"{cand}:fp8", "--rules", str(path),
                     "--format", "markdown")
        assert res.exit_code == (1 if insufficient == "fail" else 3), (insufficient, res.output)
        assert "no shared sample ids" in res.output


@pytest.mark.parametrize("link", ["dangling", "to_a_file"])
def test_init_never_writes_through_a_symbolic_link(tmp_path, link):
    outside, here = tmp_path / "outside", tmp_path / "here"
    outside.mkdir()
    here.mkdir()
    target = outside / "victim.txt"
    if link == "to_a_file":
        target.write_text("theirs\n")
    (here / "evalsuite.yaml").symlink_to(target)
    one_line(invoke("init", str(here), "--device", "cpu"), f"{here / 'evalsuite.yaml'}: a symbolic link")
    assert sorted(outside.iterdir()) == ([target] if link == "to_a_file" else [])
    assert link == "dangling" or target.read_text() == "theirs\n"
    res = invoke("init", str(here), "--device", "cpu", "--force")  # replaces the link itself
    assert res.exit_code == 0 and not (here / "evalsuite.yaml").is_symlink(), res.output
    assert sorted(outside.iterdir()) == ([target] if link == "to_a_file" else [])


def test_a_full_disk_leaves_the_variant_partial(tmp_path, tiny_model, monkeypatch):
    """Every write refused (samples, result.json, run.json) once the disk fills, until a file is removed:
    the run's reserve, given back, holds the records that say the variant is `partial`."""
    from evalsuite.core import rundir

    cfg = tmp_path / "disk.yaml"
    cfg.write_text(yaml.safe_dump({
        "model": {"path": str(tiny_model)}, "engine": {"mode": "fake", "batch_size": 2},
        "variants": {"bf16": {}}, "tracking": {"enabled": False},
        "tasks": [{"type": "mmlu", "subjects": ["anatomy"], "limit_per_subject": 8, "num_fewshot": 0}]}))
    full = {"writes": 0, "now": False}
    real_fd, real_atomic, real_release = rundir._write_fd, rundir._atomic_write, rundir.RunDir.release_space

    def refused(path):
        raise OSError(28, os.strerror(28), str(path))

    def write_fd(path, flags):
        full["writes"] += "samples" in str(path)  # the run's other appends (phases.jsonl) are not counted
        full["now"] = full["now"] or full["writes"] > 2  # two batches recorded, then the disk is full
        return refused(path) if full["now"] else real_fd(path, flags)

    def atomic(path, text):
        return refused(path) if full["now"] else real_atomic(path, text)

    def release(self):
        full["now"] = False  # a file removed: room again
        real_release(self)

    monkeypatch.setattr(rundir, "_write_fd", write_fd)
    monkeypatch.setattr(rundir, "_atomic_write", atomic)
    monkeypatch.setattr(rundir.RunDir, "release_space", release)
    res = invoke("run", str(cfg), "-o", str(tmp_path / "runs"), "--no-progress")
    assert res.exit_code == 4 and "No space left on device" in res.stderr.splitlines()[-1], res.output
    (run,) = (tmp_path / "runs").iterdir()
    result = json.loads((run / "bf16" / "result.json").read_text())
    assert result["status"] == "partial" and "mmlu 4" in result["reason"], result
    assert json.loads((run / "run.json").read_text())["variants"][0]["status"] == "partial"
    assert not (run / rundir.RESERVE_FILE).exists()


def test_a_full_tmpfs_leaves_the_variant_partial_and_resume_completes_it(tmp_path, tiny_model):
    """A real full file system: a tmpfs mounted in a user namespace of its own, filled up but for a little."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode:
        pytest.skip("needs `unshare -rm` (user namespaces) to mount a tmpfs")
    mnt, keep = tmp_path / "mnt", tmp_path / "kept"
    mnt.mkdir()
    cfg = tmp_path / "tmpfs.yaml"
    cfg.write_text(yaml.safe_dump({
        "model": {"path": str(tiny_model)}, "engine": {"mode": "fake", "batch_size": 2},
        "variants": {"bf16": {}}, "tracking": {"enabled": False},
        "tasks": [{"type": "mmlu", "subjects": ["anatomy"], "limit_per_subject": 100, "num_fewshot": 0}]}))
    run = f"{sys.executable} -m evalsuite run {cfg} -o {mnt}/runs --no-progress"
    # the run's 4 MiB reserve and 256 KiB, half of it taken: room for its first files and some of its
    # samples (about 1.5 KB an item), not all; with the filler removed, the resume has room to finish
    script = (f"mount -t tmpfs -o size=4352k tmpfs {mnt} && mkdir {mnt}/runs && "
              f"(dd if=/dev/zero of={mnt}/filler bs=1k count=128 2>/dev/null; "
              f"{run}; echo \"first=$?\"; cp -r {mnt}/runs {keep}; rm {mnt}/filler; "
              f"{run} --resume; echo \"second=$?\"; cp -r {mnt}/runs {keep}-after)")
    res = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(REPO), "EVALSUITE_CACHE": str(tmp_path / ".cache")})
    assert "first=4" in res.stdout and "second=0" in res.stdout, res.stdout + res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    (first,) = keep.iterdir()
    assert json.loads((first / "bf16" / "result.json").read_text())["status"] == "partial"
    (after,) = Path(f"{keep}-after").iterdir()
    assert json.loads((after / "run.json").read_text())["variants"][0]["status"] == "ok"
