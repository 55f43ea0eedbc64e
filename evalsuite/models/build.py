"""A cache folder built once: staged beside its place, marked complete, renamed into place.

Two processes asking for the same folder build it once (a file lock; an AWQ build takes minutes),
a half-written folder is never used (only a folder with its marker file counts), and the staging of
a killed build is removed by the next one. The locks lie in the cache's .locks folder, so that a
failed build leaves nothing among the folders.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    with path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def built(final: Path, marker: str, build: Callable[[Path], dict[str, Any]]) -> tuple[dict[str, Any], bool]:
    """(the record in `final`'s marker, whether it was there already). `build(staged)` fills the folder
    `staged` (not yet created; its parent is scratch space of the build) and returns the record."""
    if (final / marker).is_file():
        return json.loads((final / marker).read_text()), True
    locks = final.parent.parent / ".locks"  # the cache: final is <cache>/<kind>/<key>
    locks.mkdir(parents=True, exist_ok=True)
    final.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(locks / f"{final.parent.name}.{final.name}.lock"):
        if (final / marker).is_file():  # another process built it while we waited
            return json.loads((final / marker).read_text()), True
        for stale in final.parent.glob(f".{final.name}-*"):  # staging of a killed build; we hold the lock
            shutil.rmtree(stale, ignore_errors=True)
        with tempfile.TemporaryDirectory(dir=final.parent, prefix=f".{final.name}-") as tmp:
            staged = Path(tmp) / "model"
            record = build(staged)
            (staged / marker).write_text(json.dumps(record, indent=2) + "\n")
            if final.exists():  # an earlier build died before writing its marker
                shutil.rmtree(final)
            staged.rename(final)
    return json.loads((final / marker).read_text()), False

