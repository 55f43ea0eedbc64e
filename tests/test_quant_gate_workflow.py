"""The pull-request gate as .github/workflows/quant-gate.yml runs it: configs/cpu-smoke.yaml run twice
from a fresh clone of the same commit, then scripts/quant_gate.sh on the two runs. The same code must
pass on evidence (exit 0, under the smoke rules its config names); a planted regression, the simulated
INT4 variant's answers as the candidate's bf16, must fail (exit 1).

Only bf16 runs on both sides and w4a16_sim on the candidate's alone (`-V`): the script gates the
variants both sides ran, and the simulated INT4 variant is needed only for the planted regression;
the others need AVX-512 and are skipped on the runners the workflow uses. Real engine, two runs of
the config: several minutes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.engine, pytest.mark.timeout(3600)]
REPO = Path(__file__).resolve().parents[1]


def _run(clone: Path, out: Path, env: dict, *variants: str) -> Path:
    picked = [a for v in variants for a in ("-V", v)]
    res = subprocess.run([sys.executable, "-m", "evalsuite", "run", "configs/cpu-smoke.yaml", "--output-dir", str(out),
                          "--no-progress", *picked], cwd=clone, env=env, capture_output=True, text=True, timeout=3000)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "warning:" not in res.stdout, res.stdout  # sized to resolve its rules: nothing said before the engine
    return next(p for p in out.iterdir() if (p / "run.json").is_file())


def _gate(clone: Path, base: Path, cand: Path, out: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "scripts/quant_gate.sh", sys.executable, str(base), str(cand), str(out)], cwd=clone,
                          env=env, capture_output=True, text=True, timeout=1800)


def _plant(cand: Path, into: Path) -> Path:
    """A copy of the candidate run whose bf16 is the simulated INT4 variant."""
    shutil.copytree(cand, into)
    shutil.rmtree(into / "bf16")
    (into / "w4a16_sim").rename(into / "bf16")
    result = json.loads((into / "bf16" / "result.json").read_text())
    (into / "bf16" / "result.json").write_text(json.dumps({**result, "variant": "bf16"}))
    record = json.loads((into / "run.json").read_text())
    sim = next(v for v in record["variants"] if v["variant"] == "w4a16_sim")
    record["variants"] = [{**sim, "variant": "bf16"}]
    (into / "run.json").write_text(json.dumps(record))
    return into


def test_the_workflow_gate_passes_the_same_code_and_fails_a_planted_regression(tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    env = {**os.environ, "PYTHONPATH": str(clone)}
    base = _run(clone, tmp_path / "runs-baseline", env, "bf16")
    cand = _run(clone, tmp_path / "runs-candidate", env, "bf16", "w4a16_sim")
    res = _gate(clone, base, cand, tmp_path / "out", env)
    md = (tmp_path / "out" / "gate.md").read_text()
    assert res.returncode == 0, md
    assert "evalsuite gate passed" in md and "the shipped smoke rules" in md, md
    planted = _plant(cand, tmp_path / "runs-planted" / cand.name)
    res = _gate(clone, base, planted, tmp_path / "out-planted", env)
    md = (tmp_path / "out-planted" / "gate.md").read_text()
    assert res.returncode == 1, md
    assert "evalsuite gate failed" in md and "needle/acc" in md, md
