"""The bytes of a page's data archive, written once for `pack` (files on disk) and for a rebuild
from the clone's history (git blobs): members `NAME/PATH` in sorted order, PAX headers without the
machine's times, owners or modes, gzip by zlib at level 9 with no name or time. The tar's bytes
depend on the files alone (`tar_sha256`); the gzip's on the files and the zlib (`sha256`).
"""

from __future__ import annotations

import gzip
import hashlib
import tarfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import BinaryIO

# (path inside the page folder, size in bytes, a function giving a stream of exactly that many bytes)
Member = tuple[str, int, Callable[[], BinaryIO]]


class Hashing:
    """A write-only stream that hashes what passes through it on the way to `out`."""

    def __init__(self, out):
        self.out, self.sha, self.n = out, hashlib.sha256(), 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.n += len(data)
        return self.out.write(data) if self.out is not None else len(data)

    def flush(self) -> None:
        if self.out is not None:
            self.out.flush()


@dataclass(frozen=True)
class Written:
    sha256: str  # of the gzip file; "" where only the tar was written
    bytes: int
    tar_sha256: str
    files: int
    unpacked_bytes: int


def write_tar(name: str, members: Iterable[Member], out) -> tuple[int, int]:
    """The tar of `members` (sorted by the caller) to `out`; returns (files, bytes they hold)."""
    files = total = 0
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for rel, size, opener in members:
            info = tarfile.TarInfo(f"{name}/{rel}")
            info.size, info.mode, info.mtime = size, 0o644, 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with opener() as fh:
                tar.addfile(info, fh)
            files += 1
            total += size
    return files, total


def write_archive(name: str, members: Iterable[Member], out: BinaryIO | None) -> Written:
    """The page's archive (gzip of the tar) to `out`, hashed on the way; `out=None` hashes the tar
    alone (what a commit's files would make, without compressing them)."""
    if out is None:
        tar_hash = Hashing(None)
        files, total = write_tar(name, members, tar_hash)
        return Written("", 0, tar_hash.sha.hexdigest(), files, total)
    gz_hash = Hashing(out)
    with gzip.GzipFile(filename="", mode="wb", fileobj=gz_hash, mtime=0, compresslevel=9) as gz:
        tar_hash = Hashing(gz)
        files, total = write_tar(name, members, tar_hash)
    return Written(gz_hash.sha.hexdigest(), gz_hash.n, tar_hash.sha.hexdigest(), files, total)
