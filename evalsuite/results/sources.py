"""Where a page's archive comes from, and its bytes checked on the way.

By default, from the clone itself: rebuilt from the commit the page records (history.py), its tar's
sha256 checked against the page's. A mirror is named with --from (or $EVALSUITE_RESULTS_FROM): a
folder or a URL naming the folder of the archives (or the archive file itself). Allowed: a local
folder or file (a path or file://), https from a host named with --trust-host, and http on this
machine's loopback only (a local mirror, the tests' server). Redirects are followed only to allowed
places. Nothing from a mirror is kept unless its size and sha256 are the ones the page records; a
download stops at the recorded size. No host is trusted by default.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

from evalsuite.core.errors import ConfigError, EvalsuiteError
from evalsuite.results.history import rebuild
from evalsuite.results.pages import ARCHIVE_SUFFIX, Archive, Page

SOURCE_ENV = "EVALSUITE_RESULTS_FROM"
LOOPBACK = ("127.0.0.1", "::1", "localhost")
SCHEMES = "a folder, file://, https:// from a host named with --trust-host, http:// on 127.0.0.1"
MAX_REDIRECTS = 5
CHUNK = 1 << 20


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
    if not src.is_file():
        raise ConfigError(f"--from {src}: no such file (the page records {archive.file})")
    with src.open("rb") as fh:
        _limited_copy(iter(lambda: fh.read(CHUNK), b""), out, archive, str(src))


def _download(url: str, out, archive: Archive, trusted: Sequence[str]) -> None:
    import requests

    try:
        for _ in range(MAX_REDIRECTS + 1):
            with requests.get(url, stream=True, allow_redirects=False, timeout=(15, 120)) as r:
                if r.is_redirect:
                    url = _allowed(urljoin(url, r.headers["location"]), trusted)
                    continue
                if r.status_code != 200:
                    raise EvalsuiteError(f"{url}: HTTP {r.status_code} {r.reason}")
                _limited_copy(r.iter_content(CHUNK), out, archive, url)
                return
    except requests.RequestException as e:
        raise EvalsuiteError(f"{url}: cannot download ({type(e).__name__}: {e})") from None
    raise EvalsuiteError(f"{url}: more than {MAX_REDIRECTS} redirects")


def _limited_copy(chunks, out, archive: Archive, where: str) -> None:
    n = 0
    for chunk in chunks:
        n += len(chunk)
        if n > archive.bytes:
            raise EvalsuiteError(f"{where}: larger than the {archive.bytes:,} bytes the page records; refused")
        out.write(chunk)


def _check(path: Path, archive: Archive, where: str) -> None:
    sha = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(CHUNK), b""):
            sha.update(chunk)
    size = path.stat().st_size
    if size != archive.bytes or sha.hexdigest() != archive.sha256:
        raise EvalsuiteError(f"{where}: sha256 {sha.hexdigest()} ({size:,} bytes) is not the page's "
                             f"{archive.sha256} ({archive.bytes:,} bytes); refused, nothing unpacked")
