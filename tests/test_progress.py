"""An engine's start is a progress step with an estimate from this machine's past starts (kept in the
cache), and a run whose time went mostly to starts says so."""

from __future__ import annotations

import pytest

from evalsuite.run import progress as P


@pytest.fixture
def lines(monkeypatch):
    """What the display prints off a terminal, one string per line."""
    out: list[str] = []
    monkeypatch.setattr(P.console, "print", lambda text, **kw: out.append(str(text)))
    return out


def test_start_times_keep_the_last_starts_per_model_and_fall_back_to_other_models(tmp_path):
    starts = P.StartTimes(tmp_path)
    assert starts.estimate("offline gemma") is None
    for s in (90, 100, 80):
        starts.add("offline gemma", s)
    assert starts.estimate("offline gemma") == (90, "3 past starts")
    assert starts.estimate("offline qwen") == (90, "3 past starts of other models")
    for s in range(P.KEPT + 5):
        starts.add("offline gemma", 10)
    assert starts.estimate("offline gemma") == (10, f"{P.KEPT} past starts")


def test_a_damaged_record_is_no_estimate_and_no_error(tmp_path):
    (tmp_path / "engine-starts.json").write_text("{not json")
    assert P.StartTimes(tmp_path).estimate("offline m") is None
    P.StartTimes(tmp_path).add("offline m", 5.0)  # rewritten whole
    assert P.StartTimes(tmp_path).estimate("offline m") == (5.0, "1 past start")


def test_engine_start_says_its_estimate_and_keeps_its_time(tmp_path, lines):
    key = P.start_key("offline", "/cache/models/gemma-3-270m")
    assert key == "offline gemma-3-270m" and P.start_key("fake", "/m") is None
    with P.Progress(enabled=False, cache_dir=tmp_path) as progress:
        with progress.engine_start("bf16", key):
            pass
        with progress.engine_start("kv_fp8", key):
            pass
    assert lines[0] == "bf16: starting engine (the first here: no estimate yet)"
    assert lines[1].startswith("bf16: engine started in ")
    assert lines[2] == "kv_fp8: starting engine (about 0 s, from 1 past start here)"
    assert P.StartTimes(tmp_path).estimate(key)[1] == "2 past starts"


def test_a_failed_start_is_not_kept(tmp_path, lines):
    with P.Progress(enabled=False, cache_dir=tmp_path) as progress, pytest.raises(RuntimeError):
        with progress.engine_start("bf16", "offline m"):
            raise RuntimeError("engine died")
    assert P.StartTimes(tmp_path).estimate("offline m") is None


def test_the_run_says_when_starts_took_most_of_its_time(tmp_path, lines):
    progress = P.Progress(enabled=False, cache_dir=tmp_path)
    progress._starting = 177 + 91 + 87
    note = progress.startup_note(600)
    assert note.startswith("engine start-up took 355 s of this run's 600 s (59%)") and "--limit" in note
    assert progress.startup_note(800) is None


def test_overlapping_starts_count_once(tmp_path, monkeypatch):
    clock = iter([0.0, 0.0, 10.0, 20.0, 30.0])
    monkeypatch.setattr(P.time, "monotonic", lambda: next(clock))
    progress = P.Progress(enabled=False, cache_dir=tmp_path)
    progress._starting_now(+1)  # t=0: one starts
    progress._starting_now(+1)  # t=0: a second, beside it
    progress._starting_now(-1)  # t=10
    progress._starting_now(-1)  # t=20
    assert progress._starting == 20


def test_the_run_says_up_front_what_its_starts_will_take(tmp_path, lines):
    progress = P.Progress(enabled=False, cache_dir=tmp_path)
    progress.expect(3, "offline m")
    assert lines == []  # nothing known yet: nothing said
    P.StartTimes(tmp_path).add("offline m", 92)
    progress.expect(3, "offline m")
    assert lines == ["engine starts: 3 x about 92 s (from 1 past start on this machine; the tasks come on top)"]
