"""Run folders damaged on purpose: every command that reads one says what is wrong in one line and exits 2,
or reads past what it does not use; never a traceback, never a hang, never a gate that passes.

A real run (the fake engine, the real records and CLI) is made once; hypothesis then damages a copy of it
in one place at a time (a value of another type, a key removed, the file cut short, binary bytes, nesting
200,000 levels deep, a FIFO, a folder or a link to /dev/zero in the file's place) and runs compare, gate, report, finish, check
and `run --resume` on it. Each command runs in this process under an alarm: a read that blocks (a FIFO
opened without O_NONBLOCK) ends the test as a hang instead of stalling it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from evalsuite.cli.main import app

cli = CliRunner()
HANG_S = 60  # a command on this small folder takes about a second
CLAIMS = """\
claims:
  - id: 1
    text: the candidate keeps MMLU within 100 points
    where: a test
    checks:
      - what: MMLU accuracy
        metric: mmlu/acc
        baseline: bf16
        candidate: worse
        effect: {kind: points, between: [-100, 100]}
"""


class Hang(BaseException):
    """A command ran past HANG_S (a BaseException, so that no `except Exception` in the code swallows it)."""


@contextmanager
def alarm(seconds: float):
    def ring(signum, frame):
        raise Hang(f"no answer after {seconds} s")

    old = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def make_config(tmp: Path, model: Path) -> Path:
    path = tmp / "hostile.yaml"
    path.write_text(yaml.safe_dump({
        "model": {"path": str(model)},
        "defaults": {"dtype": "bfloat16", "max_model_len": 2048},
        "engine": {"mode": "fake", "batch_size": 8},
        "variants": {"bf16": {}, "worse": {"engine_args": {"fake_disagree": 0.5}}},
        "baseline": "bf16",
        "tasks": [{"type": "mmlu", "subjects": ["anatomy", "astronomy"], "limit_per_subject": 20, "num_fewshot": 0}],
        "latency": {"prompt_tokens": [16], "output_tokens": 2, "repeats": 2},
        "tracking": {"enabled": False},
    }))
    return path


@pytest.fixture(scope="module")
def made(tmp_path_factory, tiny_model) -> tuple[Path, Path]:
    """(the config, its one run folder, complete and untouched)."""
    tmp = tmp_path_factory.mktemp("made")
    cfg = make_config(tmp, tiny_model)
    res = cli.invoke(app, ["run", str(cfg), "-o", str(tmp / "runs"), "--no-progress"])
    assert res.exit_code == 0, res.output
    (run,) = (tmp / "runs").iterdir()
    (tmp / "claims.yaml").write_text(CLAIMS)
    return cfg, run


def record_files(run: Path) -> list[str]:
    names = ["run.json", "config.yaml", "env.json"]
    for v in ("bf16", "worse"):
        names += [f"{v}/result.json", *(f"{v}/samples/{p.name}" for p in sorted((run / v / "samples").iterdir()))]
    return names


def commands(cfg: Path, run: Path, tmp: Path) -> dict[str, list[str]]:
    return {
        "compare": ["compare", str(run)],
        "gate": ["gate", "--baseline", f"{run}:bf16", "--candidate", f"{run}:worse"],
        "report": ["report", str(run), "--out", str(tmp / "page")],
        "check": ["check", str(cfg.parent / "claims.yaml"), str(run)],
        "finish": ["finish", str(run)],
        "resume": ["run", str(cfg), "--resume", "-o", str(run.parent), "--no-progress"],
    }


# What each command may answer on a damaged folder: never 0 for the gate, whose untouched verdict is
# "inconclusive" (the fake engine's answers leave MMLU at chance), so a pass could only come from the damage.
ALLOWED = {"compare": {0, 2}, "gate": {1, 2, 3}, "report": {0, 2}, "check": {0, 1, 2}, "finish": {0, 2},
           "resume": {0, 2}}


def run_damaged(cfg: Path, run: Path, harm=lambda root: "nothing") -> dict[str, int]:
    """Each command on its own copy of the folder (finish and resume write to it), damaged by `harm`;
    the exit codes."""
    codes = {}
    for name in ALLOWED:
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / "runs" / run.name
            shutil.copytree(run, copy)
            damaged = harm(copy)
            args = commands(cfg, copy, Path(tmp))[name]
            with alarm(HANG_S):
                res = cli.invoke(app, args)
            codes[name] = res.exit_code
            said = f"{name} on {damaged}: exit {res.exit_code}\n{res.output}"
            assert res.exception is None or isinstance(res.exception, SystemExit), said + repr(res.exception)
            assert "Traceback" not in res.output, said
            assert res.exit_code in ALLOWED[name], said
            if res.exit_code == 2:
                lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
                if name == "resume":  # where it continues is said first, as in any resumed run
                    lines = lines[-1:] if lines[0].startswith("run ") else lines
                assert len(lines) == 1 and lines[0].startswith("evalsuite: error: "), said
                assert str(copy) in lines[0], said  # names the file (or the folder)
    return codes


# ---------------------------------------------------------------- damage


def paths(data: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path and list index in a parsed record, the record itself first."""
    out = [prefix]
    if isinstance(data, dict):
        for k, v in data.items():
            out += paths(v, prefix + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out += paths(v, prefix + (i,))
    return out


def get(data: Any, path: tuple) -> Any:
    for p in path:
        data = data[p]
    return data


OTHER_VALUES = ["x", "1", 1, 2.5, True, None, [], [1, "a"], {}, {"a": 1}]


def retyped(data: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    get(data, path[:-1])[path[-1]] = value
    return data


def dropped(data: Any, path: tuple) -> Any:
    parent = get(data, path[:-1])
    del parent[path[-1]]
    return data


DEEP = "[" * 200_000 + "]" * 200_000


def damage(target: Path, kind: str, pick: int, value: Any, cut: float, noise: bytes) -> str:
    """Damages one file in place; says how."""
    raw = target.read_bytes()
    if kind == "fifo":
        target.unlink()
        os.mkfifo(target)
        return "a FIFO"
    if kind == "folder":
        target.unlink()
        target.mkdir()
        return "a folder"
    if kind == "devzero":
        target.unlink()
        target.symlink_to("/dev/zero")
        return "a link to /dev/zero"
    if kind == "cut":
        at = int(len(raw) * cut)
        target.write_bytes(raw[:at])
        return f"cut at byte {at}"
    if kind == "binary":
        target.write_bytes(noise + raw[len(noise):])
        return f"bytes {noise!r} over its start"
    lines = raw.decode().splitlines() if target.suffix == ".jsonl" else [raw.decode()]
    n = pick % len(lines)
    data = yaml.safe_load(lines[n]) if target.suffix == ".yaml" else json.loads(lines[n])
    where = paths(data)
    path = where[pick % len(where)]
    if kind == "deep":
        marker = "\u2603deep\u2603"
        text = json.dumps(retyped(data, path, marker)).replace(json.dumps(marker), DEEP)
        how = f"line {n + 1} {'.'.join(map(str, path))} nested 200,000 deep"
    elif kind == "drop" and path:
        text = _dump(dropped(data, path), target)
        how = f"line {n + 1} {'.'.join(map(str, path))} removed"
    else:
        if type(get(data, path)) is type(value):
            value = "x" if not isinstance(value, str) else 3
        text = _dump(retyped(data, path, value), target)
        how = f"line {n + 1} {'.'.join(map(str, path)) or '(top)'} = {value!r}"
    lines[n] = text
    target.write_text("\n".join(lines) + "\n")
    return how


def _dump(data: Any, target: Path) -> str:
    return yaml.safe_dump(data) if target.suffix == ".yaml" else json.dumps(data)


def test_the_untouched_run_is_read_by_every_command(made):
    cfg, run = made
    codes = run_damaged(cfg, run)
    assert codes == {"compare": 0, "gate": 3, "report": 0, "check": 0, "finish": 0, "resume": 0}


# derandomized: the same cases on every machine and run; not shrunk: a case names its damage in full
@settings(max_examples=40, deadline=None, derandomize=True, database=None, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(which=st.integers(0, 1000), kind=st.sampled_from(["retype", "drop", "cut", "binary", "deep", "fifo", "folder",
                                                   "devzero"]),
       pick=st.integers(0, 10_000), value=st.sampled_from(OTHER_VALUES), cut=st.floats(0, 1),
       noise=st.binary(min_size=1, max_size=16))
def test_a_damaged_run_folder_is_refused_in_one_line_or_read_past(made, which, kind, pick, value, cut, noise):
    cfg, run = made
    files = record_files(run)
    name = files[which % len(files)]
    run_damaged(cfg, run, lambda root: f"{name}: {damage(root / name, kind, pick, value, cut, noise)}")
