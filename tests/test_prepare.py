"""`evalsuite prepare`: a config's task items built into the cache before any engine, read back by
the run's own task building without generating them again."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from evalsuite.core.configfile import load_raw
from evalsuite.data.assets import default_cache_dir
from evalsuite.run.config import load_config
from evalsuite.run.items import preflight
from evalsuite.run.session import task_context

pytest.importorskip("lm_eval")
pytest.importorskip("wonderwords")

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def ruler_config(tmp_path, tiny_model) -> Path:
    raw = load_raw(REPO / "configs" / "ruler-cpu.yaml")
    # a seed of its own: the items are built here, not found from an earlier run
    raw.update(model={"path": str(tiny_model)}, seed=random.randrange(10**6, 10**9), tracking={"enabled": False})
    raw["tasks"][0].update(n=1, tasks=["vt", "niah_single_2"])
    path = tmp_path / "ruler.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_prepare_builds_the_items_a_run_then_reads(ruler_config, monkeypatch):
    items = default_cache_dir() / "ruler"
    before = set(items.glob("*.json")) if items.exists() else set()
    res = subprocess.run([sys.executable, "-m", "evalsuite", "prepare", str(ruler_config)],
                         capture_output=True, text=True, timeout=600)
    built = set(items.glob("*.json")) - before
    try:
        assert res.returncode == 0, res.stderr[-2000:]
        assert "ruler 2" in res.stdout and len(built) == 2, res.stdout
        from evalsuite.tasks import ruler_data

        monkeypatch.setattr(ruler_data, "generate", lambda *a, **k: pytest.fail("generated again"))
        cfg = load_config(ruler_config)
        _, ctx = task_context(cfg, ruler_config, default_cache_dir())
        _, samples = preflight(cfg, ctx)
        assert sorted(s.id for s in samples["ruler"]) == ["ruler-niah_single_2-len3072-0", "ruler-vt-len3072-0"]
    finally:
        for f in built:
            f.unlink()


def test_prepare_names_a_bad_task_in_one_line(ruler_config):
    res = subprocess.run([sys.executable, "-m", "evalsuite", "prepare", str(ruler_config), "--tasks", "mmlu"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0
    assert "--tasks: unknown mmlu (allowed: ruler)" in res.stderr
