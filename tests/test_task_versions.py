"""A task definition's version is recorded beside its scores (result.json's task_versions, as lm-eval's
`metadata: version`), and compare and gate say where two runs' definitions differ."""

from __future__ import annotations

import io
import json
from pathlib import Path

import yaml
from rich.console import Console
from typer.testing import CliRunner

from evalsuite.cli.main import app
from evalsuite.core.rundir import RunDir
from evalsuite.core.types import VariantResult, definitions_unlike
from evalsuite.report.compare import compare
from evalsuite.report.compare_view import terminal_view, to_markdown
from evalsuite.report.names import REDEFINED
from evalsuite.tasks import spec
from tests.mlflow_server import build_run

DEFAULT_RULES = Path(__file__).resolve().parent.parent / "configs" / "gates" / "default.yaml"
SPEC = {"wrong": range(30)}


def test_every_shipped_definition_states_its_version():
    for name in spec.defined_tasks():
        raw = yaml.safe_load(spec.definition_path(name).read_text())
        assert isinstance(raw.get("version"), int) and raw["version"] >= 1, name


def test_the_version_is_the_definitions_and_a_python_types_class_attribute(tmp_path):
    from evalsuite.tasks import ChoiceConfig, TaskContext
    from evalsuite.tasks.workload import WorkloadTask

    task = ChoiceConfig(type="legal", tasks=["governing_law"]).build(TaskContext(tmp_path, tmp_path))
    assert task.version == spec.load_definition("legalbench_cuad").version == 1
    assert WorkloadTask.version == 1


def test_a_fake_run_records_each_tasks_version(tmp_path, tiny_model):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({
        "model": {"path": str(tiny_model)}, "engine": {"mode": "fake", "batch_size": 4}, "output_dir": str(tmp_path / "runs"),
        "tracking": {"enabled": False}, "variants": {"bf16": {}}, "tasks": [{"type": "legal", "tasks": ["governing_law"], "limit_per_task": 2},
                                            {"type": "workload", "name": "burst", "requests": 2, "prompt_tokens": 16,
                                             "output_tokens": 1}]}))
    res = CliRunner().invoke(app, ["run", str(config), "--no-progress"])
    assert res.exit_code == 0, res.output
    (run,) = [p for p in (tmp_path / "runs").iterdir() if (p / "run.json").exists()]
    written = json.loads((run / "bf16" / "result.json").read_text())
    assert written["task_versions"] == {"legal": 1, "burst": 1}


def _redefined_runs(tmp_path: Path) -> tuple[Path, Path]:
    base = build_run(tmp_path / "runs", "20250101-000000-base", {"bf16": SPEC})
    cand = build_run(tmp_path / "runs", "20250101-000001-cand", {"fp8": SPEC})
    for run, variant, version in ((base, "bf16", 1), (cand, "fp8", 2)):
        rd = RunDir(run)
        result = rd.load_result(variant)
        result.task_versions = {"mmlu": version}
        rd.write_result(result)
        record = rd.load_run()
        record.variants = [result]
        rd.write_run(record)
    return base, cand


def test_definitions_unlike_names_only_tasks_both_sides_know():
    a = VariantResult(variant="a", task_versions={"mmlu": 1, "needle": 1})
    b = VariantResult(variant="b", task_versions={"mmlu": 2, "ruler": 3})
    assert definitions_unlike(a, b) == {"mmlu": "mmlu: version 2, baseline 1"}
    assert definitions_unlike(a, VariantResult(variant="old")) == {}  # a record older than versions: unknown


def test_compare_marks_scores_of_another_definition(tmp_path):
    base, cand = _redefined_runs(tmp_path)
    c = compare([(RunDir(base), None), (RunDir(cand), None)], "bf16")
    assert c.redefined() == {"fp8": {"mmlu": "mmlu: version 2, baseline 1"}}
    assert c.cell("fp8", "mmlu/acc")[0].endswith(REDEFINED) and not c.cell("fp8", "engine/weights_gib")[0].endswith(REDEFINED)
    md = to_markdown(c)
    assert "task definition of another version than the baseline's" in md and "fp8 (mmlu: version 2, baseline 1)" in md
    console = Console(width=200, record=True, file=io.StringIO())
    for part in terminal_view(c, 200):
        console.print(part)
    assert "mmlu: version 2, baseline 1" in " ".join(console.export_text().split())


def test_gate_says_the_definitions_differ(tmp_path):
    base, cand = _redefined_runs(tmp_path)
    args = ["gate", "--baseline", str(base), "--candidate", str(cand), "--rules", str(DEFAULT_RULES)]
    md = CliRunner().invoke(app, [*args, "--format", "markdown"])
    assert f"`mmlu/acc`{REDEFINED}" in md.stdout and "fp8 (mmlu: version 2, baseline 1)" in md.stdout
    term = CliRunner().invoke(app, args)
    assert "mmlu: version 2, baseline 1" in " ".join(term.stdout.split())
    (cand_json,) = json.loads(CliRunner().invoke(app, [*args, "--format", "json"]).stdout)["candidates"]
    assert cand_json["redefined"] == {"mmlu": "mmlu: version 2, baseline 1"}
    same = build_run(tmp_path / "same", "20250101-000002-same", {"fp8": SPEC})
    plain = CliRunner().invoke(app, ["gate", "--baseline", str(base), "--candidate", str(same), "--rules",
                                     str(DEFAULT_RULES), "--format", "markdown"])
    assert "another version" not in plain.stdout  # a side without versions: nothing said
