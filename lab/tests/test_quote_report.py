"""lab/quote_report.py: a page's decision tables rewritten from the report.md beside it, and only there."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("quote_report", Path(__file__).resolve().parents[1] / "quote_report.py")
quote_report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(quote_report)

REPORT = """# evalsuite report: M

## What to serve

Decision: 1 of 1 candidates passed the gate.

| objective | serve | figure | why |
|---|---|---|---|
| least memory (weights) | fp8 | 2.10 GiB | best of 2 |

| variant | verdict | weights GiB |
|---|---|---|
| bf16 | baseline | 3.32 |
| fp8 | passed | 2.10 |

verdict: the gate against `bf16`.

## Task mmlu

| variant | mmlu/acc |
|---|---|
| bf16 | 0.485 |
"""


def test_quotes_are_rewritten_from_the_report_and_the_rest_of_the_page_stays(tmp_path):
    (tmp_path / "p" / "report").mkdir(parents=True)
    (tmp_path / "p" / "report" / "report.md").write_text(REPORT)
    page = tmp_path / "p.md"
    page.write_text("# P\n\nThe decision. <!-- quoted from report/report.md: picks, variants -->\n\n| stale |\n"
                    "<!-- /quoted -->\n\nBy hand. <!-- quoted from report/report.md: variants -->\n<!-- /quoted -->\n"
                    "\n| kept | table |\n")
    assert quote_report.quote(page) == 2
    text = page.read_text()
    assert "| stale |" not in text and text.count("| fp8 | passed | 2.10 |") == 2 and text.count("| least memory") == 1
    assert text.count("verdict: the gate against `bf16`.") == 2 and "| bf16 | 0.485 |" not in text
    assert text.endswith("\n| kept | table |\n")
    assert quote_report.quote(page) == 2 and page.read_text() == text  # rewriting again changes nothing


def test_an_unknown_part_is_refused(tmp_path):
    (tmp_path / "p" / "report").mkdir(parents=True)
    (tmp_path / "p" / "report" / "report.md").write_text(REPORT)
    page = tmp_path / "p.md"
    page.write_text("x <!-- quoted from report/report.md: memory -->\n<!-- /quoted -->\n")
    with pytest.raises(SystemExit, match="quote what"):
        quote_report.quote(page)
