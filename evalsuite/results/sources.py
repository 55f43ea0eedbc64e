"""Where a page's archive comes from, and its bytes checked on the way.

By default, from the clone itself: rebuilt from the commit the page records (history.py), its tar's
sha256 checked against the page's. A mirror is named with --from (or $EVALSUITE_RESULTS_FROM): a
folder or a URL naming the folder of the archives (or the archive file itself). Allowed: a local
folder or file (a path or file://), https from a host named with --trust-host, and http on this
machine's loopback only (a local mirror, the tests' server); no host is trusted by default.
Redirects are followed only to allowed places. Nothing from a mirror is kept unless its size and
sha256 are the ones the page records; a download stops at the recorded size and within an overall
deadline (a server that trickles a byte at a time never holds a fetch for more than DEADLINE_S plus
its size at MIN_RATE).
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

from evalsuite.core.errors import ConfigError, EvalsuiteError
from evalsuite.core.files import open_regular
from evalsuite.results.history import rebuild
from evalsuite.results.pages import ARCHIVE_SUFFIX, Archive, Page

SOURCE_ENV = "EVALSUITE_RESULTS_FROM"
LOOPBACK = ("127.0.0.1", "::1", "localhost")
SCHEMES = "a folder, file://, https:// from a host named with --trust-host, http:// on 127.0.0.1"
MAX_REDIRECTS = 5
CHUNK = 1 << 20
# A download's overall deadline: DEADLINE_S, plus its recorded size at MIN_RATE bytes a second; each read
# waits at most READ_TIMEOUT_S, so a deadline is met within that.
DEADLINE_S, MIN_RATE, READ_TIMEOUT_S = 300.0, 256 << 10, 30.0


def default_source() -> str | None:
    """$EVALSUITE_RESULTS_FROM, else None: the clone's own history."""
    return os.environ.get(SOURCE_ENV) or None


def _allowed(url: str, trusted: Sequence[str]) -> str:
    """The URL, or a ConfigError saying what is allowed."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if parts.scheme == "https" and host and host in trusted:
        return url
    if parts.scheme == "http" and host in LOOPBACK:
        return url
    raise ConfigError(f"--from {url}: not an allowed source (allowed: {SCHEMES})")


def locate(source: str, file: str) -> str:
    """The archive's own path or URL in `source` (a folder or base URL, or one naming the file)."""
    if source.endswith(ARCHIVE_SUFFIX):
        return source
    if "://" in source:
        return urljoin(source.rstrip("/") + "/", file)
    return str(Path(source) / file)


def obtain(source: str | None, page: Page, archive: Archive, into: Path, trusted: Sequence[str] = ()) -> Path:
    """The archive's bytes, checked, in a temporary file under `into`; the caller removes it.
    `source` None: rebuilt from the clone's history."""
    where = locate(source, archive.file) if source is not None else ""
    scheme = urlsplit(where).scheme if "://" in where else ""
    fd, tmp = tempfile.mkstemp(dir=into, prefix=".fetch-", suffix=ARCHIVE_SUFFIX)
    path = Path(tmp)
    try:
        with os.fdopen(fd, "wb") as out:
            if source is None:
                written = rebuild(page, archive, out)
            elif scheme in ("", "file"):
                _copy_local(Path(unquote(urlsplit(where).path)) if scheme else Path(where), out, archive)
            else:
                _download(_allowed(where, trusted), out, archive, trusted)
        if source is None:
            _note_zlib(page, archive, written.sha256)
        else:
            _check(path, archive, where)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path


def _note_zlib(page: Page, archive: Archive, sha256: str) -> None:
    """A rebuilt archive whose tar is the page's (checked) but whose gzip is not: another zlib
    (zlib-ng, say) compresses the same bytes differently. The files are the page's; say so."""
    if sha256 != archive.sha256:
        logging.getLogger(__name__).warning(
            "evalsuite: %s: rebuilt from commit %s, its tar's sha256 is the page's %s; this zlib compresses it to "
            "sha256 %s, not the page's %s (the same files)", page.name, archive.commit[:12], archive.tar_sha256,
            sha256, archive.sha256)


def _copy_local(src: Path, out, archive: Archive) -> None:
    if not src.exists():
        raise ConfigError(f"--from {src}: no such file (the page records {archive.file})")
    with open_regular(src, "archive file") as fh:
        _limited_copy(iter(lambda: fh.read(CHUNK), b""), out, archive, str(src))


def deadline_s(archive: Archive) -> float:
    return DEADLINE_S + archive.bytes / MIN_RATE


def _download(url: str, out, archive: Archive, trusted: Sequence[str]) -> None:
    import requests

    deadline = time.monotonic() + deadline_s(archive)
    try:
        for _ in range(MAX_REDIRECTS + 1):
            with requests.get(url, stream=True, allow_redirects=False, timeout=(15, READ_TIMEOUT_S)) as r:
                if r.is_redirect:
                    url = _allowed(urljoin(url, r.headers["location"]), trusted)
                    continue
                if r.status_code != 200:
                    raise EvalsuiteError(f"{url}: HTTP {r.status_code} {r.reason}")
                length = r.headers.get("content-length", "")
                if length.isdigit() and int(length) > archive.bytes:
                    raise ConfigError(f"{url}: {int(length):,} bytes, larger than the {archive.bytes:,} bytes the "
                                      "page records; refused")
                _limited_copy(_arriving(r.raw), out, archive, url, deadline)
                return
    except requests.RequestException as e:
        raise EvalsuiteError(f"{url}: cannot download ({type(e).__name__}: {e})") from None
    raise EvalsuiteError(f"{url}: more than {MAX_REDIRECTS} redirects")


def _arriving(raw):
    """A response's bytes as they arrive (urllib3's read1: what one read has, at most CHUNK), so that a
    slow server is measured against the deadline after every read, never one CHUNK at a time."""
    while chunk := raw.read1(CHUNK, decode_content=True):
        yield chunk


def _limited_copy(chunks, out, archive: Archive, where: str, deadline: float | None = None) -> None:
    n = 0
    for chunk in chunks:
        n += len(chunk)
        if n > archive.bytes:
            raise ConfigError(f"{where}: larger than the {archive.bytes:,} bytes the page records; refused")
        if deadline is not None and time.monotonic() > deadline:
            raise EvalsuiteError(f"{where}: {n:,} of {archive.bytes:,} bytes after {deadline_s(archive):.0f} s, "
                                 "the longest a fetch of this size may take; stopped, nothing kept")
        out.write(chunk)


def _check(path: Path, archive: Archive, where: str) -> None:
    sha = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(CHUNK), b""):
            sha.update(chunk)
    size = path.stat().st_size
    if size != archive.bytes or sha.hexdigest() != archive.sha256:
        raise ConfigError(f"{where}: sha256 {sha.hexdigest()} ({size:,} bytes) is not the page's "
                             f"{archive.sha256} ({archive.bytes:,} bytes); refused, nothing unpacked")
