"""lab/scores.py's per-length table and effective lengths, on kept scores and gate JSON made here, and
the 1.5B pages' effective lengths against each other."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from evalsuite.core.errors import ConfigError
from evalsuite.results.scores import write_rows

_spec = importlib.util.spec_from_file_location("scores", Path(__file__).resolve().parents[1] / "scores.py")
scores = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(scores)


def _diff_rows(variant_right: list[float], task: str) -> dict:
    return {f"{task}-{i}": {"sample_id": f"{task}-{i}", "task": task, "value": v, "pred": "", "group": f"g{i % 2}",
                            "target": "Yes" if i % 3 else "No"} for i, v in enumerate(variant_right)}


def test_glance_diff_is_the_paired_interval_of_the_headline(tmp_path, capsys):
    """MMLU and CUAD cells: the headline over the variant's items and, off the baseline, the paired
    difference and its 95% interval, weighed as the headline metric weighs items."""
    for variant, values in (("bf16", [1.0] * 40), ("kv_fp8", [1.0] * 30 + [0.0] * 10)):
        d = tmp_path / "short" / variant
        d.mkdir(parents=True)
        for task in ("mmlu", "legal"):
            write_rows(d / f"{task}.scores.jsonl.gz", list(_diff_rows(values, task).values()))
    scores.glance(tmp_path / "short", tmp_path / "none", tmp_path / "none", "bf16")
    _, _, bf16, kv = capsys.readouterr().out.splitlines()
    assert bf16.split(" | ")[1] == "1.000 (n=40)"
    mmlu = kv.split(" | ")[1]
    assert mmlu.startswith("0.750 -25.0 [") and mmlu.endswith("] (n=40)")


def test_glance_columns_follow_the_kept_lengths(tmp_path, capsys):
    """The long-task columns carry the lengths the records hold, so a grid of other lengths
    (or a YaRN legal_long column) reads right without editing the script."""
    for variant, right in (("bf16", 1.0), ("kv_fp8", 0.0)):
        d = tmp_path / "long" / variant
        d.mkdir(parents=True)
        rows = [{"sample_id": f"len{n}-d{i}", "task": "legal_long", "value": right if i else 1.0, "pred": "", "target": "",
                 "group": str(n), "extra": {"length": n}} for n in (2048, 8192) for i in range(3)]
        write_rows(d / "legal_long.scores.jsonl.gz", rows)
    (tmp_path / "short").mkdir()
    scores.glance(tmp_path / "short", tmp_path / "long", tmp_path / "none", "bf16")
    head, _, bf16, kv = capsys.readouterr().out.splitlines()
    cols = head.strip("| ").split(" | ")
    at = cols.index("YaRN legal_long 2K / 8K")
    assert "needle" in cols and len(bf16.split(" | ")) == len(cols) == len(kv.split(" | "))
    assert bf16.strip("| ").split(" | ")[at] == "3/3 / 3/3" and kv.strip("| ").split(" | ")[at] == "1/3 / 1/3"



def test_glance_latency_says_n_where_a_cut_variant_has_fewer_requests():
    def rows(n_long: int) -> dict:
        mk = lambda i, n: {"group": n, "extra": {"ttft_ms": 100.0 + i, "itl_ms": 2.0}}  # noqa: E731
        return {f"{n}-{i}": mk(i, n) for n, k in (("32000", 5), ("130000", n_long)) for i in range(k)}

    full = {"32000": 5, "130000": 5}
    assert scores._latency(rows(5), ["32000", "130000"], full) == ["102 / 102", "2.00 / 2.00"]
    assert scores._latency(rows(1), ["32000", "130000"], full) == ["102 / 100 (n=1)", "2.00 / 2.00 (n=1)"]


def _check(candidate: str, length: int, status: str, low: float, high: float, n: int = 132, **extra) -> dict:
    return {"candidate": candidate, "metric": f"ruler/score/len{length}", "status": status, "low": low,
            "high": high, "limit": 5.0, "unit": "pt", "n": n, "evidence": status == "pass", "mark": None, **extra}


def test_effective_length_is_the_last_of_the_lengths_the_gate_shows_within(tmp_path):
    """The effective context length reads the gate's own per-length checks (no second statistics
    path): the longest length up to which every length is shown within the limit; a length not shown
    within, beyond the limit, with too few items, or not measured ends it, and each says which."""
    short = [_check("fp8", 4096, "pass", -1.0, 1.7), _check("fp8", 8192, "pass", -2.0, 3.5),
             _check("fp8", 16384, "fail", -0.1, 6.2), _check("kv_fp8", 4096, "fail", 63.4, 76.9),
             _check("kv_fp8", 8192, "fail", 61.9, 75.3), _check("int8", 4096, "pass", -2.1, 1.0),
             _check("int8", 8192, "pass", -1.8, 3.3), _check("int8", 16384, "pass", -1.0, 4.0),
             {**_check("fp8", 4096, "pass", -1.0, 1.7), "metric": "ruler/score"}]  # the average: not a length
    long = [_check("fp8", 65536, "pass", -2.7, 2.1), _check("int8", 65536, "warn", 9.9, 37.2, n=32)]
    for name, checks in (("short", short), ("long", long)):
        (tmp_path / f"{name}.json").write_text(json.dumps({"checks": checks}))
    head, blank, *lines = scores.effective([tmp_path / "short.json", tmp_path / "long.json"])
    assert "within 5 pt of the baseline's" in head and blank == ""
    assert lines == [
        "- `fp8`: **8K**; 4K +1.7; 8K +3.5; 16K +6.2 (not shown within); 64K +2.1",
        "- `kv_fp8`: **none**; 4K beyond the limit (lower bound +63.4); 8K beyond the limit (lower bound +61.9); "
        "16K not measured; 64K not measured",
        "- `int8`: **16K**; 4K +1.0; 8K +3.3; 16K +4.0; 64K insufficient n (32 items)",
    ]


def test_effective_length_of_gates_without_per_length_checks_is_one_line(tmp_path):
    (tmp_path / "g.json").write_text(json.dumps({"checks": [_check("fp8", 4096, "pass", 0, 1) | {"metric": "mmlu/acc"}]}))
    with pytest.raises(ConfigError, match="no per-length check of ruler/score"):
        scores.effective([tmp_path / "g.json"])


def test_effective_lines_replace_the_pages_block_and_nothing_else(tmp_path):
    page = tmp_path / "ruler.md"
    page.write_text(f"# RULER\n\nbefore\n{scores.BLOCK[0]}\nold line\n{scores.BLOCK[1]}\nafter\n")
    scores.write_into(page, ["new", "lines"])
    assert page.read_text() == f"# RULER\n\nbefore\n{scores.BLOCK[0]}\nnew\nlines\n{scores.BLOCK[1]}\nafter\n"
    (tmp_path / "none.md").write_text("no markers\n")
    with pytest.raises(ConfigError, match="no block"):
        scores.write_into(tmp_path / "none.md", ["x"])


def test_the_15b_page_quotes_the_effective_lengths_its_ruler_page_holds():
    """The 1.5B page's RULER table carries each variant's effective length; the RULER sub-page's
    block is the script's output (regen_results.sh), so the two agree or one of them is stale."""
    pages = Path(__file__).resolve().parents[2] / "docs" / "results"
    sub = (pages / "h200-2026-12-01-qwen2.5-coder-1.5b" / "ruler.md").read_text()
    block = sub[sub.index(scores.BLOCK[0]):sub.index(scores.BLOCK[1])]
    written = dict(re.findall(r"^- `(\S+)`: \*\*(\w+)\*\*", block, re.M))
    page = (pages / "h200-2026-12-01-qwen2.5-coder-1.5b.md").read_text()
    table = page[page.index("| variant | RULER 4K-32K |"):]
    quoted = dict(re.findall(r"^\| (\S+) \| [^\n]* \| \*\*(\w+)\*\*[^|\n]* \|$", table[:table.index("\n\n")], re.M))
    assert written and quoted == written
