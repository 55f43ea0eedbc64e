"""Shared fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ["tests.mlflow_server"]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-weight Llama (evalsuite.models.tiny); kept across runs under $EVALSUITE_CACHE."""
    from evalsuite.models.tiny import build_tiny_llama

    cache = os.environ.get("EVALSUITE_CACHE")
    base = Path(cache) / "test-models" if cache else tmp_path_factory.mktemp("test-models")
    return build_tiny_llama(base / "tiny-llama-seed0", seed=0)
