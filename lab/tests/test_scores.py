"""lab/scores.py's per-length table of the results pages, on kept scores made here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

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
