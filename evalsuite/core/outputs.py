"""Files and folders a command writes where one of its flags says (`--markdown FILE`, `--out DIR`).

A path the user gave that cannot be written is bad input (exit 2), said in one line that names the
flag, the path and what to give instead; a full disk or a folder this user may not write stays the
machine's refusal (exit 4), as for the run folder."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from evalsuite.core.errors import PATH_KIND_HINTS, STORAGE_ERRNOS, ConfigError, EvalsuiteError, StorageError

FILE_HINT = "give a path in a folder you can write"
FOLDER_HINT = "give a folder that exists or can be created"


def output_error(flag: str, path: Path, e: OSError, folder: bool = False) -> EvalsuiteError:
    """One line for a write to `path` (given by `flag`) that failed; a file inside a folder
    is named where it, not the folder, was refused."""
    what = "it" if e.filename is None or str(e.filename) == str(path) else e.filename
    said = f"{flag} {path}: cannot write {what} ({e.strerror or e})"
    if e.errno in STORAGE_ERRNOS:
        room = e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
        return StorageError(f"{said}; {'free space there, or give another path' if room else 'give a path you can write'}")
    return ConfigError(f"{said}; {PATH_KIND_HINTS.get(e.errno) or (FOLDER_HINT if folder else FILE_HINT)}")


@contextmanager
def writing(flag: str, path: Path, folder: bool = False) -> Iterator[None]:
    """Around the writes into `path`: an OSError becomes output_error's line."""
    try:
        yield
    except OSError as e:
        raise output_error(flag, path, e, folder) from None


def write_output(flag: str, path: Path, text: str) -> None:
    """`text` into the file `path` that `flag` names, making its folder where needed."""
    with writing(flag, path):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
