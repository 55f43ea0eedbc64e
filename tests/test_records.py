from evalsuite.core.records import RunDir


def test_partial_line_is_dropped_and_not_counted_twice(tmp_path):
    rd = RunDir(tmp_path / "r")
    rd.append_samples("v", "t", [{"sample": {"id": "a"}, "score": {}}])
    path = rd.samples_path("v", "t")
    with path.open("a") as f:
        f.write('{"sample": {"id": "b"}, "sco')  # killed mid-write
    assert [r["sample"]["id"] for r in rd.load_samples("v", "t")] == ["a"]
    rd.append_samples("v", "t", [{"sample": {"id": "b"}, "score": {}}, {"sample": {"id": "a"}, "score": {}}])
    assert [r["sample"]["id"] for r in rd.load_samples("v", "t")] == ["a", "b"]
    assert path.read_text().count("\n") == 3
