from evalsuite.core.rundir import RunDir


def row(sid: str) -> dict:
    return {"sample": {"id": sid}, "score": {"sample_id": sid, "task": "t", "value": 1.0, "pred": "", "target": ""}}


def test_partial_line_is_dropped_and_not_counted_twice(tmp_path):
    rd = RunDir(tmp_path / "r")
    rd.append_samples("v", "t", [row("a")])
    path = rd.samples_path("v", "t")
    with path.open("a") as f:
        f.write('{"sample": {"id": "b"}, "sco')  # killed mid-write
    assert [r["sample"]["id"] for r in rd.load_samples("v", "t")] == ["a"]
    rd.append_samples("v", "t", [row("b"), row("a")])
    assert [r["sample"]["id"] for r in rd.load_samples("v", "t")] == ["a", "b"]
    assert path.read_text().count("\n") == 3



def ids(rows: list[dict]) -> list[str]:
    return [r["sample"]["id"] for r in rows]


def test_a_followed_samples_file_gives_each_new_row_once_as_load_samples_reads_them(tmp_path):
    rd = RunDir(tmp_path / "r")
    tail = rd.follow_samples("v", "t")
    assert tail.new() == ([], False)  # nothing recorded yet
    rd.append_samples("v", "t", [row("a"), row("b")])
    assert ids(tail.new()[0]) == ["a", "b"]
    path = rd.samples_path("v", "t")
    with path.open("a") as f:
        f.write('{"sample": {"id": "c"}, "sco')  # a line still being written, or cut by a kill
    assert tail.new() == ([], False)
    rd.append_samples("v", "t", [row("c"), row("a"), row("d")])  # drops the cut line first
    assert ids(tail.new()[0]) == ["c", "d"]
    assert tail.new() == ([], False)
    assert ids(rd.load_samples("v", "t")) == ["a", "b", "c", "d"]


def test_a_followed_file_replaced_by_a_shorter_one_is_read_from_its_start(tmp_path):
    rd = RunDir(tmp_path / "r")
    tail = rd.follow_samples("v", "t")
    rd.append_samples("v", "t", [row("a"), row("b")])
    tail.new()
    rd.write_samples("v", "t", [row("z")])
    rows, again = tail.new()
    assert ids(rows) == ["z"] and again


def test_a_whole_line_that_is_not_a_sample_is_refused_in_one_line_naming_it(tmp_path):
    rd = RunDir(tmp_path / "r")
    tail = rd.follow_samples("v", "t")
    rd.append_samples("v", "t", [row("a")])
    tail.new()
    with rd.samples_path("v", "t").open("a") as f:
        f.write('{"sample": {"id": "b"}, "sco\n')
    with pytest.raises(ConfigError, match=r"t\.jsonl: line 2: not JSON") as e:
        tail.new()
    with pytest.raises(ConfigError) as whole:
        rd.load_samples("v", "t")
    assert str(e.value) == str(whole.value) and "\n" not in str(e.value)


# ---------------------------------------------------------------- writes stay inside the run folder

import errno  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402

import pytest  # noqa: E402

from evalsuite.core.errors import ConfigError, StorageError  # noqa: E402
from evalsuite.core.rundir import create_run_dir, is_safe_name, new_run_id  # noqa: E402
from evalsuite.core.types import RunRecord, VariantResult  # noqa: E402


@pytest.mark.parametrize("name", ["../../../escaped", "/abs/dir", "a/b", "..", ".", "", ".hidden", "a\n", "x" * 129,
                                  "a\\b", "a b"])
def test_unsafe_names_are_refused_before_any_write(tmp_path, name):
    assert not is_safe_name(name)
    rd = RunDir(tmp_path / "run")
    with pytest.raises(ConfigError, match="not a safe"):
        rd.append_samples(name, "mmlu", [{"sample": {"id": "a"}}])
    with pytest.raises(ConfigError, match="not a safe"):
        rd.append_samples("bf16", name, [{"sample": {"id": "a"}}])
    with pytest.raises(ConfigError, match="not a safe"):
        rd.write_result(VariantResult(variant=name, status="ok"))
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


@pytest.mark.parametrize("name", ["bf16", "kv_fp8", "Qwen2.5-0.5B", "a..b", "x" * 128])
def test_safe_names(name):
    assert is_safe_name(name)


def planted(tmp_path):
    """A run folder whose variant folder, samples folder or files are links to a folder outside it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    rd = RunDir(tmp_path / "run")
    rd.root.mkdir()
    return rd, outside


def test_a_linked_variant_folder_is_refused(tmp_path):
    rd, outside = planted(tmp_path)
    (rd.root / "bf16").symlink_to(outside)
    with pytest.raises(ConfigError, match="symbolic link inside the run folder"):
        rd.append_samples("bf16", "mmlu", [{"sample": {"id": "a"}}])
    with pytest.raises(ConfigError, match="symbolic link"):
        rd.engine_log("bf16")
    assert list(outside.iterdir()) == []


def test_linked_files_are_never_written_through(tmp_path):
    rd, outside = planted(tmp_path)
    (rd.root / "bf16" / "samples").mkdir(parents=True)
    (rd.root / "bf16" / "samples" / "mmlu.jsonl").symlink_to(outside / "stolen.jsonl")
    (rd.root / "bf16" / "engine.log").symlink_to(outside / "engine.log")
    (rd.root / "run.json").symlink_to(outside / "run.json")
    (outside / "run.json").write_text("untouched")
    with pytest.raises(ConfigError, match="mmlu.jsonl: a symbolic link"):  # O_NOFOLLOW: ELOOP
        rd.append_samples("bf16", "mmlu", [{"sample": {"id": "a"}}])
    with pytest.raises(ConfigError, match="symbolic link"):
        rd.engine_log("bf16")
    rd.write_run(RunRecord(run_id="r", model="m"))  # replaces the link itself, never its target
    assert not (rd.root / "run.json").is_symlink() and json.loads((rd.root / "run.json").read_text())["run_id"] == "r"
    assert (outside / "run.json").read_text() == "untouched" and not (outside / "stolen.jsonl").exists()


def test_run_ids_differ_within_one_second_and_folders_are_exclusive(tmp_path):
    ids = {new_run_id("cfg") for _ in range(200)}
    assert len(ids) == 200 and all(i.endswith("-cfg") for i in ids)
    roots = {create_run_dir(tmp_path / "runs", "cfg").root for _ in range(50)}
    assert len(roots) == 50 and all(r.is_dir() and not any(r.iterdir()) for r in roots)


@pytest.mark.parametrize("content,fragment", [
    (b"\x00\xff\xfe binary", "binary content"),
    (b"[1, 2, 3]", "a list, not an object"),
    (b"{not json", "corrupt JSON"),
    (b'{"schema_version": 1, "run_id": 5, "variants": 3}', "not a valid RunRecord"),
    (b'{"schema_version": 1, "run_id": "r", "model": "m"}', "no `variants` key: not a run record as evalsuite writes"),
], ids=["binary", "list", "corrupt", "wrong_types", "no_variants"])
def test_damaged_run_json_is_one_config_error(tmp_path, content, fragment):
    from evalsuite.core.types import SCHEMA_VERSION

    rd = RunDir(tmp_path)
    (tmp_path / "run.json").write_bytes(content.replace(b'"schema_version": 1', f'"schema_version": {SCHEMA_VERSION}'.encode()))
    with pytest.raises(ConfigError, match=fragment):
        rd.load_run()


@pytest.mark.parametrize("content,fragment", [
    (b"\x00\xff\xfe\n{}\n", r"line 1: not JSON \(binary content\)"),
    (b"[1, 2]\n", "line 1: not a valid SampleLine: .top level.: Input should be an object"),
    (b'{"sample": [1]}\n', "line 1: not a valid SampleLine: sample: Input should be an object"),
], ids=["binary", "list", "sample_list"])
def test_damaged_samples_are_one_config_error(tmp_path, content, fragment):
    rd = RunDir(tmp_path)
    (tmp_path / "v" / "samples").mkdir(parents=True)
    (tmp_path / "v" / "samples" / "t.jsonl").write_bytes(content)
    with pytest.raises(ConfigError, match=fragment):
        rd.load_samples("v", "t")


def test_a_full_disk_is_a_storage_error(tmp_path, monkeypatch):
    rd = RunDir(tmp_path)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(StorageError, match="No space left on device") as e:
        rd.append_samples("v", "t", [{"sample": {"id": "a"}}])
    assert e.value.exit_code == 4


def test_a_run_folder_is_held_once_per_process_and_free_again_after(tmp_path):
    """A hold nested in the holder's own process (a run scoring its interrupt as `finish` does) is
    the same hold; the lock file names the holder; the folder is free once the block ends."""
    rd = RunDir(tmp_path / "r")
    rd.root.mkdir()
    with rd.held():
        with RunDir(tmp_path / "." / "r").held():
            pass
        assert (rd.root / "run.lock").read_text().startswith(f"pid {os.getpid()} on ")
    with rd.held():
        pass


def test_a_file_system_without_locks_runs_unguarded(tmp_path, monkeypatch):
    import fcntl

    def refused(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", refused)
    rd = RunDir(tmp_path / "r")
    rd.root.mkdir()
    with rd.held():
        pass


def test_a_record_holding_a_stored_macro_interval_still_loads(tmp_path):
    """Records of schema 1 may carry `ci95` on a macro or balanced accuracy; readers draw that
    interval from stderr and the items, so the field is read past rather than refusing the run."""
    from evalsuite.core.types import Metric, RunRecord, VariantResult

    rd = RunDir(tmp_path / "r")
    record = RunRecord(run_id="r", model="m", variants=[VariantResult(variant="bf16", status="ok", metrics=[
        Metric(name="legal/balanced_acc", value=0.6, stderr=0.1, n=6, kind="proportion", strata=["group", "target"])])])
    data = json.loads(record.model_dump_json())
    data["variants"][0]["metrics"][0]["ci95"] = [0.4, 0.8]
    data["schema_version"] = 1
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "run.json").write_text(json.dumps(data))
    (loaded,) = rd.load_run().variants[0].metrics
    assert loaded.value == 0.6 and loaded.strata == ["group", "target"] and "ci95" not in loaded.model_dump()
