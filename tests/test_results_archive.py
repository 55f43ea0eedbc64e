"""A results page's data archive: packed reproducibly, fetched only from allowed places, unpacked only
after its size and sha256 are the page's, and only into the page's own folder."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
import tarfile
from http.server import SimpleHTTPRequestHandler
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalsuite.cli.main import app
from evalsuite.core.errors import ConfigError
from evalsuite.results.pages import MARKER, find_page
from tests.results_pages import SAMPLE, serve

REPO = Path(__file__).resolve().parent.parent
cli = CliRunner()

DATA = {"scores/bf16/mmlu.scores.jsonl.gz": b"\x1f\x8b scores", "scores/bf16/result.json": b'{"variant": "bf16"}',
        "report/latency.png": b"\x89PNG plot", "runs/r1/run.json": b'{"run_id": "r1"}'}


def tiny_page(root: Path, name: str = "tiny") -> Path:
    """A page with a Markdown sub-page, a JSON summary and four data files."""
    folder = root / name
    for rel, data in {**DATA, "gate.md": b"# gate\n", "claims.json": b"{}"}.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    (root / f"{name}.md").write_text(f"# {name}\n\nSome text.\n")
    return root


def run(*args: str) -> tuple[int, str]:
    res = cli.invoke(app, list(args))
    return res.exit_code, res.output


def packed(tmp: Path) -> tuple[Path, Path]:
    """(pages root holding the tiny page without its data, folder holding its archive)."""
    src, out = tiny_page(tmp / "src"), tmp / "archives"
    code, said = run("results", "pack", "tiny", "--root", str(src), "--out", str(out), "--summary", "claims.json")
    assert code == 0, said
    clone = tmp / "clone"
    (clone / "tiny").mkdir(parents=True)
    for rel in ("tiny.md", "tiny/archive.json", "tiny/gate.md", "tiny/claims.json"):
        (clone / rel).write_bytes((src / rel).read_bytes())
    return clone, out


def data_files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
            and not p.name.endswith(".md") and p.name not in ("archive.json", "claims.json", MARKER)}


def test_pack_is_reproducible_and_a_change_is_a_new_version(tmp_path):
    """The same files make the same archive whatever their times and modes; a changed file makes the
    next version, and the page quotes the new file and sha256."""
    a, b = tiny_page(tmp_path / "a"), tiny_page(tmp_path / "b")
    for p in (b / "tiny").rglob("*"):
        os.utime(p, (1, 1))
        p.chmod(0o700 if p.is_dir() else 0o600)
    shas = []
    for root in (a, b):
        code, said = run("results", "pack", "tiny", "--root", str(root), "--out", str(root / "out"), "--summary", "claims.json")
        assert code == 0 and "(new version)" in said, said
        shas.append(hashlib.sha256((root / "out" / "tiny-v1.tar.gz").read_bytes()).hexdigest())
    assert shas[0] == shas[1]
    record = json.loads((a / "tiny" / "archive.json").read_text())
    assert (record["file"], record["files"], record["sha256"], record["summaries"]) == ("tiny-v1.tar.gz", 4, shas[0], ["claims.json"])
    with tarfile.open(a / "out" / "tiny-v1.tar.gz") as tar:
        assert sorted(tar.getnames()) == sorted(f"tiny/{rel}" for rel in DATA)  # no Markdown, no summary
        assert {(m.mtime, m.uid, m.mode) for m in tar.getmembers()} == {(0, 0, 0o644)}
    code, said = run("results", "pack", "tiny", "--root", str(a), "--out", str(a / "out"))
    assert code == 0 and "(unchanged)" in said
    (a / "tiny" / "report" / "latency.png").write_bytes(b"\x89PNG another plot")
    code, said = run("results", "pack", "tiny", "--root", str(a), "--out", str(a / "out"))
    assert code == 0 and "tiny-v2.tar.gz" in said
    v2 = json.loads((a / "tiny" / "archive.json").read_text())
    assert v2["version"] == 2 and v2["summaries"] == ["claims.json"]
    page = (a / "tiny.md").read_text()
    assert page.count("<!-- archive:") == 1 and f"sha256 `{v2['sha256']}`" in page and "tiny-v1" not in page


def test_fetch_from_a_folder_or_file_url_checks_and_unpacks_beside_the_page(tmp_path):
    clone, archives = packed(tmp_path)
    from evalsuite.results import page_data

    with pytest.raises(ConfigError, match="the page's data is not there; run `evalsuite results fetch"):
        page_data("tiny", clone)
    code, said = run("results", "fetch", "tiny", "--root", str(clone), "--from", str(archives))
    assert code == 0 and "4 files unpacked" in said, said
    assert data_files(clone / "tiny") == DATA and page_data("tiny", clone) == clone / "tiny"
    assert (clone / "tiny" / "gate.md").read_text() == "# gate\n"  # the tracked files as they were
    code, said = run("results", "fetch", str(clone / "tiny.md"), "--from", (archives / "tiny-v1.tar.gz").as_uri())
    assert code == 0 and "already there" in said
    into = tmp_path / "elsewhere"
    code, said = run("results", "fetch", "tiny", "--root", str(clone), "--from", archives.as_uri(), "--into", str(into))
    assert code == 0 and data_files(into) == DATA, said
    assert not list(tmp_path.rglob(".fetch-*"))  # no download or staging folder left behind


def test_an_archive_that_is_not_the_pages_is_refused_and_nothing_is_unpacked(tmp_path):
    clone, archives = packed(tmp_path)
    f = archives / "tiny-v1.tar.gz"
    f.write_bytes(f.read_bytes()[:-1] + bytes([f.read_bytes()[-1] ^ 1]))
    code, said = run("results", "fetch", "tiny", "--root", str(clone), "--from", str(archives))
    assert code == 2 and "is not the page's" in said and "refused, nothing unpacked" in said
    assert len(said.strip().splitlines()) == 1 and data_files(clone / "tiny") == {}
    f.write_bytes(f.read_bytes() + b"more")
    with serve(archives) as url:
        code, said = run("results", "fetch", "tiny", "--root", str(clone), "--from", url)
    assert code == 2 and "larger than the" in said  # the download stops at the recorded size
    assert not list(tmp_path.rglob(".fetch-*"))


@pytest.mark.parametrize("source", ["http://example.com/results/", "ftp://127.0.0.1/results/",
                                    "https://example.com/results/", "http://10.0.0.1:8000/",
                                    "https://github.com/o/r/releases/download/results/"])
def test_a_source_off_the_allow_list_is_refused_in_one_line(tmp_path, source):
    clone, _ = packed(tmp_path)
    code, said = run("results", "fetch", "tiny", "--root", str(clone), "--from", source)
    assert code == 2 and "not an allowed source (allowed: a folder, file://, https:// from a host named with --trust-host" in said
    assert len(said.strip().splitlines()) == 1


def test_an_explicitly_trusted_https_host_is_allowed():
    from evalsuite.results.sources import _allowed, locate

    url = locate("https://mirror.example/results", "p-v1.tar.gz")
    assert url == "https://mirror.example/results/p-v1.tar.gz"
    assert _allowed(url, ("mirror.example",)) == url
    with pytest.raises(ConfigError):
        _allowed(url, ())
    assert locate("https://mirror.example/results/p-v1.tar.gz", "other").endswith("p-v1.tar.gz")


class _RedirectOut(SimpleHTTPRequestHandler):
    def do_GET(self):
        self.send_response(302)
        self.send_header("Location", "http://example.com/tiny-v1.tar.gz")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_a_redirect_off_the_allow_list_is_not_followed(tmp_path):
    clone, archives = packed(tmp_path)
    with serve(archives, _RedirectOut) as url:
        code, said = run("results", "fetch", "tiny", "--root", str(clone), "--from", url)
    assert code == 2 and "--from http://example.com/tiny-v1.tar.gz: not an allowed source" in said


def _hostile(clone: Path, archives: Path, name: str, kind: bytes = tarfile.REGTYPE, files: int = 1) -> None:
    """An archive holding `name`, with a record that matches it (as if the page itself were forged)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for i in range(files):
            info = tarfile.TarInfo(name if i == 0 else f"tiny/x{i}")
            info.type = kind
            info.linkname = "/etc/passwd" if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE) else ""
            data = b"x" if kind == tarfile.REGTYPE else b""
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    (archives / "tiny-v1.tar.gz").write_bytes(raw.getvalue())
    record = json.loads((clone / "tiny" / "archive.json").read_text())
    record.update(sha256=hashlib.sha256(raw.getvalue()).hexdigest(), bytes=len(raw.getvalue()), files=1, unpacked_bytes=1)
    (clone / "tiny" / "archive.json").write_text(json.dumps(record))


@pytest.mark.parametrize("name,kind,files,said", [
    ("../evil", tarfile.REGTYPE, 1, "not a file of tiny/"),
    ("/etc/evil", tarfile.REGTYPE, 1, "not a file of tiny/"),
    ("tiny/../../evil", tarfile.REGTYPE, 1, "not a file of tiny/"),
    ("other/x", tarfile.REGTYPE, 1, "not a file of tiny/"),
    ("tiny/gate.md", tarfile.REGTYPE, 1, "a file the page keeps in git"),
    ("tiny/.fetched.json", tarfile.REGTYPE, 1, "not a file of tiny/"),
    ("tiny/link", tarfile.SYMTYPE, 1, "is not a plain file"),
    ("tiny/hard", tarfile.LNKTYPE, 1, "is not a plain file"),
    ("tiny/x0", tarfile.REGTYPE, 3, "holds more than its record says"),
])
def test_an_archive_member_outside_the_pages_data_is_refused(tmp_path, name, kind, files, said):
    clone, archives = packed(tmp_path)
    _hostile(clone, archives, name, kind, files)
    code, out = run("results", "fetch", "tiny", "--root", str(clone), "--from", str(archives))
    assert code == 2 and said in out and len(out.strip().splitlines()) == 1, out
    assert not (tmp_path / "evil").exists() and data_files(clone / "tiny") == {}
    assert (clone / "tiny" / "gate.md").read_text() == "# gate\n" and not list(tmp_path.rglob(".fetch-*"))


def test_bad_input_is_one_line(tmp_path):
    clone, _ = packed(tmp_path)
    for args, said in ((("results", "fetch", "nope", "--root", str(clone)), "nope: no results page there (allowed:"),
                       (("results", "pack", "tiny", "--root", str(clone), "--out", str(tmp_path / "o")), "no data files to pack"),
                       (("results", "pack", "tiny", "--root", str(clone), "--summary", "none.json"), "--summary: none.json"),
                       (("export", str(tmp_path / "no-run"), "--scores", str(tmp_path / "k")), "not a run directory"),
                       (("results", "fetch", "tiny", "tiny", "--root", str(clone), "--into", str(tmp_path)), "--into: one page")):
        code, out = run(*args)
        assert code == 2 and said in out and "Traceback" not in out and len(out.strip().splitlines()) == 1, out


@pytest.mark.parametrize("content", [b"not gzip", b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03garbage", None])
def test_a_damaged_kept_scores_file_is_one_line(tmp_path, content):
    import gzip
    import shutil

    from tests.results_pages import DATA as SAMPLES

    kept = tmp_path / "kept"
    shutil.copytree(SAMPLES / SAMPLE / "latency", kept)
    f = kept / "bf16" / "latency.scores.jsonl.gz"
    f.write_bytes(content if content is not None else gzip.compress(b'{"value": 1}\n'))
    code, out = run("import", str(kept), str(tmp_path / "out"))
    assert code == 2 and f"{f}: " in out and "not a kept scores file" in out and "Traceback" not in out, out
    assert len(out.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"]  # no half-made run folder


def test_the_kept_scores_loader_reads_a_fetched_page(results_pages):
    """evalsuite.results.kept_scores: a page's kept scores, wherever `fetch` unpacked them."""
    from evalsuite.results import kept_scores

    kept = kept_scores(SAMPLE, "scores", ["bf16", "fp8"], root=results_pages)
    assert sorted(kept) == ["bf16", "fp8"] and len(kept["bf16"]["mmlu"]) == 14_042
    row = kept["fp8"]["legal"]["affiliate_license_licensee/test/0"]
    assert row["task"] == "legal" and row["value"] in (0.0, 1.0) and row["group"] == "affiliate_license_licensee"
    with pytest.raises(ConfigError, match="part '../x'"):
        kept_scores(SAMPLE, "../x", root=results_pages)


def _tracked(prefix: str) -> list[str]:
    return subprocess.run(["git", "ls-files", "-z", prefix], cwd=REPO, capture_output=True, text=True,
                          check=True).stdout.split("\0")[:-1]


def test_docs_keep_only_summaries_and_each_page_quotes_its_archive():
    """docs/ holds Markdown and small JSON summaries (3 MB at most); a page's data is its archive's,
    and the page quotes the archive's file and sha256 as `results pack` wrote them."""
    from evalsuite.results.archive import quote_lines
    from evalsuite.results.pages import pages

    assert sum((REPO / f).stat().st_size for f in _tracked("docs")) <= 3_000_000
    for page in pages(REPO / "docs" / "results"):
        archive = page.archive()
        summaries = archive.summaries if archive else ["claims.json"]
        inside = [f.removeprefix(f"docs/results/{page.name}/") for f in _tracked(f"docs/results/{page.name}/")]
        assert all(page.is_summary(rel, summaries) for rel in inside), (page.name, inside)
        if archive is not None:
            text = page.markdown.read_text()
            assert "\n".join(quote_lines(page, archive)) in text, page.name
            assert f"evalsuite results fetch {page.name}" in text


def test_pages_link_only_to_what_a_clone_holds():
    """A relative link in README, docs/ or a results page names a tracked file or folder: a page's
    data, which the clone lacks until it is fetched, is named in the text, not linked."""
    tracked = set(_tracked("."))
    folders = {str(Path(f).parent.as_posix()) for f in tracked} | {str(p.as_posix()) for f in tracked for p in Path(f).parents}
    bad = []
    for md in ["README.md", *[f for f in tracked if f.startswith("docs/") and f.endswith(".md") and f.count("/") <= 2]]:
        for target in re.findall(r"\]\(([^)#\s]+)", (REPO / md).read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            path = os.path.normpath(os.path.join(os.path.dirname(md), target)).replace(os.sep, "/")
            if path not in tracked and path.rstrip("/") not in folders:
                bad.append(f"{md}: {target}")
    assert not bad, bad


def test_find_page_by_file_folder_or_name(tmp_path):
    root = tiny_page(tmp_path)
    for ref in (root / "tiny.md", root / "tiny", "tiny"):
        assert find_page(ref, root).markdown == root / "tiny.md"
