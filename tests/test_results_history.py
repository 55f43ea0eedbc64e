"""A results page's data rebuilt from the clone's own history: the commit the page records holds its
files, `fetch` rebuilds the archive from it with no host asked, checks it against the page's sha256,
and a shallow clone is told in one line what to fetch. Every published page's archive rebuilds here."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import zlib
from pathlib import Path

import pytest

from evalsuite.results.pages import pages
from tests.test_results_archive import DATA, data_files, run, tiny_page

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "docs" / "results"
# what the pages' archives may add to every full clone (docs/results/README.md: 21.5 MB today)
ARCHIVE_BUDGET_BYTES = 40_000_000
# zlib-ng compresses the same tar to other gzip bytes; the tar's sha256 is then what a rebuild checks
ZLIB_NG = "ng" in zlib.ZLIB_RUNTIME_VERSION


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), "-c", "user.name=t", "-c", "user.email=t@example.com",
                           "-c", "commit.gpgsign=false", *args], check=True, capture_output=True, text=True).stdout


def repo_with_page(tmp: Path) -> Path:
    """A repository whose first commit holds the tiny page's data and whose second takes it out of
    the tree, as docs/results/README.md says to publish a page; the data is gone from the checkout."""
    repo = tmp / "repo"
    tiny_page(repo / "pages")
    shutil.copyfile(RESULTS / ".gitignore", repo / "pages" / ".gitignore")  # the data is ignored, as in docs/results
    git(tmp, "init", "-q", "-b", "main", str(repo))
    git(repo, "add", "-f", "pages")
    git(repo, "commit", "-q", "-m", "results: tiny's data")
    code, said = run("results", "pack", "tiny", "--root", str(repo / "pages"), "--out", str(tmp / "out"),
                     "--summary", "claims.json", "--commit", "HEAD")
    assert code == 0 and "note:" not in said, said
    git(repo, "rm", "-r", "-q", "--cached", "pages/tiny")
    git(repo, "add", "pages")
    git(repo, "commit", "-q", "-m", "results: tiny's data leaves the tree")
    for rel in DATA:
        (repo / "pages" / "tiny" / rel).unlink()
    return repo


def test_fetch_rebuilds_the_archive_from_the_commit_the_page_records(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv("EVALSUITE_RESULTS_FROM", raising=False)
    repo = repo_with_page(tmp_path)
    record = json.loads((repo / "pages" / "tiny" / "archive.json").read_text())
    assert record["commit"] == git(repo, "rev-parse", "HEAD~1").strip()
    packed = (tmp_path / "out" / record["file"]).read_bytes()
    assert hashlib.sha256(packed).hexdigest() == record["sha256"]
    page_text = (repo / "pages" / "tiny.md").read_text()
    assert f"commit `{record['commit'][:12]}`" in page_text and "releases" not in page_text

    code, said = run("results", "fetch", "tiny", "--root", str(repo / "pages"))
    assert code == 0 and f"rebuilt from commit {record['commit'][:12]}" in said and "4 files unpacked" in said, said
    assert data_files(repo / "pages" / "tiny") == DATA
    assert "compresses it to" not in caplog.text or ZLIB_NG  # the gzip's sha256 is the page's too
    assert git(repo, "status", "--porcelain") == ""  # the page's tracked files as they were, the data ignored
    assert not list(repo.rglob(".fetch-*"))


def test_a_shallow_clone_says_in_one_line_what_to_fetch(tmp_path):
    repo = repo_with_page(tmp_path)
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", repo.as_uri(), str(shallow)], check=True, capture_output=True)
    code, said = run("results", "fetch", "tiny", "--root", str(shallow / "pages"))
    assert code == 1 and "this clone is shallow: run `git fetch --unshallow`" in said and "--from DIR|URL" in said
    assert len(said.strip().splitlines()) == 1 and "Traceback" not in said
    assert data_files(shallow / "pages" / "tiny") == {}
    git(shallow, "fetch", "-q", "--unshallow")  # what the line says; then the data is there
    code, said = run("results", "fetch", "tiny", "--root", str(shallow / "pages"))
    assert code == 0 and data_files(shallow / "pages" / "tiny") == DATA, said


@pytest.mark.parametrize("change,said", [({"tar_sha256": "0" * 64}, "make a tar with sha256"),
                                         ({"files": 5}, "holds 4 files"), ({"unpacked_bytes": 1}, "holds 4 files")])
def test_a_rebuilt_tar_that_is_not_the_pages_is_refused(tmp_path, change, said):
    repo = repo_with_page(tmp_path)
    manifest = repo / "pages" / "tiny" / "archive.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), **change}))
    code, out = run("results", "fetch", "tiny", "--root", str(repo / "pages"))
    assert code == 1 and said in out and "refused, nothing unpacked" in out and len(out.strip().splitlines()) == 1, out
    assert data_files(repo / "pages" / "tiny") == {} and not list(repo.rglob(".fetch-*"))


def test_a_link_in_the_commit_is_refused(tmp_path):
    repo = repo_with_page(tmp_path)
    (repo / "pages" / "tiny" / "scores").mkdir(exist_ok=True)
    os.symlink("/etc/passwd", repo / "pages" / "tiny" / "scores" / "evil")
    git(repo, "add", "-f", "pages/tiny/scores/evil")
    git(repo, "commit", "-q", "-m", "a link")
    (repo / "pages" / "tiny" / "scores" / "evil").unlink()
    manifest = repo / "pages" / "tiny" / "archive.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "commit": git(repo, "rev-parse", "HEAD").strip()}))
    code, said = run("results", "fetch", "tiny", "--root", str(repo / "pages"))
    assert code == 1 and "not a plain file (git mode 120000)" in said and len(said.strip().splitlines()) == 1, said
    assert data_files(repo / "pages" / "tiny") == {}


def test_pack_records_a_commit_only_if_it_holds_the_same_files(tmp_path):
    repo = repo_with_page(tmp_path)
    pages_root = repo / "pages"
    for rel, data in DATA.items():
        (pages_root / "tiny" / rel).write_bytes(data)
    (pages_root / "tiny" / "report" / "latency.png").write_bytes(b"\x89PNG another plot")
    code, said = run("results", "pack", "tiny", "--root", str(pages_root), "--out", str(tmp_path / "o"), "--commit", "HEAD~1")
    assert code == 2 and "--commit HEAD~1: its files in pages/tiny/" in said and "git add -f" in said, said
    code, said = run("results", "pack", "tiny", "--root", str(pages_root), "--out", str(tmp_path / "o"), "--commit", "nope")
    assert code == 2 and "--commit nope: not a commit of" in said and len(said.strip().splitlines()) == 1
    code, said = run("results", "pack", "tiny", "--root", str(pages_root), "--out", str(tmp_path / "o"))
    assert code == 0 and "tiny-v2.tar.gz" in said and "no commit holds these files" in said, said
    record = json.loads((pages_root / "tiny" / "archive.json").read_text())
    assert "commit" not in record and "no commit of this repository holds its files" in (pages_root / "tiny.md").read_text()
    for rel in DATA:
        (pages_root / "tiny" / rel).unlink()
    code, said = run("results", "fetch", "tiny", "--root", str(pages_root))
    assert code == 1 and "names no commit" in said and "--from DIR|URL" in said, said


def test_a_page_outside_a_clone_says_so_in_one_line(tmp_path):
    repo = repo_with_page(tmp_path)
    loose = tmp_path / "loose"
    shutil.copytree(repo / "pages", loose)
    code, said = run("results", "fetch", "tiny", "--root", str(loose))
    assert code == 1 and "not in a git clone" in said and "--from DIR|URL" in said and len(said.strip().splitlines()) == 1


def test_no_host_is_a_default_source(monkeypatch):
    from evalsuite.core.errors import ConfigError
    from evalsuite.results.sources import _allowed, default_source

    monkeypatch.delenv("EVALSUITE_RESULTS_FROM", raising=False)
    assert default_source() is None  # the clone's own history
    with pytest.raises(ConfigError, match="not an allowed source"):
        _allowed("https://github.com/o/r/releases/download/results/p-v1.tar.gz", ())


def _shallow(repo: Path) -> bool:
    return git(repo, "rev-parse", "--is-shallow-repository").strip() == "true"


def test_every_published_page_rebuilds_from_this_clones_history(tmp_path, monkeypatch):
    """Each page's archive by the default path (the commit it records, an ancestor of HEAD), its
    sha256 the page's; a page without one says which figures cannot be recomputed and why. .ci/run
    makes a shallow CI clone whole first, as a user must (the line fetch says)."""
    from evalsuite.results.archive import unpack
    from evalsuite.results.sources import default_source, obtain

    monkeypatch.delenv("EVALSUITE_RESULTS_FROM", raising=False)
    assert not _shallow(REPO), "a shallow clone holds no pages' data: `git fetch --unshallow` (as .ci/run does)"
    total = 0
    for page in pages(RESULTS):
        archive, text = page.archive(), page.markdown.read_text()
        if archive is None:
            assert "No data archive" in text, f"{page.markdown}: say which figures cannot be recomputed and why"
            continue
        assert f"bash lab/regen_results.sh {page.name}" in text, f"{page.markdown}: its recompute command"
        assert archive.commit and subprocess.run(["git", "-C", str(REPO), "merge-base", "--is-ancestor", archive.commit,
                                                  "HEAD"]).returncode == 0, f"{page.name}: commit not in HEAD's history"
        dest = tmp_path / page.name
        dest.mkdir()
        file = obtain(default_source(), page, archive, dest)
        sha = hashlib.sha256(file.read_bytes()).hexdigest()
        assert sha == archive.sha256 or ZLIB_NG, f"{page.name}: rebuilt sha256 {sha}, the page's {archive.sha256}"
        assert len(unpack(page, archive, file, dest)) == archive.files
        total += archive.bytes
    assert total <= ARCHIVE_BUDGET_BYTES



def test_a_pages_decision_tables_are_its_reports_rows():
    """What a page shows under "Decision table" is copied from its report.md files, row by row, so that
    recomputing the reports (tests/test_results_recompute.py) recomputes the page's tables too."""
    checked = 0
    for page in pages(RESULTS):
        reports = {line for f in page.folder.glob("report*/report.md") for line in f.read_text().splitlines()
                   if line.startswith("|")}
        section = False
        for line in page.markdown.read_text().splitlines():
            if line.startswith("## "):
                section = line.startswith("## Decision table")
            elif section and line.startswith("|"):
                assert line in reports, f"{page.markdown}: not a row of its reports: {line[:120]}"
                checked += 1
    assert checked > 60  # the 1.5B and 0.5B pages' tables
