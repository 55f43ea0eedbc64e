"""A page's data archive rebuilt from the clone's own git history.

The commit a page's archive.json records holds the page's data files in its folder
(docs/results/NAME/). Their blobs, packed as `pack` packs files (tarball.py), make the tar whose
sha256 the page records, and through the same zlib the archive itself: a full clone holds every
published byte, and no host is asked. Git runs as a program: the clone came with it, and `git
cat-file --batch` streams every blob from one process. A shallow clone lacks the commit; one line
then says what to fetch.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import BinaryIO

from evalsuite.core.errors import ConfigError, EvalsuiteError
from evalsuite.results.pages import Archive, Page
from evalsuite.results.tarball import Written, write_archive

GIT_TIMEOUT_S = 120
PLAIN_MODES = (b"100644", b"100755")  # a blob as a file; links (120000) and submodules (160000) are refused
ELSEWHERE = "or fetch the archive from a copy with --from DIR|URL"


@dataclass(frozen=True)
class Place:
    top: Path  # the clone's root
    folder: str  # the page's folder inside the repository, with a trailing slash


def _git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    try:
        res = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, timeout=GIT_TIMEOUT_S)
    except FileNotFoundError:
        raise EvalsuiteError(f"git: not found; a page's data is rebuilt from the clone's history by git, {ELSEWHERE}") from None
    except subprocess.TimeoutExpired:
        raise EvalsuiteError(f"git {args[0]} in {cwd}: no answer in {GIT_TIMEOUT_S} s") from None
    if check and res.returncode != 0:
        said = res.stderr.decode(errors="replace").strip().splitlines()
        raise EvalsuiteError(f"git {args[0]} in {cwd}: {said[-1] if said else f'exit {res.returncode}'}")
    return res


def place(page: Page) -> Place:
    """Where the page's folder is in the git clone that holds the page."""
    here = page.markdown.parent.resolve()
    res = _git(here, "rev-parse", "--show-toplevel", "--show-prefix", check=False) if here.is_dir() else None
    if res is None or res.returncode != 0:
        raise EvalsuiteError(f"{page.markdown}: not in a git clone, so there is no history to rebuild its data from; "
                             f"clone the repository with its history, {ELSEWHERE}")
    top, prefix = (res.stdout.decode().splitlines() + ["", ""])[:2]
    return Place(Path(top), f"{prefix}{page.name}/")


def commit_of(page: Page, rev: str) -> str:
    """The full id of the commit `rev` names in the page's clone (--commit of `pack`)."""
    where = place(page)
    res = _git(where.top, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}", check=False)
    if res.returncode != 0:
        raise ConfigError(f"--commit {rev}: not a commit of {where.top} (allowed: a commit id, branch or tag, e.g. HEAD)")
    return res.stdout.decode().strip()


def _require(where: Place, page: Page, commit: str) -> None:
    if _git(where.top, "cat-file", "-e", f"{commit}^{{commit}}", check=False).returncode == 0:
        return
    shallow = _git(where.top, "rev-parse", "--is-shallow-repository", check=False).stdout.strip() == b"true"
    how = ("this clone is shallow: run `git fetch --unshallow`" if shallow
           else "which this clone's history does not hold: fetch it from the project's repository")
    raise EvalsuiteError(f"{page.markdown}: its data is in commit {commit[:12]}, {how}, {ELSEWHERE}")


def _members(where: Place, page: Page, commit: str, summaries: Sequence[str]) -> list[tuple[str, str, int]]:
    """(path inside the page folder, blob id, size) of the commit's files the archive holds, sorted as
    `pack` sorts them."""
    out = _git(where.top, "ls-tree", "-r", "-z", "-l", "--full-tree", commit, "--", where.folder).stdout
    files = []
    for entry in filter(None, out.split(b"\0")):
        meta, path = entry.split(b"\t", 1)
        mode, _kind, blob, size = meta.split()
        rel = path.decode()[len(where.folder):]
        if not page.in_archive(rel, summaries):
            continue
        if mode not in PLAIN_MODES:
            raise EvalsuiteError(f"{commit[:12]}:{path.decode()}: not a plain file (git mode {mode.decode()}); refused")
        files.append((rel, blob.decode(), int(size)))
    if not files:
        raise EvalsuiteError(f"commit {commit[:12]} holds no data files in {where.folder}; {page.name}'s data is not there")
    return sorted(files)


class _Blobs:
    """`git cat-file --batch`: each blob asked for in turn, read as a stream of exactly its size."""

    def __init__(self, top: Path):
        self.proc = subprocess.Popen(["git", "-C", str(top), "cat-file", "--batch"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def open(self, blob: str, size: int) -> BinaryIO:
        self.proc.stdin.write(blob.encode() + b"\n")
        self.proc.stdin.flush()
        header = self.proc.stdout.readline().split()
        if header != [blob.encode(), b"blob", str(size).encode()]:
            raise EvalsuiteError(f"git: blob {blob[:12]} is missing from this clone (a partial clone?), {ELSEWHERE}")
        return _Exact(self.proc.stdout, size)

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=GIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class _Exact:
    """One blob of the batch: `size` bytes, then the newline git writes after it."""

    def __init__(self, stream: BinaryIO, size: int):
        self.stream, self.left = stream, size

    def read(self, n: int = -1) -> bytes:
        data = self.stream.read(self.left if n < 0 else min(n, self.left))
        self.left -= len(data)
        return data

    def __enter__(self) -> _Exact:
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is None and (self.left or self.stream.read(1) != b"\n"):
            raise EvalsuiteError("git cat-file: a blob ended early")


def _files(page: Page, commit: str, summaries: Sequence[str]) -> tuple[Place, list[tuple[str, str, int]]]:
    where = place(page)
    _require(where, page, commit)
    return where, _members(where, page, commit, summaries)


def _write(where: Place, page: Page, files: list[tuple[str, str, int]], out: BinaryIO | None) -> Written:
    blobs = _Blobs(where.top)
    try:
        return write_archive(page.name, [(rel, size, partial(blobs.open, blob, size)) for rel, blob, size in files], out)
    finally:
        blobs.close()


def write_from(page: Page, commit: str, summaries: Sequence[str], out: BinaryIO | None) -> Written:
    """The archive of the page's files in `commit` to `out` (None: only the tar's hash)."""
    where, files = _files(page, commit, summaries)
    return _write(where, page, files, out)


def rebuild(page: Page, archive: Archive, out: BinaryIO) -> Written:
    """The page's archive rebuilt from the commit it records, written to `out`; refused unless its
    files are as many and as large as the record says (before a byte is read) and its tar is the
    one the page records (`tar_sha256`). The caller compares the gzip's sha256."""
    if archive.commit is None:
        raise EvalsuiteError(f"{page.manifest_path}: names no commit that holds the page's data, so this clone "
                             f"cannot rebuild {archive.file}; fetch it from a copy with --from DIR|URL")
    where, files = _files(page, archive.commit, archive.summaries)
    found = f"{len(files)} files, {sum(size for _, _, size in files):,} bytes"
    if found != f"{archive.files} files, {archive.unpacked_bytes:,} bytes":
        raise EvalsuiteError(f"{page.name}: commit {archive.commit[:12]} holds {found} in {where.folder}; the page "
                             f"records {archive.files} files, {archive.unpacked_bytes:,} bytes; refused, nothing unpacked")
    written = _write(where, page, files, out)
    if written.tar_sha256 != archive.tar_sha256:
        raise EvalsuiteError(f"{page.name}: the files of commit {archive.commit[:12]} in {where.folder} make a tar "
                             f"with sha256 {written.tar_sha256}, not the page's {archive.tar_sha256}; refused, "
                             f"nothing unpacked")
    return written
