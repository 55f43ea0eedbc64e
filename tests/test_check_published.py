"""The published H200 claims report is what `evalsuite check` says today on the kept run folders.

docs/results/claims-2026-12-02 keeps the run folders (prompts' token ids stripped) and check's report;
the 1.5B accuracy runs are rebuilt from their kept per-item scores as the page's "Reproduce" does. A
change to check, the claims file or the statistics that moves a published verdict, number or interval
fails here until the page is regenerated.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "results" / "claims-2026-12-02"


def test_published_claims_report_reproduces(tmp_path):
    qwen15 = tmp_path / "qwen15"
    subprocess.run([sys.executable, str(REPO / "lab" / "scores.py"), "rundir",
                    str(REPO / "docs" / "results" / "h200-2026-12-01-qwen2.5-coder-1.5b" / "scores"),
                    str(REPO / "lab" / "configs" / "h200" / "qwen-1.5b-accuracy.yaml"), str(qwen15)],
                   check=True, capture_output=True, timeout=600)
    out = tmp_path / "claims.json"
    res = subprocess.run([sys.executable, "-m", "evalsuite", "check", str(REPO / "configs" / "claims" / "long-context-128k.yaml"),
                          *map(str, sorted((PAGE / "runs").iterdir())), str(qwen15), "--json", str(out)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 1, res.stderr[-2000:]  # a claim not held, as published

    def rows(report):
        return [(c["id"], c["verdict"], [(k["what"], k["verdict"], k["measured"], k["interval"]) for k in c["checks"]])
                for c in report["claims"]]

    assert rows(json.loads(out.read_text())) == rows(json.loads((PAGE / "claims.json").read_text()))
