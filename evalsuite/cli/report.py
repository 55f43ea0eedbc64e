"""`evalsuite report`: the decision page (HTML and Markdown) from run folders."""

from __future__ import annotations

import shlex
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from evalsuite.verdict.baseline import BASELINE_HELP
from evalsuite.cli.track import uri_flag

if TYPE_CHECKING:
    from evalsuite.report.page import Report


def report_command(
    runs: list[str] = typer.Argument(..., metavar="RUN...", help="Run folders (DIR or DIR:VARIANT), MLflow run ids or experiment names."),
    out: Path = typer.Option(..., "--out", help="Folder for report.html (self-contained), report.md and its PNGs."),
    baseline: str | None = typer.Option(None, "--baseline", metavar="VARIANT", help=f"{BASELINE_HELP}; each run folder is set against its own NAME (default: the first run's config `baseline`, else its first variant)."),
    rules: Path | None = typer.Option(None, "--rules", help="Gate rules YAML (default: the first run's config's `gate_rules`, else the shipped rules, evalsuite/verdict/gate_rules.yaml)."),
    uri: str | None = typer.Option(None, "--uri", callback=uri_flag, help="MLflow tracking URI for run ids and experiment names."),
) -> None:
    """What to serve: verdicts, memory, speed and accuracy changes against a baseline, on one page.

    Examples:
      evalsuite report runs/A --out report/
      evalsuite report runs/A runs/B --baseline bf16 --out report/"""
    from evalsuite.core.outputs import writing
    from evalsuite.report.page_doc import write

    command = shlex.join(["evalsuite", "report", *runs, "--out", str(out)]
                         + (["--baseline", baseline] if baseline else []) + (["--rules", str(rules)] if rules else []))
    with tempfile.TemporaryDirectory(prefix="evalsuite-report-") as scratch:
        report = build_report(runs, baseline, rules, uri, Path(scratch))
        with writing("--out", out, folder=True):
            files = write(report, out, command)
    for f in files[:2]:
        typer.echo(f)


def build_report(refs: list[str], baseline: str | None, rules: Path | None, uri: str | None, scratch: Path) -> Report:
    from evalsuite.report.page import build, rules_file
    from evalsuite.verdict.rules import load_rules
    from evalsuite.tracking.sources import open_sources

    sources = open_sources(refs, uri, scratch)
    path = rules_file(rules, sources[0][0] if sources else None)
    return build(sources, baseline, load_rules(path), str(path))

