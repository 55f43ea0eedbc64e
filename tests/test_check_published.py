"""The published H200 claims report is what `evalsuite check` says today on the kept run folders.

claims-2026-12-02's data archive holds the run folders (prompts' token ids stripped); the test
serves the published archive from a local folder, fetches it as the page says (its sha256 checked
against the page's), rebuilds the 1.5B accuracy run from kept per-item scores with `evalsuite import`
as the page's "Reproduce" does, and runs `check`. A change to check, the claims file or the statistics
that moves a published verdict, number or interval fails here until the page is regenerated.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.results_pages import SAMPLE

REPO = Path(__file__).resolve().parent.parent


def test_published_claims_report_reproduces(tmp_path, results_pages):
    from evalsuite.results import page_data

    # claim 5 reads bf16 and fp8 of the 1.5B accuracy run, `qwen-1.5b*` by its name
    qwen15 = tmp_path / "qwen-1.5b-accuracy"
    subprocess.run([sys.executable, "-m", "evalsuite", "import", str(page_data(SAMPLE, results_pages) / "scores"),
                    str(qwen15), "-V", "bf16", "-V", "fp8"], check=True, capture_output=True, timeout=600)
    runs = page_data("claims-2026-12-02", results_pages) / "runs"
    out = tmp_path / "claims.json"
    res = subprocess.run([sys.executable, "-m", "evalsuite", "check", str(REPO / "configs" / "claims" / "long-context-128k.yaml"),
                          *map(str, sorted(runs.iterdir())), str(qwen15), "--json", str(out)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 1, res.stderr[-2000:]  # a claim not held, as published

    def rows(report):
        return [(c["id"], c["verdict"], [(k["what"], k["verdict"], k["measured"], k["interval"]) for k in c["checks"]])
                for c in report["claims"]]

    published = REPO / "docs" / "results" / "claims-2026-12-02" / "claims.json"
    assert rows(json.loads(out.read_text())) == rows(json.loads(published.read_text()))
