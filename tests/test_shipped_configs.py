"""Every shipped config runs from a bare clone: it validates, and no path it names resolves
outside the repository (no data folder beside the checkout, no /tmp)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from evalsuite.run.config import load_config

REPO = Path(__file__).resolve().parents[1]
CONFIGS = sorted(p for d in ("configs", "lab/configs") for p in (REPO / d).rglob("*.yaml") if "gates" not in p.parts)
RUNNABLE = sorted((REPO / "configs").glob("*.yaml"))
# Keys whose string values are file-system paths (relative ones against the config's folder).
PATH_KEYS = {"path", "gguf", "tokenizer", "model", "data_dir", "haystack", "include", "output_dir"}
NAMED_SOURCES = {"paul_graham", "licensedcode"}  # haystack names, not folders


def _paths(node, key: str | None = None):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, k)
    elif isinstance(node, list):
        for v in node:
            yield from _paths(v, key)
    elif isinstance(node, str) and key in PATH_KEYS and node not in NAMED_SOURCES:
        yield key, node


def _inside(base: Path, value: str) -> bool:
    p = Path(value).expanduser()
    return (p if p.is_absolute() else base / p).resolve().is_relative_to(REPO)


def _raw_with_includes(path: Path) -> list[tuple[Path, dict]]:
    import yaml

    out = [(path, yaml.safe_load(path.read_text()) or {})]
    inc = out[0][1].get("include") or []
    for i in [inc] if isinstance(inc, str) else inc:
        out += _raw_with_includes((path.parent / i).resolve())
    return out


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(REPO)))
def test_no_path_outside_the_repo(path):
    for file, raw in _raw_with_includes(path):
        outside = [(k, v) for k, v in _paths(raw) if not _inside(file.parent, v)]
        assert not outside, f"{file.relative_to(REPO)}: paths outside the repo: {outside}"


@pytest.mark.parametrize("path", RUNNABLE, ids=lambda p: p.name)
def test_resolved_config_stays_in_the_repo(path):
    cfg = load_config(path)
    base = path.parent
    values = [cfg.model.path, cfg.model.gguf, cfg.model.tokenizer,
              *(v.model for v in cfg.variants.values()),
              *(getattr(t, "data_dir", None) for t in cfg.tasks),
              *(t.haystack for t in cfg.tasks if getattr(t, "haystack", None) not in (None, *NAMED_SOURCES))]
    outside = [v for v in values if v and not _inside(base, v)]
    assert not outside, f"{path.name}: {outside}"
    assert not Path(cfg.output_dir).is_absolute() and ".." not in Path(cfg.output_dir).parts
    if cfg.tracking.uri:
        assert not cfg.tracking.uri.startswith(("file:/", "sqlite:////")), cfg.tracking.uri


def test_default_legal_data_is_the_bundled_copy():
    """Configs leave `legal.data_dir` unset, so a clone reads tasks/data/legalbench-cuad."""
    from evalsuite.tasks.spec import load_definition, tasks_dir

    assert (tasks_dir() / load_definition("legal").data.path.split("{group}")[0]).resolve() == (
        REPO / "tasks" / "data" / "legalbench-cuad")
    for path in RUNNABLE:
        for t in load_config(path).tasks:
            if t.type == "legal":
                assert t.data_dir is None, f"{path.name}: tasks.{t.name}.data_dir is set"


def test_nothing_in_the_repo_reaches_beside_it():
    """Configs, tests, scripts, benches, CI and READMEs: no path to a folder beside the clone."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.split()
    this = Path(__file__).resolve().relative_to(REPO).as_posix()
    # The sibling folder's name is assembled, so that this test is not itself a file naming it.
    sibling = "sha" + "red"
    needles = (f"../{sibling}", f"/tmp/{sibling}", f"/work/{sibling}")
    hits = []
    for name in files:
        if name == this or name.startswith(("docs/results/", "tasks/data/")):
            continue  # dated records of past runs say where they ran; the data is data
        f = REPO / name
        if f.suffix not in {".py", ".sh", ".yaml", ".yml", ".md", ".toml", ""} or not f.is_file():
            continue
        text = f.read_text(errors="replace")
        hits += [f"{name}: {n}" for n in needles if n in text]
    assert not hits, hits


def test_the_largest_file_in_the_repo_is_below_5_mib():
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.split()
    big = [n for n in files if (REPO / n).is_file() and (REPO / n).stat().st_size > 5 * 2**20]
    assert not big, big


def test_the_task_definitions_live_at_the_top_and_the_package_names_them():
    """tasks/ at the repository's top holds the definitions a user reads and copies; the package reads them
    through its evalsuite/tasks/defs link, which a wheel carries as files (tests/test_wheel.py)."""
    from evalsuite.tasks.spec import defined_tasks, tasks_dir

    defs = REPO / "evalsuite" / "tasks" / "defs"
    assert defs.is_symlink() and defs.resolve() == REPO / "tasks"
    assert tasks_dir().resolve() == REPO / "tasks" and len(defined_tasks()) == len(list((REPO / "tasks").glob("*.yaml")))
    assert (REPO / "docs" / "run-folder.md").is_file()  # the run folder's layout; runs/ itself stays ignored
