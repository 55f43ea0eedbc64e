"""Per-item scores kept as `evalsuite export` keeps a GPU run's, cut to a partial variant, and seeded
back with `evalsuite import --for-resume`."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from evalsuite.cli.main import app
from evalsuite.results.scores import read_rows, write_rows

cli = CliRunner()


def export(run: Path, dest: Path) -> str:
    res = cli.invoke(app, ["export", str(run), "--scores", str(dest)])
    assert res.exit_code == 0, res.output
    return res.output


def seed(kept: Path, config: Path, output_dir: Path, variants: list[str]) -> tuple[int, str]:
    """`evalsuite import KEPT OUTPUT_DIR --config CONFIG --for-resume -V ...`: (exit code, output)."""
    res = cli.invoke(app, ["import", str(kept), str(output_dir), "--config", str(config), "--for-resume",
                           *(a for v in variants for a in ("-V", v))])
    return res.exit_code, res.output


def kept_partial(run: Path, dest: Path, variant: str, mmlu_items: int, status: str = "partial") -> Path:
    """Export `run`'s scores to `dest`, then leave `variant` as a session that ended after its first
    `mmlu_items` MMLU items (status `partial`; `ok` for a session whose grid was that small),
    everything else kept whole."""
    export(run, dest)
    mmlu = dest / variant / "mmlu.scores.jsonl.gz"
    write_rows(mmlu, read_rows(mmlu)[:mmlu_items])
    result = json.loads((dest / variant / "result.json").read_text())
    (dest / variant / "result.json").write_text(json.dumps({**result, "status": status}))
    return dest
