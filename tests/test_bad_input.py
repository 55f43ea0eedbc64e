"""Bad input through the real CLI: one line on stderr naming what is wrong, exit 2, no traceback;
and read-only commands leave no file behind, whether they fail or succeed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from evalsuite.core.types import RunRecord
from evalsuite.run.config import load_config
from evalsuite.run.session import recorded_exclude
from tests.mlflow_server import build_run

REPO = Path(__file__).resolve().parent.parent
GOOD = """\
model: {path: model_x}
variants:
  bf16: {max_model_len: 2048}
  small: {max_model_len: 1024}
tasks:
  - {type: mmlu, limit_per_subject: 1, subjects: [anatomy]}
  - {type: needle, lengths: [512, 1024]}
latency: {prompt_tokens: [256], output_tokens: 16}
"""


def cli(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(REPO), "EVALSUITE_CACHE": str(cwd / ".cache"), "COLUMNS": "80", **env}
    full_env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run([sys.executable, "-m", "evalsuite", *args], cwd=cwd, env=full_env, capture_output=True,
                          text=True, timeout=300)


def assert_bad(res: subprocess.CompletedProcess, *fragments: str) -> str:
    out = res.stdout + res.stderr
    assert "Traceback" not in out, out
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2, out
    assert len(lines) == 1 and lines[0].startswith("evalsuite: error: "), out
    for frag in fragments:
        assert frag in lines[0], lines[0]
    return lines[0]


def files(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*") if ".cache" not in p.parts}


def write(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    """The config, beside the model folder `model_x` the configs here name (validate and run want it there)."""
    path = tmp_path / name
    path.write_text(text)
    (tmp_path / "model_x").mkdir(exist_ok=True)
    return path


CASES = [
    ("negative_prompt_tokens", GOOD.replace("prompt_tokens: [256]", "prompt_tokens: [-5]"),
     ["latency.prompt_tokens.0", "greater than 0", "-5"]),
    ("empty_prompt_tokens", GOOD.replace("prompt_tokens: [256]", "prompt_tokens: []"),
     ["latency.prompt_tokens", "at least 1 item"]),
    ("negative_fewshot", GOOD.replace("limit_per_subject: 1", "limit_per_subject: 1, num_fewshot: -1"),
     ["num_fewshot", "greater than or equal to 0", "-1"]),
    ("negative_limit", GOOD.replace("limit_per_subject: 1", "limit_per_subject: -3"),
     ["limit_per_subject", "greater than or equal to 1", "-3"]),
    ("unknown_subject", GOOD.replace("[anatomy]", "[anatomy, astronmy]"),
     ["tasks.0.mmlu.subjects", "'astronmy'", "did you mean 'astronomy'", "allowed:"]),
    ("needle_too_long", GOOD.replace("[512, 1024]", "[512, 4096]"),
     ["tasks.needle.lengths", "[4096]", "variants.small.max_model_len 1024"]),
    ("latency_too_long", GOOD.replace("prompt_tokens: [256]", "prompt_tokens: [1020]"),
     ["latency.prompt_tokens", "[1020] + output_tokens 16", "variants.small.max_model_len 1024"]),
    ("ruler_too_short", GOOD.replace("{type: needle, lengths: [512, 1024]}", "{type: ruler, lengths: [512, 1024]}"),
     ["tasks.1.ruler.lengths", "at least 1024 tokens", "[512, 1024]"]),
    ("nested_40", GOOD + "engine: {env: " + "{a: " * 40 + "1" + "}" * 41 + "\n", ["nested more than 32 levels"]),
]


@pytest.mark.parametrize("name,text,fragments", CASES, ids=[c[0] for c in CASES])
def test_validate_refuses(tmp_path, name, text, fragments):
    path = write(tmp_path, text)
    assert_bad(cli(["validate", str(path)], tmp_path), str(path), *fragments)


def test_good_config_validates(tmp_path):
    res = cli(["validate", str(write(tmp_path, GOOD))], tmp_path)
    assert res.returncode == 0 and "ok (2 variant(s), 2 task(s))" in res.stdout, res.stdout + res.stderr


def test_usage_errors_through_the_console_entry(tmp_path):
    """`evalsuite` as installed: main() with its bare `--plan`, not only the app a CliRunner calls."""
    assert_bad(cli(["run", "c.yaml", "--limit", "0"], tmp_path), "run: --limit: 0 is not allowed (allowed: N >= 1)")
    assert_bad(cli(["gate", "--plan", "--n", "10", "--discordance", "2"], tmp_path),
               "gate: --discordance: 2 is not allowed (allowed: 0 <= SHARE <= 1)")
    assert_bad(cli(["rnu"], tmp_path), "Did you mean 'run'?")


def test_not_utf8(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(GOOD.encode() + "# café\n".encode("latin-1"))
    assert_bad(cli(["validate", str(path)], tmp_path), "not UTF-8", "0xe9")


def test_deeply_nested_yaml(tmp_path):
    path = write(tmp_path, GOOD + "x: " + "[" * 5000 + "]" * 5000 + "\n")
    assert_bad(cli(["validate", str(path)], tmp_path), str(path), "nested too deeply")


def test_several_errors_name_three(tmp_path):
    text = (GOOD.replace("limit_per_subject: 1", "limit_per_subject: -3, num_fewshot: -1")
            .replace("prompt_tokens: [256]", "prompt_tokens: [-5], repeats: 0"))
    line = assert_bad(cli(["validate", str(write(tmp_path, text))], tmp_path))
    assert line.count("; ") == 2 and "(and 1 more error)" in line, line
    for key in ("num_fewshot", "limit_per_subject", "prompt_tokens"):
        assert key in line


def test_model_config_json_not_json(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{not json")
    cfg = write(tmp_path, "model: {path: model}\nvariants: {bf16: {}}\n")
    res = cli(["run", str(cfg), "--no-progress"], tmp_path)
    assert_bad(res, str(model / "config.json"), "not valid JSON", "line 1")
    assert not (tmp_path / "runs").exists()
    variant = write(tmp_path, "model: {path: /m}\nvariants: {bf16: {}, other: {model: model}}\n", "v.yaml")
    assert_bad(cli(["validate", str(variant)], tmp_path), "variants.other.model", "not valid JSON")


def gguf_file(path: Path) -> Path:
    """A small, valid GGUF file (one tensor), written with the gguf package itself."""
    import numpy as np
    from gguf import GGUFWriter

    w = GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize("content,fragment", [
    (b"", "empty file"),
    (b"PK\x03\x04 not gguf", "not a GGUF file"),
    (b"GGUF\x03\x00", "header cut off"),
    (b"GGUF\x09\x00\x00\x00" + bytes(16), "version 9"),
], ids=["empty", "bad_magic", "short_header", "bad_version"])
def test_broken_gguf(tmp_path, content, fragment):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(content)
    assert_bad(cli(["models", "import", str(bad)], tmp_path), str(bad), fragment)
    cfg = write(tmp_path, "model: {path: /m}\nvariants: {bf16: {}, q4: {model: bad.gguf}}\n")
    assert_bad(cli(["validate", str(cfg)], tmp_path), "variants.q4.model", fragment)
    run_cfg = write(tmp_path, "model: {gguf: bad.gguf}\nvariants: {bf16: {}}\n", "r.yaml")
    assert_bad(cli(["run", str(run_cfg), "--no-progress"], tmp_path), fragment)


def test_truncated_gguf_is_one_line(tmp_path):
    whole = gguf_file(tmp_path / "whole.gguf").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[: len(whole) // 3])
    assert_bad(cli(["models", "import", str(cut)], tmp_path), str(cut), "damaged GGUF file")


def test_missing_gguf_variant(tmp_path):
    cfg = write(tmp_path, "model: {path: /m}\nvariants: {bf16: {}, q4: {model: nowhere.gguf}}\n")
    assert_bad(cli(["validate", str(cfg)], tmp_path), "variants.q4.model", "no such GGUF file")


# ---------------------------------------------------------------- read-only commands write nothing


def test_read_only_commands_write_nothing_when_failing(tmp_path):
    rules = REPO / "configs" / "gates" / "default.yaml"
    before = files(tmp_path)
    assert_bad(cli(["compare", "NO_SUCH_DIR"], tmp_path), "NO_SUCH_DIR", "no MLflow store")
    assert_bad(cli(["gate", "--baseline", "NO_A", "--candidate", "NO_B", "--rules", str(rules)], tmp_path), "NO_A")
    assert_bad(cli(["plan", "NO_MODEL"], tmp_path), "NO_MODEL")
    assert_bad(cli(["validate", "NO_CONFIG.yaml"], tmp_path), "file not found")
    assert files(tmp_path) == before


def test_read_only_commands_write_nothing_when_succeeding(tmp_path, tiny_model):
    run = build_run(tmp_path / "runs", "20250101-000000-ro", {"bf16": {}, "fp8": {"wrong": range(3)}},
                    baseline="bf16")
    cfg = write(tmp_path, f"model: {{path: {tiny_model}}}\nvariants: {{bf16: {{}}}}\n")
    rules = REPO / "configs" / "gates" / "default.yaml"
    before = files(tmp_path)
    for args in (["validate", str(cfg)], ["compare", str(run)], ["plan", str(tiny_model), "--gpu", "H200"],
                 ["gate", "--baseline", str(run), "--candidate", str(run), "--rules", str(rules),
                  "--variant-baseline", "bf16", "--variant-candidate", "fp8"]):
        res = cli(args, tmp_path)
        assert res.returncode in ((0, 1) if args[0] == "gate" else (0,)), (args, res.stdout + res.stderr)
    assert files(tmp_path) == before


# ---------------------------------------------------------------- safe by construction: names, code, places

NAMED = "model: {path: model_x}\nvariants:\n  %s: {}\ntasks: [{type: mmlu, limit_per_subject: 1, subjects: [anatomy]}]\n"
UNSAFE_NAMES = ["../../../escaped", "/abs/dir", "a/b", "..", ".", "''", ".hidden"]


def outside(tmp_path: Path, before: set[Path], run_root: Path | None = None) -> set[Path]:
    """Files that appeared under tmp_path since `before`, other than inside the run folder."""
    new = files(tmp_path) - before
    return {p for p in new if run_root is None or not (tmp_path / p).is_relative_to(run_root)}


@pytest.mark.parametrize("name", UNSAFE_NAMES)
@pytest.mark.parametrize("where", ["variant", "task"])
def test_names_with_path_parts_are_refused(tmp_path, name, where):
    text = (NAMED % name if where == "variant"
            else NAMED.replace("subjects: [anatomy]}", f"subjects: [anatomy], name: {name!r}}}") % "bf16")
    (tmp_path / "work").mkdir()
    cfg = write(tmp_path / "work", text)
    before = files(tmp_path)
    for cmd in ("validate", "run") if name in ("../../../escaped", "/abs/dir") else ("validate",):
        assert_bad(cli([cmd, str(cfg), "--no-progress"] if cmd == "run" else [cmd, str(cfg)], tmp_path / "work"),
                   str(cfg), f"not a safe {where} name", "allowed: [A-Za-z0-9]")
    assert files(tmp_path) == before


SERVER = "\nengine: {mode: server}"
CODE_CASES = [
    ("host", "variants: {bf16: {engine_args: {host: 0.0.0.0}}}" + SERVER, ["variants.bf16.engine_args.host"]),
    ("trust_remote_code", "variants: {bf16: {engine_args: {trust_remote_code: true}}}",
     ["engine_args.trust_remote_code"]),
    ("worker_cls", "variants: {bf16: {engine_args: {worker_cls: my.Worker}}}", ["engine_args.worker_cls"]),
    ("api_key", "variants: {bf16: {engine_args: {api_key: k}}}" + SERVER, ["engine_args.api_key"]),
    ("executor_class_path", "variants: {bf16: {engine_args: {distributed_executor_backend: my.Executor}}}",
     ["engine_args.distributed_executor_backend"]),
    ("pythonpath", "variants: {bf16: {}}\nengine: {env: {PYTHONPATH: /tmp/planted}}", ["engine.env.PYTHONPATH"]),
    ("ld_preload", "variants: {bf16: {}}\nengine: {env: {LD_PRELOAD: /tmp/x.so}}", ["engine.env.LD_PRELOAD"]),
    ("lm_eval_include_path", "variants: {bf16: {}}\ntasks: [{type: lm_eval, tasks: [t], include_path: inc}]",
     ["tasks.0.lm_eval.include_path", "allow_code: true", "'inc'"]),
]


@pytest.mark.parametrize("name,body,fragments", CODE_CASES, ids=[c[0] for c in CODE_CASES])
def test_options_that_run_code_need_a_switch(tmp_path, name, body, fragments):
    cfg = write(tmp_path, "model: {path: model_x}\n" + body + "\n")
    switch = ([] if name == "lm_eval_include_path" else ["unsafe_env: true"] if "env:" in body
              else ["unsafe_engine_args: true"])
    assert_bad(cli(["validate", str(cfg)], tmp_path), str(cfg), *fragments, *switch)
    allowed = (body.replace("include_path: inc", "include_path: inc, allow_code: true") if not switch
               else body.replace("engine: {", f"engine: {{{switch[0]}, ") if "engine:" in body
               else body + f"\nengine: {{{switch[0]}}}")
    res = cli(["validate", str(write(tmp_path, "model: {path: model_x}\n" + allowed + "\n"))], tmp_path)
    assert res.returncode == 0 and "note:" in res.stdout, res.stdout + res.stderr
    assert ("Python code" if not switch else "pass unchecked") in res.stdout


def test_include_reads_only_small_regular_files_and_shows_no_value(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "secret.yaml").write_text("engine: {batch_size: hunter2-secret}\n")
    for target, fragment in (("/dev/zero", "not a regular file"), ("fifo", "not a regular file"),
                             ("secret.yaml", "engine.batch_size")):
        cfg = write(tmp_path, f"include: {target}\nmodel: {{path: model_x}}\nvariants: {{bf16: {{}}}}\n")
        line = assert_bad(cli(["validate", str(cfg)], tmp_path), fragment)
        assert "hunter2" not in line
    big = write(tmp_path, "x: 1\n" + "#" * (5 << 20) + "\n", "big.yaml")
    assert_bad(cli(["validate", str(big)], tmp_path), str(big), "larger than 4 MiB")


@pytest.mark.parametrize("command", [["validate"], ["run"], ["plan"], ["check"],
                                     ["gate", "--plan", "--n", "10", "--rules"]])
def test_a_folder_where_a_yaml_file_goes_is_one_line(tmp_path, command):
    (tmp_path / "conf.yaml").mkdir()
    assert_bad(cli([*command, str(tmp_path / "conf.yaml")], tmp_path), f"{tmp_path / 'conf.yaml'}: is a folder")


@pytest.mark.parametrize("kind", ["regular_file", "dangling_symlink", "under_a_file"])
def test_output_dir_that_is_no_folder(tmp_path, kind):
    out = tmp_path / "out"
    if kind == "regular_file":
        out.write_text("not a folder")
    elif kind == "under_a_file":  # no folder can be made through a file: bad input, not the machine's refusal
        (tmp_path / "f").write_text("a file")
        out = tmp_path / "f" / "runs"
    else:
        out.symlink_to(tmp_path / "nowhere")
    cfg = write(tmp_path, GOOD)
    before = files(tmp_path)
    assert_bad(cli(["run", str(cfg), "-o", str(out), "--no-progress"], tmp_path), f"--output-dir {out}")
    assert files(tmp_path) == before


def test_read_only_home_without_a_cache_is_exit_4(tmp_path):
    """HOME in a file system that refuses new folders (sysfs refuses them to root, too)."""
    cfg = write(tmp_path, GOOD)
    res = cli(["run", str(cfg), "--no-progress"], tmp_path, HOME="/sys/kernel/mm", EVALSUITE_CACHE="")
    out = res.stdout + res.stderr
    assert res.returncode == 4 and "Traceback" not in out, out
    assert res.stderr.strip().splitlines() == [
        "evalsuite: error: /sys/kernel/mm/.cache/evalsuite: cannot create the cache folder (Operation not permitted); "
        "set EVALSUITE_CACHE to a writable folder"]
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("content", [b"\x00\x9f\xff binary \x00", b"[1, 2, 3]", b'{"schema_version": '],
                         ids=["binary", "list", "corrupt"])
@pytest.mark.parametrize("which", ["run.json", "samples"])
def test_damaged_records_in_compare_gate_finish(tmp_path, content, which):
    run = build_run(tmp_path / "runs", "20250101-000000-bad", {"bf16": {}, "fp8": {"wrong": range(3)}},
                    baseline="bf16")
    target = run / "run.json" if which == "run.json" else run / "fp8" / "samples" / "mmlu.jsonl"
    target.write_bytes(content + (b"\n" + target.read_bytes() if which == "samples" else b""))
    rules = REPO / "configs" / "gates" / "default.yaml"
    before = files(tmp_path)
    for args in (["compare", str(run)], ["finish", str(run)],
                 ["gate", "--baseline", f"{run}:bf16", "--candidate", f"{run}:fp8", "--rules", str(rules)]):
        if which == "samples" and args[0] == "finish":
            continue  # finish reads no samples of a variant that ended
        assert_bad(cli(args, tmp_path), str(target))
    assert files(tmp_path) == before


@pytest.mark.parametrize("config,args,fragments", [
    ({"num_hidden_layers": "two"}, [], ["num_hidden_layers", "'two'"]),
    ({"num_attention_heads": 0}, [], ["num_attention_heads", "above 0"]),
    ({}, ["--max-model-len", "0"], ["--max-model-len", "above 0"]),
], ids=["layers_two", "zero_heads", "max_model_len_0"])
def test_plan_refuses_impossible_shapes(tmp_path, config, args, fragments):
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
                                                   "num_attention_heads": 4, "vocab_size": 128,
                                                   "max_position_embeddings": 4096, **config}))
    assert_bad(cli(["plan", str(model), *args], tmp_path), *fragments)


@pytest.mark.parametrize("damaged", ["config.yaml", "run.json"])
def test_resume_on_a_damaged_run_folder(tmp_path, tiny_model, damaged):
    cfg = write(tmp_path, f"model: {{path: {tiny_model}}}\nengine: {{mode: fake}}\n"
                          "variants: {bf16: {max_model_len: 2048}}\nlatency: {prompt_tokens: [8], output_tokens: 2}\n"
                          "tracking: {enabled: false}\n")
    run = tmp_path / "runs" / "20250101-000000-c"
    run.mkdir(parents=True)
    (run / "run.json").write_text(RunRecord(run_id=run.name, model="m").model_dump_json())
    loaded = load_config(cfg)
    resolved = loaded.model_dump(mode="json", exclude=recorded_exclude(loaded))
    (run / "config.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False))  # as a run writes it
    (run / damaged).write_bytes(b"\x00\xffgarbage: [" if damaged == "config.yaml" else b"{broken")
    before = files(tmp_path)
    assert_bad(cli(["run", str(cfg), "--resume", "--no-progress"], tmp_path), f"runs/{run.name}/{damaged}",
               "damaged" if damaged == "config.yaml" else "corrupt JSON")
    assert files(tmp_path) == before


RAY_ALLOWED = "(allowed: auto, local, HOST:PORT or ray://HOST:PORT)"


@pytest.mark.parametrize("address", ["not a valid address", "host:port", "ray://:6379", "head:70000", "a/b:6379"])
def test_a_malformed_ray_address_is_refused_before_the_run_folder(tmp_path, address):
    """Said at once, in one line, exit 2: not after a run folder was made and Ray tried it (exit 1, two lines)."""
    cfg = write(tmp_path, GOOD)
    before = files(tmp_path)
    assert_bad(cli(["run", str(cfg), "--ray", address, "-V", "bf16", "--limit", "1", "-o", str(tmp_path / "out"),
                    "--no-progress"], tmp_path), f"--ray: {address!r} is not a Ray address {RAY_ALLOWED}")
    assert files(tmp_path) == before
    in_config = write(tmp_path, GOOD + f"scheduler: {{kind: ray, address: {address!r}}}\n", "ray.yaml")
    before = files(tmp_path)
    for command in (["validate", str(in_config)], ["run", str(in_config), "--no-progress"]):
        assert_bad(cli(command, tmp_path), str(in_config), f"scheduler.address: {address!r} is not a Ray address "
                                                           f"{RAY_ALLOWED}")
    assert files(tmp_path) == before


def test_a_ray_address_where_nothing_answers_leaves_no_run_folder(tmp_path):
    """A cluster that is down is found out before the run folder exists (one line, exit 1), whether
    `--ray` or the config's scheduler.address names it."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"  # bound, never listening: refused at once
        cfg = write(tmp_path, GOOD)
        in_config = write(tmp_path, GOOD + f"scheduler: {{kind: ray, address: '{address}'}}\n", "ray.yaml")
        before = files(tmp_path)
        for command, said in ((["run", str(cfg), "--ray", address], f"--ray {address}: nothing answers there"),
                              (["run", str(in_config)], f"scheduler.address {address}: nothing answers there")):
            res = cli([*command, "-o", str(tmp_path / "out"), "--no-progress"], tmp_path)
            lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
            assert res.returncode == 1 and len(lines) == 1 and said in lines[0], res.stdout + res.stderr
            assert "Traceback" not in res.stdout + res.stderr
        assert files(tmp_path) == before
