"""A results page's data as one archive: packed reproducibly, unpacked only after its sha256 checks.

Why a versioned archive per page, rebuilt from the commit that holds its files
(docs/results/README.md says more): the checkout stays small, a full clone holds every byte, a page
pins the exact bytes it was made from, and anyone can rebuild the archive from the same files and
get the same tar (tarball.py). Members are `NAME/PATH`, so `tar xzf` in docs/results restores the
page's folder by hand too.

Unpacking follows tarfile's `data` filter (PEP 706) and goes further: plain files only, each named
`NAME/PATH` of plain names, written, renamed and removed through evalsuite.core.files.Inside, which
walks every part of a path without following a link and never leaves the page's folder.
"""

from __future__ import annotations

import gzip
import os
import shutil
import tarfile
import tempfile
import zlib
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from evalsuite.core.errors import ConfigError
from evalsuite.core.files import Inside, shown
from evalsuite.results import history
from evalsuite.results.pages import ARCHIVE_SUFFIX, MARKER, Archive, Fetched, Page, fetched, member_path
from evalsuite.results.sources import obtain
from evalsuite.results.tarball import write_archive

CHUNK = 1 << 20
QUOTE_START, QUOTE_END = "<!-- archive: written by `evalsuite results pack` -->", "<!-- /archive -->"


@dataclass
class Packed:
    path: Path
    archive: Archive
    changed: bool  # another tar than the page recorded: a new version
    note: str = ""


def _on_disk(page: Page, files: list[str]):
    return [(rel, (page.folder / rel).stat().st_size, partial((page.folder / rel).open, "rb")) for rel in files]


def pack(page: Page, out_dir: Path, summaries: list[str] | None = None, commit: str | None = None) -> Packed:
    """Pack the page's data files into out_dir/NAME-vN.tar.gz and record it in NAME/archive.json: the
    version the page records where the tar is the same, the next one where the files changed.
    `summaries`: the folder's files kept in git instead (default: those the page records). `commit`:
    the commit holding the same files, which a clone rebuilds the archive from (checked here; default:
    the one the page records, while the tar is the same)."""
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
            written = write_archive(page.name, _on_disk(page, files), raw)
        same = old is not None and old.tar_sha256 == written.tar_sha256
        holder = _holder(page, commit, written.tar_sha256, summaries) if commit else old.commit if same else None
        version = old.version if same else (old.version + 1 if old else 1)
        archive = Archive(page=page.name, version=version, file=f"{page.name}-v{version}{ARCHIVE_SUFFIX}",
                          sha256=written.sha256, bytes=written.bytes, tar_sha256=written.tar_sha256,
                          files=written.files, unpacked_bytes=written.unpacked_bytes, summaries=summaries, commit=holder)
        path = out_dir / archive.file
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would keep a file meant for publishing from others on the machine
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    notes = []
    if same and old.sha256 != archive.sha256:
        # the same files, compressed by another zlib: the recorded file stays the one the page records
        archive = old.model_copy(update={"commit": holder})
        notes.append(f"the same tar as {old.file}, compressed to other bytes by this zlib: the recorded file stands")
    if holder is None:
        notes.append(f"no commit holds these files, so a clone cannot rebuild {archive.file}: commit them (git add -f "
                     f"{page.folder}) and pack again with --commit HEAD (docs/results/README.md)")
    page.manifest_path.write_text(archive.model_dump_json(indent=2, exclude_none=True) + "\n")
    quote(page, archive)
    return Packed(path, archive, changed=not same, note="; ".join(notes))


def _holder(page: Page, rev: str, tar_sha256: str, summaries: list[str]) -> str:
    """The full id of commit `rev`, once its files in the page's folder are shown to make the same tar."""
    full = history.commit_of(page, rev)
    got = history.write_from(page, full, summaries, None)
    if got.tar_sha256 != tar_sha256:
        raise ConfigError(f"--commit {rev}: its files in {history.place(page).folder} ({got.files}, tar sha256 "
                          f"{got.tar_sha256[:12]}) are not the ones packed (tar sha256 {tar_sha256[:12]}); commit the "
                          f"data first (git add -f {page.folder})")
    return full


def quote_lines(page: Page, archive: Archive) -> list[str]:
    """What the page says of its archive, between its QUOTE_START and QUOTE_END lines."""
    what = f"Data: `{archive.file}` ({archive.bytes / 1e6:.1f} MB, {archive.files} files), sha256 `{archive.sha256}`"
    if archive.commit is None:
        return [QUOTE_START, f"{what}; no commit of this repository holds its files.",
                f"`evalsuite results fetch {page.name} --from DIR|URL` puts it in [{page.name}/]({page.name}/) from "
                f"a copy, its sha256 checked.", QUOTE_END]
    return [QUOTE_START, f"{what}, rebuilt from this repository's commit `{archive.commit[:12]}`, which holds "
                         f"its files beside this page (`{page.name}/`).",
            f"`evalsuite results fetch {page.name}` puts it in [{page.name}/]({page.name}/), its sha256 checked "
            f"(in a shallow clone, `git fetch --unshallow` first).", QUOTE_END]


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


def fetch(page: Page, source: str | None, dest: Path | None = None, trusted: tuple[str, ...] = ()) -> tuple[Archive, list[str]]:
    """The page's archive from `source` (None: rebuilt from the clone's history), its sha256 checked,
    unpacked into `dest` (the page's folder). An archive already unpacked there is not fetched again."""
    archive = page.archive()
    if archive is None:
        raise ConfigError(f"{page.markdown}: records no data archive ({page.manifest_path} missing); nothing to fetch")
    dest = page.folder if dest is None else dest
    done = fetched(page, dest)
    if done and done.sha256 == archive.sha256 and all(Inside(dest).kind(f) == "file" for f in done.files):
        return archive, []
    dest.mkdir(parents=True, exist_ok=True)
    file = obtain(source, page, archive, dest, trusted)
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
