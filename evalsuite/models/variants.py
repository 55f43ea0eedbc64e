"""The checkpoint a `quantize:` variant runs on: built (or found in the cache) by quantize, or for a
`simulate` variant the dense copy with its weights rounded as the method would (simulate)."""

from __future__ import annotations

from pathlib import Path

from evalsuite.core.types import Build


def checkpoint_for(method: str, simulate: bool, model_dir: str | Path, cache_dir: Path | None) -> tuple[str, Build]:
    """The folder to load for the variant and what its record keeps of the build."""
    if simulate:
        from evalsuite.models.simulate import checkpoint_for_variant
    else:
        from evalsuite.models.quantize import checkpoint_for_variant
    path, info = checkpoint_for_variant(method, model_dir, cache_dir)
    return path, Build.model_validate({**info, "simulated": simulate})
