"""A model's config.json from the local Hugging Face cache, read offline: never a download."""

from __future__ import annotations

import re
from pathlib import Path

HF_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def is_hf_id(value: str) -> bool:
    """`org/name` as the Hugging Face hub spells repositories (a relative path looks alike: check
    that it is not a file first)."""
    return bool(HF_ID.fullmatch(value))


def cached_config(repo_id: str, revision: str | None = None) -> Path | None:
    """config.json of `repo_id` at `revision` (default: main) where the HF cache holds it, else None."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, "config.json", revision=revision)
    return Path(found) if isinstance(found, str) else None


def cache_location() -> str:
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)
