"""What `gate` prints where a person reads it: a line per candidate (its verdict and the check that
decided it), the checks that failed or could not be decided, and where the method and the full
report are, at 80 and 200 columns; the Markdown report with `--format markdown` or `--markdown FILE`.
On the tests' sample of the Qwen2.5-Coder-1.5B page's kept per-item scores (bf16, fp8, kv_fp8), and
on a small built run for the verdicts that sample lacks (inconclusive, skipped, a 34-letter name)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalsuite.cli.main import app
from tests.mlflow_server import build_run
from tests.results_pages import SAMPLE
from tests.test_report_folders import kept_run
from tests.test_terminal_width import LONG, lines_fit


@pytest.fixture(scope="module")
def kept(tmp_path_factory, results_pages) -> Path:
    from evalsuite.results import page_data

    return kept_run(page_data(SAMPLE, results_pages) / "scores", ["bf16", "fp8", "kv_fp8"],
                    tmp_path_factory.mktemp("kept") / "20261201-000000-all")


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    """1,000 MMLU items but 10 needles a length: a copy of the baseline resolves MMLU, not the needles."""
    cells = {1024: 1.0, 4096: 1.0}
    return build_run(tmp_path_factory.mktemp("small"), "20250101-000000-small",
                     {"bf16": {"needle": cells}, LONG: {"needle": cells}, "kv_fp8": {"wrong": range(100), "needle": cells},
                      "int4_awq": {"status": "skipped", "reason": "no W4A16 kernel on this CPU (AVX2 only)"}},
                     n=1000, baseline="bf16")


def gate(run: Path, columns: int, *args: str):
    return CliRunner().invoke(app, ["gate", "--baseline", f"{run}:bf16", "--candidate", str(run), *args],
                              env={"COLUMNS": str(columns)})


def verdict_lines(text: str, names: list[str]) -> dict[str, str]:
    """The output's first paragraph, a record per candidate (a wrapped reason joined back), by name."""
    first = text.split("\n\n")[0].splitlines()
    records: list[str] = []
    for line in first:
        if line.startswith(" "):
            records[-1] += " " + line.strip()
        else:
            records.append(" ".join(line.split()))
    assert [r.split()[0] for r in records] == names, first
    return {r.split()[0]: r for r in records}


@pytest.mark.parametrize("columns", [80, 200])
def test_gate_prints_a_line_per_candidate_then_the_checks_to_look_at(kept, columns):
    res = gate(kept, columns)
    assert res.exit_code == 1, res.output
    assert res.stderr.startswith("rules: the shipped default (")  # stderr as before
    text = res.stdout
    lines_fit(text, columns)
    lines = verdict_lines(text, ["fp8", "kv_fp8"])
    if columns == 200:  # one line each where the terminal is wide enough
        assert [ln.split()[0] for ln in text.splitlines()[:2]] == ["fp8", "kv_fp8"]
    # the check that decided, in words, with the one-sided bound the gate decides with, named
    assert lines["kv_fp8"] == ("kv_fp8 FAILED mmlu/acc dropped 7.0 pt (>= 6.4 pt, 95% lower bound), limit 2; "
                               "13 more failed")
    assert lines["fp8"].startswith("fp8 PASSED every check within its limit; worst: ")
    assert re.search(r"worst: \S+ drop <= \d+\.\d pt \(95% upper bound\), limit \d+; 2 undecided, below$", lines["fp8"])
    # then the checks that failed or could not be decided, and only those
    assert "Checks that failed or could not be decided" in text
    table = text.split("Checks that failed or could not be decided")[1]
    assert re.search(r"mmlu/acc +dropped 7\.0 pt +>= 6\.4 +2 pt +shown beyond the limit", table)
    assert re.search(r"legal/acc +dropped 0\.8 pt +<= 1\.0 +2 pt +baseline at chance", table)
    assert "mmlu/acc_macro" in table and "engine/weights_gib" not in table  # passed checks stay out
    assert "+ 8 more" in table  # kv_fp8: 14 failed and 2 at chance, 8 shown
    assert re.search(r"^fp8\b", table, re.M) or columns == 200  # a block per candidate at 80 columns
    # then where the method and every check are; no Markdown on the terminal
    tail = " ".join(text.split("\n\n")[-1].split())
    assert tail == ("Baseline bf16, rules: the shipped default. Method: docs/statistics.md. Every check: --format "
                    "markdown (or --markdown FILE).")
    assert "|" not in text and "##" not in text and "intersection-union" not in text
    assert len(text.splitlines()) <= 30  # was 70 lines of Markdown, the longest 1,360 characters


def test_markdown_is_the_full_report_its_method_last(kept, tmp_path):
    res = gate(kept, 80, "--format", "markdown", "--markdown", str(tmp_path / "gate.md"))
    assert res.exit_code == 1, res.output
    md = res.stdout
    assert md == (tmp_path / "gate.md").read_text()
    assert md.startswith("## ❌ evalsuite gate failed: 1 passed, 1 failed\n\nBaseline `bf16` · rules `the shipped default`")
    assert "| `kv_fp8` | ❌ failed | 4 | 14 |" in md and "| ❌ | `kv_fp8` | accuracy | `mmlu/acc` |" in md
    assert md.index("### How to read this") > md.index("| ❌ | `kv_fp8`")  # the method follows the verdicts
    assert "intersection-union test" in md.split("### How to read this")[1] and "docs/statistics.md" in md
    # the terminal names the file it wrote
    res = gate(kept, 200, "--markdown", str(tmp_path / "again.md"))
    assert f"Every check: {tmp_path / 'again.md'} (Markdown)." in res.stdout and (tmp_path / "again.md").read_text() == md


@pytest.mark.parametrize("columns", [80, 200])
def test_every_verdict_reads_in_words_and_names_stay_whole(small, columns):
    res = gate(small, columns)
    assert res.exit_code == 1, res.output
    text = res.stdout
    lines_fit(text, columns)
    lines = verdict_lines(text, [LONG, "kv_fp8", "int4_awq"])
    assert re.fullmatch(rf"{LONG} INCONCLUSIVE needle/acc/len1024: 10 items resolve \d+\.\d pt, limit 10 "
                        r"\(about \d+ needed\); 1 more undecided", lines[LONG]), lines[LONG]
    assert lines["kv_fp8"].startswith("kv_fp8 FAILED mmlu/acc dropped 10.0 pt (>= ")
    assert lines["int4_awq"] == "int4_awq SKIPPED no W4A16 kernel on this CPU (AVX2 only)"
    table = text.split("Checks that failed or could not be decided")[1]
    assert LONG in table and "too few items: 10 items resolve" in " ".join(table.split())
    assert "…" not in text


def test_a_passing_gate_prints_one_line_and_no_table(small):
    res = CliRunner().invoke(app, ["gate", "--baseline", f"{small}:bf16", "--candidate", f"{small}:{LONG}",
                                   "--rules", str(_mmlu_rules(small.parent))], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    first, rest = res.stdout.split("\n\n")
    assert " ".join(first.split()) == (f"{LONG} PASSED every check within its limit; worst: mmlu/acc drop <= 0.3 pt "
                                       "(95% upper bound), limit 2")
    assert "Checks that" not in res.stdout and "Method: docs/statistics.md" in " ".join(rest.split())


def _mmlu_rules(folder: Path) -> Path:
    path = folder / "mmlu-rules.yaml"
    path.write_text("rules:\n  - {name: accuracy, metrics: [mmlu/acc], max_drop_points: 2.0}\n")
    return path


def test_a_pass_let_through_with_too_few_items_never_reads_as_within_its_limit(small, tmp_path):
    """`insufficient_n: pass` lets small checks through: the line says so, and lists them below."""
    from evalsuite.verdict.rules import default_rules_path

    rules = tmp_path / "rules.yaml"
    rules.write_text(default_rules_path().read_text().replace("insufficient_n: warn", "insufficient_n: pass"))
    res = CliRunner().invoke(app, ["gate", "--baseline", f"{small}:bf16", "--candidate", f"{small}:{LONG}",
                                   "--rules", str(rules)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    line = res.stdout.splitlines()[0]
    assert "no check failed, 2 let through with too few items; worst: mmlu/acc" in line, line
    assert "every check within its limit" not in res.stdout
    assert "passed as insufficient_n says" in res.stdout.split("Checks that failed or could not be decided")[1]
