"""Every artifact meant to be shared (report.md and .html, gate.md, JUnit, MLflow tags and params, the
gate's messages) names files relative to the run folder or the repository, never by a path of the
machine that made it; shared_path and shared_text say how."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from evalsuite.cli.main import app
from evalsuite.core.rundir import RunDir
from evalsuite.core.shared import PACKAGE, machine_paths, shared_path, shared_text

REPO = Path(__file__).resolve().parents[1]


def test_shared_path_is_relative_to_the_run_the_repository_or_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALSUITE_CACHE", str(tmp_path / "cache"))
    clone = tmp_path / "clone"
    (clone / ".git").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert shared_path(PACKAGE / "verdict" / "gate_rules_smoke.yaml") == "evalsuite/verdict/gate_rules_smoke.yaml"
    assert shared_path(clone / "configs" / "cpu-smoke.yaml") == "configs/cpu-smoke.yaml"
    assert shared_path(clone / "runs" / "r1" / "bf16" / "engine.log", clone / "runs" / "r1") == "bf16/engine.log"
    assert shared_path(tmp_path / "cache" / "models" / "m") == "$EVALSUITE_CACHE/models/m"
    assert shared_path("/srv/models/llama") == "llama" and shared_path("configs/x.yaml") == "configs/x.yaml"
    text = f"failed: see {tmp_path / 'cache' / 'q' / 'quantize.log'}. Link http://127.0.0.1:5000/#/experiments/1/runs"
    assert shared_text(text) == "failed: see $EVALSUITE_CACHE/q/quantize.log. Link " \
                                "http://127.0.0.1:5000/#/experiments/1/runs"
    assert machine_paths("</td> 1/2 a/b data:image/png") == []


@pytest.fixture
def project(tmp_path, monkeypatch, tiny_model):
    """A clone-like folder with a config of its own; the run on the fake engine, its MLflow store beside it."""
    root = tmp_path / "project"
    (root / ".git").mkdir(parents=True)
    monkeypatch.chdir(root)
    cfg = {"model": {"path": str(tiny_model)}, "engine": {"mode": "fake", "batch_size": 4},
           "defaults": {"max_model_len": 2048},
           "variants": {"bf16": {}, "kv_fp8": {"kv_cache_dtype": "fp8"}, "worse": {"engine_args": {"fake_disagree": 0.6}}},
           "baseline": "bf16", "tasks": [{"type": "legal", "tasks": ["governing_law"], "limit_per_task": 20}],
           "tracking": {"uri": f"sqlite:///{root / 'runs' / 'mlflow.db'}", "experiment": "shared"},
           "gate_rules": "smoke", "output_dir": "runs"}
    (root / "configs").mkdir()
    (root / "configs" / "c.yaml").write_text(yaml.safe_dump(cfg))
    res = CliRunner().invoke(app, ["run", "configs/c.yaml", "--no-progress"])
    assert res.exit_code == 0, res.output
    (run,) = [p for p in (root / "runs").iterdir() if (p / "run.json").exists()]
    rd = RunDir(run)  # an engine error that names a log file, as a real failure's reason does
    record = rd.load_run()
    worse = next(v for v in record.variants if v.variant == "worse")
    worse.status, worse.reason = "partial", f"engine failed in legal: see {run / 'worse' / 'engine.log'}; details in " \
                                            f"{Path.home() / '.cache' / 'evalsuite' / 'x.log'}"
    rd.write_result(worse)
    rd.write_run(record)
    return root, run


def test_no_shared_artifact_names_a_path_of_this_machine(project, tmp_path):
    root, run = project
    cli = CliRunner()
    report = cli.invoke(app, ["report", str(run), "--out", "report"])
    assert report.exit_code == 0, report.output
    gate = cli.invoke(app, ["gate", "--baseline", f"{run}:bf16", "--candidate", str(run), "--markdown", "gate.md",
                            "--junit", "gate.xml", "--json", "gate.json"])
    assert gate.exit_code in (0, 1, 3), gate.output
    sync = cli.invoke(app, ["sync", str(run)])
    assert sync.exit_code == 0, sync.output
    client = MlflowClient(f"sqlite:///{root / 'runs' / 'mlflow.db'}")
    (exp,) = [e for e in client.search_experiments() if e.name == "shared"]
    values = [f"{k}={v}" for r in client.search_runs([exp.experiment_id])
              for k, v in {**r.data.tags, **r.data.params}.items() if not k.startswith("mlflow.")]
    page = Path(client.download_artifacts(client.search_runs([exp.experiment_id], "tags.`evalsuite.role` = 'parent'")[0]
                                          .info.run_id, "report/report.md", str(tmp_path)))
    shared = {"report.md": (root / "report" / "report.md").read_text(),
              "report.html": (root / "report" / "report.html").read_text(),
              "gate.md": (root / "gate.md").read_text(), "gate.xml": (root / "gate.xml").read_text(),
              "gate.json": (root / "gate.json").read_text(),
              "gate stderr": gate.stderr, "MLflow tags and params": "\n".join(values),
              "MLflow report.md": page.read_text()}
    for name, text in shared.items():
        for machine in (str(tmp_path), str(Path.home()), str(REPO), str(PACKAGE)):
            assert machine not in text, (name, machine, [ln for ln in text.splitlines() if machine in ln][:3])
        if name != "report.html":  # its images are base64 text
            assert machine_paths(text) == [], (name, machine_paths(text))
    assert "evalsuite.reason=engine failed in legal: see worse/engine.log; details in $EVALSUITE_CACHE/x.log" \
        in shared["MLflow tags and params"]
    assert "evalsuite/verdict/gate_rules_smoke.yaml" in shared["report.md"]
