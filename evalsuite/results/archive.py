"""A results page's data as one archive: packed reproducibly, unpacked only after its sha256 checks.

Why a versioned archive per page, published as a release asset (docs/results/README.md says more):
a clone downloads none of it, a page pins the exact bytes it was made from, and anyone can rebuild
the archive from the same files and get the same tar. Members are `NAME/PATH`, so `tar xzf` in
docs/results restores the page's folder by hand too. Sorted names, no times, owners or modes of the
machine: the tar's bytes depend on the files alone. The gzip around it is zlib's, so its sha256 is
the published file's, and the tar's own sha256 is what a rebuild is checked against.

Unpacking follows tarfile's `data` filter (PEP 706) and goes further: plain files only, each named
`NAME/PATH` of plain names, written, renamed and removed through evalsuite.core.files.Inside, which
walks every part of a path without following a link and never leaves the page's folder.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import tarfile
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from evalsuite.core.errors import ConfigError
from evalsuite.core.files import Inside, shown
from evalsuite.results.pages import ARCHIVE_SUFFIX, MARKER, Archive, Fetched, Page, fetched, member_path
from evalsuite.results.sources import RELEASE_URL, obtain

CHUNK = 1 << 20


class _Hashing:
    """A write-only stream that hashes what passes through it on the way to `out`."""

    def __init__(self, out):
        self.out, self.sha, self.n = out, hashlib.sha256(), 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.n += len(data)
        return self.out.write(data)

    def flush(self) -> None:
        self.out.flush()


QUOTE_START, QUOTE_END = "<!-- archive: written by `evalsuite results pack` -->", "<!-- /archive -->"


@dataclass
class Packed:
    path: Path
    archive: Archive
    changed: bool  # another tar than the page recorded: a new version
    note: str = ""


def _tar(page: Page, files: list[str], out) -> int:
    """Write the tar of `files` to `out`; returns the bytes they hold."""
    total = 0
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for rel in files:
            path = page.folder / rel
            info = tarfile.TarInfo(f"{page.name}/{rel}")
            info.size, info.mode, info.mtime = path.stat().st_size, 0o644, 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with path.open("rb") as fh:
                tar.addfile(info, fh)
            total += info.size
    return total


def pack(page: Page, out_dir: Path, summaries: list[str] | None = None) -> Packed:
    """Pack the page's data files into out_dir/NAME-vN.tar.gz and record it in NAME/archive.json: the
    version the page records where the tar is the same, the next one where the files changed.
    `summaries`: the folder's files kept in git instead (default: those the page records)."""
    old = page.archive()
    summaries = sorted(summaries if summaries is not None else old.summaries if old else [])
    missing = [s for s in summaries if not (page.folder / s).is_file()]
    if missing:
        raise ConfigError(f"--summary: {', '.join(missing)} not a file in {page.folder}")
    files = page.data_files(summaries)
    if not files:
        raise ConfigError(f"{page.folder}: no data files to pack (fetched? `evalsuite results fetch {page.markdown}`)")
    for rel in files:
        member_path(page, f"{page.name}/{rel}", summaries)  # what fetch would refuse is never packed
    out_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=".pack-")
    try:
        with os.fdopen(fd, "wb") as raw:
            gz_hash = _Hashing(raw)
            with gzip.GzipFile(filename="", mode="wb", fileobj=gz_hash, mtime=0, compresslevel=9) as gz:
                tar_hash = _Hashing(gz)
                unpacked = _tar(page, files, tar_hash)
        tar_sha = tar_hash.sha.hexdigest()
        same = old is not None and old.tar_sha256 == tar_sha
        version = old.version if same else (old.version + 1 if old else 1)
        archive = Archive(page=page.name, version=version, file=f"{page.name}-v{version}{ARCHIVE_SUFFIX}",
                          sha256=gz_hash.sha.hexdigest(), bytes=gz_hash.n, tar_sha256=tar_sha, files=len(files),
                          unpacked_bytes=unpacked, summaries=summaries)
        path = out_dir / archive.file
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would keep a file meant for publishing from others on the machine
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    if same and old.sha256 != archive.sha256:
        # the same files, compressed by another zlib: the published file stays the one the page records
        return Packed(path, old, changed=False, note=f"the same tar as the published {old.file}, compressed to other "
                                                     f"bytes by this zlib: the published file stands")
    page.manifest_path.write_text(archive.model_dump_json(indent=2) + "\n")
    quote(page, archive)
    return Packed(path, archive, changed=not same)


def quote_lines(page: Page, archive: Archive) -> list[str]:
    """What the page says of its archive, between its QUOTE_START and QUOTE_END lines."""
    return [QUOTE_START,
            f"Data: [`{archive.file}`]({RELEASE_URL}/{archive.file}) ({archive.bytes / 1e6:.1f} MB, {archive.files} files), "
            f"sha256 `{archive.sha256}`.",
            f"`evalsuite results fetch {page.name}` puts it in [{page.name}/]({page.name}/), its sha256 checked.",
            QUOTE_END]


def quote(page: Page, archive: Archive) -> None:
    """Rewrite the page's lines about its archive; a page without them gets them at its end."""
    lines = page.markdown.read_text().splitlines()
    new = quote_lines(page, archive)
    if QUOTE_START in lines and QUOTE_END in lines[lines.index(QUOTE_START):]:
        start = lines.index(QUOTE_START)
        end = lines.index(QUOTE_END, start)
        lines[start:end + 1] = new
    else:
        lines += ["", *new]
    page.markdown.write_text("\n".join(lines) + "\n")


def fetch(page: Page, source: str, dest: Path | None = None, trusted: tuple[str, ...] = ()) -> tuple[Archive, list[str]]:
    """The page's archive from `source`, its size and sha256 checked, unpacked into `dest` (the page's
    folder). An archive already unpacked there is not fetched again."""
    archive = page.archive()
    if archive is None:
        raise ConfigError(f"{page.markdown}: records no data archive ({page.manifest_path} missing); nothing to fetch")
    dest = page.folder if dest is None else dest
    done = fetched(page, dest)
    if done and done.sha256 == archive.sha256 and all(Inside(dest).kind(f) == "file" for f in done.files):
        return archive, []
    dest.mkdir(parents=True, exist_ok=True)
    file = obtain(source, archive, dest, trusted)
    try:
        return archive, unpack(page, archive, file, dest)
    finally:
        file.unlink(missing_ok=True)


def unpack(page: Page, archive: Archive, file: Path, dest: Path) -> list[str]:
    """Unpack a checked archive file into `dest` (the page's folder): every member a plain file of
    the page's own, named as the record says; files of an earlier fetch the archive no longer holds
    are removed (those its record names that are plain files of the page's data, and nothing else).
    Returns the paths written."""
    dest.mkdir(parents=True, exist_ok=True)
    before = fetched(page, dest)  # read (and refused where damaged) before anything changes
    staging = Path(tempfile.mkdtemp(dir=dest, prefix=".fetch-"))
    try:
        rels = _extract(page, archive, file, staging)
        inside = Inside(dest)
        for rel in rels:
            inside.move_in(staging / rel, rel)
        for rel in set(before.files if before else []) - set(rels):
            if rel != MARKER and not page.is_summary(rel, archive.summaries):
                inside.unlink(rel)
        marker = Fetched(file=archive.file, sha256=archive.sha256, files=rels)
        inside.write(MARKER, (marker.model_dump_json() + "\n").encode())
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return rels


def _extract(page: Page, archive: Archive, file: Path, staging: Path) -> list[str]:
    """The archive's members written under `staging`, a fresh folder; a member that is not a plain file of
    the page, or more than the record says, refuses the whole archive. A file that is no gzip tar (its
    sha256 matched a record that lies), or one cut short, is refused in one line."""
    try:
        return _members(page, archive, file, Inside(staging))
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise ConfigError(f"{file}: not a gzip tar archive, or cut short ({type(e).__name__}: "
                          f"{shown(str(e), 120)}); refused") from None


def _members(page: Page, archive: Archive, file: Path, into: Inside) -> list[str]:
    rels: list[str] = []
    total = 0
    with tarfile.open(file, mode="r:gz") as tar:
        for m in tar:
            if not m.isreg():
                raise ConfigError(f"{file}: member {shown(m.name)} is not a plain file; refused")
            rel = member_path(page, m.name, archive.summaries)
            total += m.size
            if len(rels) >= archive.files or total > archive.unpacked_bytes:
                raise ConfigError(f"{file}: holds more than its record says ({archive.files} files, "
                                  f"{archive.unpacked_bytes} bytes); refused")
            if rel in rels:
                raise ConfigError(f"{file}: member {shown(m.name)} given twice; refused")
            with tar.extractfile(m) as src, into.parent(rel) as (fd, name):
                out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                              dir_fd=fd)
                with os.fdopen(out, "wb") as dst:
                    shutil.copyfileobj(src, dst, CHUNK)
            rels.append(rel)
    if len(rels) != archive.files:
        raise ConfigError(f"{file}: {len(rels)} files, its record says {archive.files}; refused")
    return rels
