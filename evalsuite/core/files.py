"""Files that someone else may have written or planted: configs, run records, archives, kept scores.

Only a regular file is read, opened without blocking and checked with fstat on the open file
(no window between a check and the open): a FIFO would block the reader forever, a device such
as /dev/zero never end. A size cap keeps a wrong file from filling memory; JSON and YAML are parsed
as data (each key once, nesting and integers bounded). Writes into a folder others can write to go
through `Inside`, which never follows a link. Every refusal is one ConfigError line naming the file,
never its content.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import jiter
import yaml

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
    return _read_fd(fd, path, limit, kind, start)


def _read_fd(fd: int, path: Path, limit: int, kind: str, start: int = 0) -> bytes:
    """read_regular on a file already opened (with O_NONBLOCK); closes it."""
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


# ---------------------------------------------------------------- JSON and YAML, as data

# 64-bit integers: what every JSON reader and the records' own writers agree on. A longer run of digits
# is no count, size or id of evalsuite's (10**4000 items overflowed a float in compare).
MAX_INT = (1 << 63) - 1
_LONG_NUMBER = re.compile(rb"[0-9]{19}")


def parse_json(path: Path, raw: bytes, kind: str = "JSON record", line: int | None = None) -> Any:
    """`raw` as JSON, held to what evalsuite writes: each key once in an object (a second one would be read
    as the last by one parser and the first by another), nesting at most jiter's 200 levels (met before any
    code recurses), integers within 64 bits. NaN and Infinity parse; which fields may hold them is each
    schema's to say. One ConfigError line naming the file (and `line` of a JSON-lines file), never its
    content."""
    where = f"{path}: line {line}" if line is not None else str(path)
    try:
        data = jiter.from_json(raw, catch_duplicate_keys=True)
    except ValueError as e:
        raise ConfigError(f"{where}: corrupt JSON: {_json_problem(str(e))}") from None
    if _LONG_NUMBER.search(raw):
        at = _huge_int(data)
        if at is not None:
            raise ConfigError(f"{where}: not a {kind}: {at or '(top level)'}: an integer beyond 64 bits")
    return data


def _json_problem(message: str) -> str:
    """jiter's message, with a duplicated key's name cut short (a key may be a megabyte long)."""
    m = re.match(r'Detected duplicate key "(.*)" at (line \d+ column \d+)$', message, re.S)
    if m:
        return f"key {shown(m[1])} given twice ({m[2]}); a record names each key once"
    if message.startswith("recursion limit exceeded"):
        return f"nested too deeply ({message})"
    return message


def _huge_int(data: Any) -> str | None:
    """The key path of the first integer beyond 64 bits in `data`, or None."""
    stack: list[tuple[Any, str]] = [(data, "")]
    while stack:
        node, at = stack.pop()
        if isinstance(node, dict):
            stack.extend((v, f"{at}.{k}" if at else str(k)) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, f"{at}.{i}" if at else str(i)) for i, v in enumerate(node))
        elif isinstance(node, int) and not isinstance(node, bool) and not -MAX_INT - 1 <= node <= MAX_INT:
            return at
    return None


def shown(value: object, most: int = 60) -> str:
    """A value of someone else's file as a message may quote it: its repr, cut to `most` characters."""
    text = repr(value)
    return text if len(text) <= most else text[: most - 3] + "..."


class UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader that refuses a key given twice in one mapping, where PyYAML keeps the last:
    two `tasks:` blocks would otherwise run only the second, silently. Keys a `<<` merge brings in
    may be overridden, as YAML intends."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        first: dict[tuple[str, str], yaml.Node] = {}
        for key, _ in node.value:
            if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
                continue
            if (key.tag, key.value) in first:
                line = first[(key.tag, key.value)].start_mark.line + 1
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {shown(key.value)} given twice (first on line {line}); give each key once",
                    key.start_mark)
            first[(key.tag, key.value)] = key
        return super().construct_mapping(node, deep)


def parse_yaml(path: Path, raw: bytes, depth: int, kind: str = "YAML file") -> Any:
    """A YAML file of evalsuite's own (a run folder's config.yaml, a kept one) as data: UTF-8, each key
    once, nesting at most `depth` levels and at most a million nodes (aliases can make a few bytes stand
    for billions: the walk that counts them stops first)."""
    try:
        data = yaml.load(raw.decode("utf-8"), Loader=UniqueKeyLoader)
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not a {kind}: not UTF-8 text (at offset {e.start})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1} column {mark.column + 1})" if mark else ""
        raise ConfigError(f"{path}: not a {kind}: invalid YAML{where}") from None
    except RecursionError:  # PyYAML composes nodes recursively
        raise ConfigError(f"{path}: not a {kind}: nested too deeply") from None
    if nesting_depth(data, depth + 1) > depth:
        raise ConfigError(f"{path}: not a {kind}: nested more than {depth} levels deep, or too large (YAML aliases?)")
    return data


# ---------------------------------------------------------------- streams of a regular file


def open_regular(path: Path, kind: str = "file") -> BinaryIO:
    """`path` opened for reading as a stream, where it is a regular file (read_regular's checks, on the open
    file): for what is read a piece at a time (a gzip member, an engine log), never whole."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        what = "is a folder" if stat.S_ISDIR(mode) else "not a regular file (a device, FIFO or socket)"
        raise ConfigError(f"{path}: {what}; give a {kind}")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def bounded_lines(fh: BinaryIO, longest: int = 1 << 16) -> Iterator[bytes]:
    """The lines of a stream, each cut to `longest` bytes (the rest of a longer one is skipped), so that a
    file without a newline never fills memory."""
    while True:
        line = fh.readline(longest)
        if not line:
            return
        if len(line) == longest and not line.endswith(b"\n"):
            while (rest := fh.readline(longest)) and not rest.endswith(b"\n"):
                pass
        yield line.rstrip(b"\n")


# ---------------------------------------------------------------- writes inside a folder


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)


class Inside:
    """A folder evalsuite writes into (a page's data, kept scores) that others may have planted links in.
    Every path below it is walked one part at a time, each folder opened with O_NOFOLLOW relative to the
    one above (no window between a check and the use), so a write, rename or delete never passes through
    a symbolic link and never leaves the folder: the semantics of tarfile's `data` filter (PEP 706) with
    links refused outright. The folder itself is taken as given, resolved once."""

    def __init__(self, root: Path):
        self.root = Path(os.path.realpath(root))

    def _parts(self, rel: str) -> list[str]:
        parts = rel.split("/")
        if not rel or rel.startswith("/") or any(p in ("", ".", "..") or "\0" in p for p in parts):
            raise ConfigError(f"{shown(rel)}: not a path inside {self.root} (allowed: NAME/NAME/..., no '..')")
        return parts

    def _folder_fd(self, parts: list[str], create: bool) -> int:
        """The open folder `parts` below the root (made, and the root too, where `create`)."""
        if create:
            self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root, _DIR_FLAGS)
        for i, part in enumerate(parts):
            try:
                if create:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o777, dir_fd=fd)
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as e:
                os.close(fd)
                where = self.root.joinpath(*parts[: i + 1])
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise ConfigError(f"{where}: a symbolic link or a file where a folder is expected; evalsuite "
                                      f"writes only inside {self.root} (remove it)") from None
                raise
            os.close(fd)
            fd = nxt
        return fd

    @contextlib.contextmanager
    def parent(self, rel: str, create: bool = True) -> Iterator[tuple[int, str]]:
        """(the open folder holding `rel`, its last part)."""
        parts = self._parts(rel)
        fd = self._folder_fd(parts[:-1], create)
        try:
            yield fd, parts[-1]
        finally:
            os.close(fd)

    def kind(self, rel: str) -> str | None:
        """"file", "link", "folder" or "other" for what is at `rel`; None where nothing is (or a folder on
        the way is missing)."""
        try:
            with self.parent(rel, create=False) as (fd, name):
                mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
        except FileNotFoundError:
            return None
        except ConfigError:
            return "link"
        return ("file" if stat.S_ISREG(mode) else "link" if stat.S_ISLNK(mode) else "folder" if stat.S_ISDIR(mode)
                else "other")

    def read(self, rel: str, limit: int, kind: str = "file") -> bytes | None:
        """The bytes of the regular file at `rel` (at most `limit`), reached without a link; None where
        there is none."""
        try:
            with self.parent(rel, create=False) as (fd, name):
                f = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW, dir_fd=fd)
        except FileNotFoundError:
            return None
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise ConfigError(f"{self.root / rel}: a symbolic link; give a {kind}") from None
            raise ConfigError(f"{self.root / rel}: cannot read ({e.strerror})") from None
        return _read_fd(f, self.root / rel, limit, kind)

    def write(self, rel: str, data: bytes, mode: int = 0o644) -> None:
        """`data` at `rel`, whole or not at all: a fresh temporary file renamed over it (a rename replaces
        a link there rather than writing through it)."""
        with self.parent(rel) as (fd, name):
            tmp = f".{name[:64]}.{secrets.token_hex(4)}.tmp"
            f = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, mode, dir_fd=fd)
            try:
                with os.fdopen(f, "wb") as out:
                    out.write(data)
                self._replace(fd, tmp, name, rel, src_dir_fd=fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=fd)
                raise

    def move_in(self, src: Path, rel: str, replace_links: bool = False) -> None:
        """Rename the file `src` (on the same file system) to `rel`. A link already there is refused, or
        where `replace_links`, replaced; a folder always is."""
        with self.parent(rel) as (fd, name):
            if not replace_links:
                with contextlib.suppress(FileNotFoundError):
                    if stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                        raise ConfigError(f"{self.root / rel}: a link where a file goes; move it away first")
            self._replace(fd, str(src), name, rel)

    def _replace(self, fd: int, src: str, name: str, rel: str, src_dir_fd: int | None = None) -> None:
        try:
            os.replace(src, name, src_dir_fd=src_dir_fd, dst_dir_fd=fd)
        except IsADirectoryError:
            raise ConfigError(f"{self.root / rel}: a folder where a file goes; move it away first") from None

    def unlink(self, rel: str) -> bool:
        """Remove the regular file at `rel` (never a link's target, a folder or anything outside);
        whether one was there."""
        try:
            with self.parent(rel, create=False) as (fd, name):
                if not stat.S_ISREG(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                    return False
                os.unlink(name, dir_fd=fd)
                return True
        except (FileNotFoundError, ConfigError):
            return False
