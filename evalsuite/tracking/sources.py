"""Where compared runs come from: run directories as they are, anything else looked up in MLflow."""

from __future__ import annotations

from pathlib import Path

from evalsuite.core.errors import ConfigError
from evalsuite.core.rundir import RunDir


def open_sources(refs: list[str], uri: str | None, scratch: Path) -> list[tuple[RunDir, set[str] | None]]:
    """Run directories as they are (`DIR:VARIANT` picks one variant); anything else is looked up in
    MLflow and downloaded to `scratch`."""
    out: list[tuple[RunDir, set[str] | None]] = []
    for i, ref in enumerate(refs):
        path, variant = split_ref(ref)
        if path is not None:
            rd = RunDir(path)
            if not rd.exists():
                raise ConfigError(f"{ref}: not a run directory (no run.json)")
            out.append((rd, {variant} if variant else None))
            continue
        try:  # only now: mlflow is slow to import, and run directories alone must not need it
            from evalsuite.tracking.store import fetch
        except ImportError as e:
            raise ConfigError(f"{ref}: no such run directory (MLflow lookups need mlflow: {e})") from None
        out += fetch(ref, uri, scratch / str(i))
    return out


def split_ref(ref: str) -> tuple[Path | None, str | None]:
    """`runs/A` -> (runs/A, None); `runs/A:bf16` -> (runs/A, bf16); anything else is no folder."""
    if Path(ref).exists():
        return Path(ref), None
    head, sep, variant = ref.rpartition(":")
    if sep and variant and Path(head).is_dir():
        return Path(head), variant
    return None, None
