"""Reading files that someone else may have written: configs, their includes, run records.

Only a regular file is read, opened without blocking and checked with fstat on the open file
(no window between a check and the open): a FIFO would block the reader forever, a device such
as /dev/zero never end. A size cap keeps a wrong file from filling memory. Every refusal is one
ConfigError line naming the file, never its content.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from evalsuite.core.errors import ConfigError


def read_regular(path: Path, limit: int, kind: str = "file", start: int = 0) -> bytes:
    """The bytes of `path` from offset `start`, a regular file of at most `limit` bytes; `kind` names
    what was expected ("YAML file", "run record") in the refusal."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror})") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise ConfigError(f"{path}: is a folder, not a {kind}")
        if not stat.S_ISREG(mode):
            raise ConfigError(f"{path}: not a regular file (a device, FIFO or socket); give a {kind}")
        chunks, size = [], start
        if start:
            os.lseek(fd, start, os.SEEK_SET)
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror})") from None
    finally:
        os.close(fd)
    if size > limit:
        raise ConfigError(f"{path}: larger than {_size(limit)}; not a {kind}")
    return b"".join(chunks)


def _size(n: int) -> str:
    return f"{n >> 30} GiB" if n >= 1 << 30 else f"{n >> 20} MiB"


def decode_utf8(path: Path, data: bytes, quiet: bool = False) -> str:
    """`data` as text; `quiet`: a refusal names the offset, not the byte (the file may be anyone's)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        byte = "" if quiet else f"byte 0x{e.object[e.start]:02x} "
        raise ConfigError(f"{path}: not UTF-8 text ({byte}at offset {e.start}); save it as UTF-8") from None


def nesting_depth(data: object, limit: int, max_nodes: int = 1_000_000) -> int:
    """Nesting depth of mappings and lists, counted only up to `limit` (YAML aliases can make cycles
    and exponential trees, so the walk also stops after `max_nodes` nodes, reported as `limit`)."""
    stack, deepest, seen = [(data, 0)], 0, 0
    while stack and deepest < limit and seen < max_nodes:  # iterative: the input may be too deep to recurse
        node, d = stack.pop()
        deepest, seen = max(deepest, d), seen + 1
        if isinstance(node, dict):
            stack.extend((v, d + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, d + 1) for v in node)
    return deepest if seen < max_nodes else limit
