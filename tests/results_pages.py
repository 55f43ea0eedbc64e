"""Results pages as a user has them after `evalsuite results fetch`, their archives served over HTTP
from a local folder: the tests' sample of the 1.5B page's data (tests/data/results, packed in the
session) and two published pages' own release assets (tests/data/results/archives), checked against
the sha256 their pages in docs/results record."""

from __future__ import annotations

import functools
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from typer.testing import CliRunner

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data" / "results"
SAMPLE = "qwen-1.5b-sample"
PUBLISHED = ("claims-2026-12-02", "h200-2026-11-29")


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@contextmanager
def serve(folder: Path, handler: type[SimpleHTTPRequestHandler] = _Quiet) -> Iterator[str]:
    """A real HTTP server on loopback serving `folder`; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def copy_page(src_root: Path, name: str, dest_root: Path) -> None:
    """A page as a clone holds it: its Markdown and the summaries of its folder, no data."""
    from evalsuite.results.pages import find_page

    page = find_page(name, src_root)
    archive = page.archive()
    dest_root.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(page.markdown, dest_root / page.markdown.name)
    for f in page.folder.rglob("*"):
        rel = f.relative_to(page.folder).as_posix()
        if f.is_file() and page.is_summary(rel, archive.summaries if archive else ()):
            (dest_root / name / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dest_root / name / rel)


def packed_sample(tmp: Path, archives: Path) -> Path:
    """The sample page packed into `archives`, as `evalsuite results pack` does; returns its pages root."""
    from evalsuite.results.archive import pack
    from evalsuite.results.pages import find_page

    src = tmp / "sample-src"
    src.mkdir(parents=True)
    shutil.copyfile(DATA / f"{SAMPLE}.md", src / f"{SAMPLE}.md")
    shutil.copytree(DATA / SAMPLE, src / SAMPLE)
    pack(find_page(SAMPLE, src), archives)
    return src


def fetched_pages(tmp: Path) -> Path:
    """The pages root (like docs/results) with the sample and the published pages fetched into it."""
    from evalsuite.cli.main import app

    pages, archives = tmp / "pages", tmp / "archives"
    archives.mkdir(parents=True)
    copy_page(packed_sample(tmp, archives), SAMPLE, pages)
    for name in PUBLISHED:
        copy_page(REPO / "docs" / "results", name, pages)
        for f in (DATA / "archives").glob(f"{name}-v*.tar.gz"):
            shutil.copyfile(f, archives / f.name)
    with serve(archives) as url:
        for name in (SAMPLE, *PUBLISHED):
            res = CliRunner().invoke(app, ["results", "fetch", name, "--root", str(pages), "--from", url])
            assert res.exit_code == 0, res.output
    return pages
