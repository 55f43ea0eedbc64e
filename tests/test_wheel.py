"""What a stranger gets from `pip install evalsuite`: the wheel built from this checkout, installed in a
fresh venv outside it, run from a folder outside it. The heavy dependencies (vLLM, torch, MLflow) are
this environment's, seen through a .pth file, so that nothing is downloaded twice; evalsuite itself
comes from the wheel alone (PYTHONPATH cleared, and checked)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.engine

from evalsuite.cli.shipped import DEFAULT_RULES

REPO = Path(__file__).resolve().parents[1]
PACKAGE_DATA = ["evalsuite/tasks/defs/mmlu.yaml", "evalsuite/tasks/defs/legalbench_cuad.yaml",
                "evalsuite/tasks/defs/data/legalbench-cuad/governing_law/test.tsv", "evalsuite/configs/starter.yaml",
                "evalsuite/configs/examples/qwen2.5-7b-instruct-128k.yaml", DEFAULT_RULES.relative_to(REPO).as_posix(),
                "evalsuite/configs/models/index.yaml", "evalsuite/configs/models/gemma-3-270m-q4_k_m.json"]


def sh(*args, cwd: Path, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    res = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, f"{args}: {res.stdout[-2000:]}{res.stderr[-3000:]}"
    return res


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict]:
    """(the venv's bin folder, an environment without this checkout on any path)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"  # what the build reads, copied so the build writes nothing into the checkout
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "evalsuite", src / "evalsuite", ignore=shutil.ignore_patterns("__pycache__"))
    sh(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", tmp / "dist",
       src, cwd=tmp)
    (wheel,) = (tmp / "dist").glob("evalsuite-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert not [n for n in PACKAGE_DATA if n not in names], sorted(names)
    venv = tmp / "venv"
    sh(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp)
    sh(sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "--no-deps", "--no-index", wheel,
       cwd=tmp)
    site = Path(sh(venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                   cwd=tmp).stdout.strip())
    (site / "heavy_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    where = sh(venv / "bin" / "python", "-c", "import evalsuite; print(evalsuite.__file__)", cwd=tmp, env=env).stdout
    assert Path(where.strip()).is_relative_to(venv), where
    return venv / "bin", env


def test_the_installed_wheel_inits_validates_and_runs_the_smoke_config(installed, tmp_path, tiny_model):
    bin_, env = installed
    evalsuite = bin_ / "evalsuite"
    assert not tmp_path.is_relative_to(REPO)
    assert sh(evalsuite, "--version", cwd=tmp_path, env=env).stdout.startswith("evalsuite ")
    sh(evalsuite, "init", "--device", "cpu", cwd=tmp_path, env=env)
    assert "ok (3 variant(s), 3 task(s))" in sh(evalsuite, "validate", "evalsuite.yaml", cwd=tmp_path, env=env).stdout
    # plan before any import: the bundle's config.json from the wheel, one row per variant
    planned = json.loads(sh(evalsuite, "plan", "--gpu", "cpu", "--format", "json", cwd=tmp_path,
                            env={**env, "EVALSUITE_CACHE": str(tmp_path / "empty-cache")}).stdout)
    assert set(planned) == {"bf16", "w4a16_sim", "kv_fp8"} and all(p["fits"] for p in planned.values())
    sh(evalsuite, "init", "gpu", "--device", "gpu", cwd=tmp_path, env=env)  # the GPU starter ships in the wheel too
    assert "ok (6 variant(s), 4 task(s))" in sh(evalsuite, "validate", "gpu/evalsuite.yaml", cwd=tmp_path, env=env).stdout
    assert "ok (9 variant(s)" in sh(evalsuite, "validate", "examples/qwen2.5-7b-instruct", cwd=tmp_path, env=env).stdout
    # the smoke run on the tiny model: every task kind, the CUAD data and task definitions from the wheel
    sh(evalsuite, "init", "--model", tiny_model, "--device", "cpu", "--force", cwd=tmp_path, env=env)
    res = sh(evalsuite, "run", "evalsuite.yaml", "-V", "bf16", "--limit", "2", "--no-progress", cwd=tmp_path, env=env,
             timeout=900)
    (run,) = [p for p in (tmp_path / "runs").iterdir() if (p / "run.json").is_file()]
    (bf16,) = json.loads((run / "run.json").read_text())["variants"]
    assert bf16["status"] == "ok", bf16.get("reason")
    got = {m["name"]: m.get("n") for m in bf16["metrics"]}
    assert got["mmlu/acc"] == got["legal/balanced_acc"] == got["needle/acc"] == 2, got
    assert "latency/ttft_ms_p50" in got and "mmlu/acc" in res.stdout
    assert yaml.safe_load((run / "config.yaml").read_text())["limit"] == 2
