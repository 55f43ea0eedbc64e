"""Archives and kept scores damaged on purpose, as test_damaged_run_folders.py damages run folders: `results
fetch` and `import` say what is wrong in one line and exit 2, or read past what they do not use; never a
traceback, a hang, or a file written or removed outside the page's folder or the new run folder.

hypothesis damages one file at a time: a page's archive record, its fetch record and the archive itself (its
sha256 recorded anew, so the damage reaches the unpacking), and a kept folder's result, config and gzip
scores (their lines damaged inside the gzip, or the file itself): a value of another type, a key removed,
the file cut short, binary bytes, nesting 200,000 levels deep, a FIFO, a folder or a link to /dev/zero.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from evalsuite.cli.main import app
from tests.results_pages import DATA, SAMPLE
from tests.test_damaged_run_folders import HANG_S, OTHER_VALUES, alarm, damage
from tests.test_results_archive import packed

cli = CliRunner()
PAGE = ["archive.json", ".fetched.json", "tiny-v1.tar.gz"]
KEPT = ["bf16/result.json", "bf16/config.yaml", "bf16/latency.scores.jsonl.gz", "fp8/result.json",
        "fp8/latency.scores.jsonl.gz"]
KINDS = ["retype", "drop", "cut", "binary", "deep", "fifo", "folder", "devzero"]


@pytest.fixture(scope="module")
def material(tmp_path_factory) -> Path:
    """A pages root with the tiny page (packed, not fetched), its archives, and a kept scores folder."""
    tmp = tmp_path_factory.mktemp("material")
    packed(tmp)
    shutil.copytree(DATA / SAMPLE / "latency", tmp / "kept")
    return tmp


def snapshot(root: Path, skip: tuple[str, ...]) -> dict[str, bytes]:
    """Every regular file under `root` outside the folders a command may write (`skip`), with its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.is_symlink() and not str(p.relative_to(root)).startswith(skip)}


def damage_gz(target: Path, kind: str, pick: int, value, cut: float, noise: bytes) -> str:
    """A kept gzip's lines damaged inside the gzip (retype, drop, deep), else the file itself."""
    if kind not in ("retype", "drop", "deep"):
        return damage(target, kind, pick, value, cut, noise)
    lines = target.with_suffix(".jsonl")
    lines.write_bytes(gzip.decompress(target.read_bytes()))
    how = damage(lines, kind, pick, value, cut, noise)
    target.write_bytes(gzip.compress(lines.read_bytes()))
    lines.unlink()
    return how


def reseal(clone: Path, archive: Path) -> None:
    """The page's record of `archive` made to match its (damaged) bytes, as a forged page would."""
    record = json.loads((clone / "tiny" / "archive.json").read_text())
    data = archive.read_bytes() if archive.is_file() and not archive.is_symlink() else b""
    record.update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    (clone / "tiny" / "archive.json").write_text(json.dumps(record))


def run_damaged(material: Path, target: str, kind: str, pick: int, value, cut: float, noise: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shutil.copytree(material, root, dirs_exist_ok=True)
        (root / "outside").mkdir()
        (root / "outside" / "victim").write_text("theirs\n")
        clone, archives, kept = root / "clone", root / "archives", root / "kept"
        fetch = ["results", "fetch", "tiny", "--root", str(clone), "--from", str(archives)]
        if target in PAGE:
            if target == ".fetched.json":  # a fetch record of an earlier fetch, damaged since
                assert cli.invoke(app, fetch).exit_code == 0
            path = archives / target if target.endswith(".tar.gz") else clone / "tiny" / target
            kind = kind if not target.endswith(".tar.gz") or kind in ("cut", "binary") else "cut"
            how = damage(path, kind, pick, value, cut, noise)
            if target.endswith(".tar.gz"):
                reseal(clone, path)
            args, writes = fetch, ("clone/tiny",)
        else:
            path = kept / target
            how = (damage_gz if target.endswith(".gz") else damage)(path, kind, pick, value, cut, noise)
            args, writes = ["import", str(kept), str(root / "out")], ("out", ".out-")
        before = snapshot(root, writes)
        with alarm(HANG_S):
            res = cli.invoke(app, args)
        said = f"{args[0]} on {target}: {how}: exit {res.exit_code}\n{res.output}"
        assert res.exception is None or isinstance(res.exception, SystemExit), said + repr(res.exception)
        assert "Traceback" not in res.output and res.exit_code in (0, 2), said
        if res.exit_code == 2:
            lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
            assert len(lines) == 1 and lines[0].startswith("evalsuite: error: ") and len(lines[0]) < 2000, said
            assert str(root) in lines[0], said  # names the file (or its folder)
            assert not (root / "out").exists(), said  # no half-made run folder
        assert snapshot(root, writes) == before, said  # nothing outside written or removed
        assert (root / "outside" / "victim").read_text() == "theirs\n"
        assert not list(root.rglob(".fetch-*")), said


@pytest.mark.parametrize("command", ["fetch", "import"])
def test_the_untouched_material_is_read(material, command):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shutil.copytree(material, root, dirs_exist_ok=True)
        if command == "fetch":
            res = cli.invoke(app, ["results", "fetch", "tiny", "--root", str(root / "clone"), "--from",
                                   str(root / "archives")])
        else:
            res = cli.invoke(app, ["import", str(root / "kept"), str(root / "out")])
        assert res.exit_code == 0, res.output


# derandomized: the same cases on every machine and run; not shrunk: a case names its damage in full
@settings(max_examples=40, deadline=None, derandomize=True, database=None, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(target=st.sampled_from(PAGE + KEPT), kind=st.sampled_from(KINDS), pick=st.integers(0, 10_000),
       value=st.sampled_from(OTHER_VALUES), cut=st.floats(0, 1), noise=st.binary(min_size=1, max_size=16))
def test_a_damaged_archive_or_kept_folder_is_refused_in_one_line_or_read_past(material, target, kind, pick, value,
                                                                             cut, noise):
    run_damaged(material, target, kind, pick, value, cut, noise)
