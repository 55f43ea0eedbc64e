"""`evalsuite check CLAIMS RUN...`: mounted by evalsuite.cli.main; exit 0 / 1 / 2 like `gate`."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

import typer


Format = StrEnum("Format", ["markdown", "json"])


def check_command(
    claims: Path = typer.Argument(..., metavar="CLAIMS", help="Claims YAML (see configs/claims/long-context-128k.yaml)."),
    runs: list[Path] | None = typer.Argument(None, metavar="[RUN]...", help="Run folders; variants are named run:variant where names clash."),
    fmt: Format = typer.Option(Format.markdown, "--format", metavar="FORMAT", help="What to print: markdown or json."),
    markdown: Path | None = typer.Option(None, "--markdown", metavar="FILE", help="Also write the Markdown report here."),
    json_out: Path | None = typer.Option(None, "--json", metavar="FILE", help="Also write the JSON report here."),
) -> None:
    """Judge claims (YAML) against run folders and the planner: held, not held or not measurable.

    Exit 0 when no claim is contradicted, 1 when any is not held, 2 on bad input.

    Examples:
      evalsuite check configs/claims/long-context-128k.yaml
      evalsuite check configs/claims/long-context-128k.yaml runs/A runs/B"""
    from evalsuite.check.evaluate import evaluate
    from evalsuite.check.report import to_json, to_markdown
    from evalsuite.check.runs import open_run
    from evalsuite.check.schema import load_claims
    from evalsuite.core.outputs import write_output

    spec = load_claims(claims)
    opened = [open_run(p) for p in runs or []]
    results = evaluate(spec, claims.resolve().parent, opened, str(claims))
    md, js = to_markdown(results, spec, str(claims), opened), to_json(results, spec, str(claims), opened)
    typer.echo(md if fmt == Format.markdown else js, nl=False)  # first: a file that cannot be written must not cost the verdicts
    for flag, path, text in (("--markdown", markdown, md), ("--json", json_out, js)):
        if path:
            write_output(flag, path, text)
    if any(r.verdict == "not held" for r in results):
        raise typer.Exit(1)
