"""A machine that refuses writes (a full disk, a read-only output folder) ends a run with one line
and exit 4, the variant in hand scored `partial` from what it recorded, and --resume completes it.

The fault is injected in-process (OSError ENOSPC at the samples file, EROFS at the run folder);
the engine is the fake one, the records and the CLI are real.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import yaml
from typer.testing import CliRunner

from evalsuite.cli.main import app
from evalsuite.core import rundir

cli = CliRunner()


def config(tmp: Path, model: Path) -> Path:
    path = tmp / "disk.yaml"
    path.write_text(yaml.safe_dump({
        "model": {"path": str(model)}, "engine": {"mode": "fake", "batch_size": 2},
        "variants": {"bf16": {"max_model_len": 2048}},
        "tasks": [{"type": "mmlu", "subjects": ["anatomy"], "limit_per_subject": 8, "num_fewshot": 0}],
        "tracking": {"enabled": False}, "output_dir": str(tmp / "runs"),
    }))
    return path


def test_full_disk_leaves_a_resumable_partial_variant(tmp_path, tiny_model, monkeypatch):
    cfg = config(tmp_path, tiny_model)
    real, calls = rundir._write_fd, []

    def fills_up(path, flags):
        if Path(path).name == "mmlu.jsonl":  # the samples file; the run's other appends (phases.jsonl) go by
            calls.append(path)
            if len(calls) == 3:  # two batches recorded, then no room
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real(path, flags)

    monkeypatch.setattr(rundir, "_write_fd", fills_up)
    res = cli.invoke(app, ["run", str(cfg), "--no-progress"])
    assert res.exit_code == 4, res.output
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("evalsuite: error: ") and "mmlu.jsonl: cannot write (No space left on device)" in last
    assert "Traceback" not in res.output
    (run,) = (tmp_path / "runs").iterdir()
    result = json.loads((run / "bf16" / "result.json").read_text())
    assert result["status"] == "partial" and "mmlu 4" in result["reason"]
    monkeypatch.setattr(rundir, "_write_fd", real)
    res = cli.invoke(app, ["run", str(cfg), "--resume", "--no-progress"])
    assert res.exit_code == 0, res.output
    ids = [json.loads(line)["sample"]["id"] for line in (run / "bf16" / "samples" / "mmlu.jsonl").read_text().splitlines()]
    assert len(ids) == len(set(ids)) == 8
    assert json.loads((run / "run.json").read_text())["variants"][0]["status"] == "ok"


def test_read_only_output_folder_is_exit_4(tmp_path, tiny_model, monkeypatch):
    cfg = config(tmp_path, tiny_model)
    out = tmp_path / "ro"
    real = os.mkdir

    def read_only(path, *args, **kwargs):
        if Path(path).is_relative_to(out):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", read_only)
    res = cli.invoke(app, ["run", str(cfg), "-o", str(out), "--no-progress"])
    assert res.exit_code == 4, res.output
    assert res.stderr.strip().splitlines() == [f"evalsuite: error: --output-dir {out}: cannot make a run folder there "
                                               "(Read-only file system)"]
    assert not out.exists()
