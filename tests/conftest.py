"""Shared fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ["tests.mlflow_server"]


@pytest.fixture(autouse=True)
def _wide_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host's terminal (or a CI runner's COLUMNS) never decides what a test reads: output is 160
    columns wide, as piped output is, unless a test names its own width."""
    monkeypatch.setenv("COLUMNS", "160")


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def results_pages(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pages root (as docs/results) with the results pages the tests read fetched into it, their
    archives served from a local folder over HTTP (tests/results_pages.py)."""
    from tests.results_pages import fetched_pages

    return fetched_pages(tmp_path_factory.mktemp("results"))


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-weight Llama (evalsuite.models.tiny); kept across runs under $EVALSUITE_CACHE."""
    from evalsuite.models.tiny import build_tiny_llama

    cache = os.environ.get("EVALSUITE_CACHE")
    base = Path(cache) / "test-models" if cache else tmp_path_factory.mktemp("test-models")
    return build_tiny_llama(base / "tiny-llama-seed0", seed=0)


@pytest.fixture(scope="session")
def real_rtn_build(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path):
    """The tiny model's RTN W4A16 checkpoint from the real worker (llmcompressor in the repo's
    .venv-quant): built once, then checked by the quantization tests from several sides."""
    from evalsuite.models import quantize as q

    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("EVALSUITE_QUANT_PYTHON", raising=False)  # the real one, not a test's stand-in
        if not q.quant_python().is_file():
            pytest.skip(".venv-quant missing (scripts/setup_quant.sh)")
        return q.quantize_model(tiny_model, q.QuantParams(method="rtn"), tmp_path_factory.mktemp("rtn-cache"),
                                timeout_s=600)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Real-engine tests first, the longest modules first: under pytest-xdist each worker then
    starts on a long one while the short ones fill the gaps, instead of one worker ending alone on
    minutes of engine work. Stable, so every worker collects the same order and a module keeps
    its tests together (module-scoped fixtures are set up once)."""
    items.sort(key=lambda item: -_ENGINE_WEIGHT.get(item.module.__name__.rsplit(".", 1)[-1], 0)
               if item.get_closest_marker("engine") else -_LONG.get(item.module.__name__.rsplit(".", 1)[-1], 0))


# Rough minutes of real-engine work per test module on 2 cores; only the order matters.
_ENGINE_WEIGHT = {"test_ray": 4, "test_e2e_engine": 4, "test_wheel": 3, "test_quantize": 2, "test_lm_eval_task": 2, "test_ruler": 2,
                  "test_check_e2e": 1, "test_capacity_engine": 3, "test_bench_capacity_overhead": 2,
                  "test_bench_latency_isolation": 2}
# The same for the modules that run minutes of CPU work without an engine.
_LONG = {"test_results_recompute": 3}
