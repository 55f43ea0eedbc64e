"""`evalsuite compare`, `gate` and `sync`: reading runs back, judging them, uploading them later."""

from __future__ import annotations

import tempfile
from pathlib import Path

import typer
from rich.console import Console

from evalsuite.errors import ConfigError, EvalsuiteError

FORMATS = ("table", "markdown", "csv")
URI_HELP = "MLflow tracking URI for run ids and experiment names (default: $MLFLOW_TRACKING_URI, else runs/mlflow.db)."


def compare_command(
    runs: list[str] = typer.Argument(..., help="Run directories, MLflow run ids or MLflow experiment names."),
    baseline: str | None = typer.Option(None, "--baseline", help="Baseline variant (default: config's `baseline`, else the first)."),
    out: Path | None = typer.Option(None, "--out", help="Also write compare.md, compare.csv and PNG plots here."),
    fmt: str = typer.Option("table", "--format", help="table | markdown | csv"),
    metric: list[str] | None = typer.Option(None, "--metric", help="Columns to show (glob, repeatable); CSV always has all."),
    uri: str | None = typer.Option(None, "--uri", help=URI_HELP),
) -> None:
    """Variants x metrics with deltas against a baseline; plots with --out."""
    from evalsuite.compare import compare, open_sources, rich_table, write_report

    if fmt not in FORMATS:
        raise ConfigError(f"--format: {fmt!r} is not one of {', '.join(FORMATS)}")
    with tempfile.TemporaryDirectory(prefix="evalsuite-compare-") as scratch:
        result = compare(open_sources(runs, uri, Path(scratch)), baseline, metric or None)
        files = write_report(result, out) if out else []
    if fmt == "markdown":
        typer.echo(result.markdown(), nl=False)
    elif fmt == "csv":
        typer.echo(result.csv(), nl=False)
    else:
        Console().print(rich_table(result.shown(), f"baseline {result.baseline} · deltas: points for scores, % otherwise"))
    for f in files:
        typer.echo(f"wrote {f}", err=True)


def gate_command(
    baseline: str = typer.Option(..., "--baseline", help="Baseline run directory or MLflow run id."),
    candidate: str = typer.Option(..., "--candidate", help="Candidate run directory or MLflow run id."),
    rules: Path = typer.Option(..., "--rules", help="Gate rules YAML (see configs/gates/default.yaml)."),
    variant_baseline: str | None = typer.Option(None, "--variant-baseline", help="Baseline variant (default: the only one, else config's `baseline`)."),
    variant_candidate: str | None = typer.Option(None, "--variant-candidate", help="Candidate variant (default: every variant of the candidate run)."),
    junit: Path | None = typer.Option(None, "--junit", help="Write JUnit XML here (one testcase per check)."),
    markdown: Path | None = typer.Option(None, "--markdown", help="Write a Markdown summary here (for a PR comment)."),
    uri: str | None = typer.Option(None, "--uri", help=URI_HELP),
) -> None:
    """Exit 0 if the candidate is within every rule's limit of the baseline, 1 if not, 2 on bad input."""
    from evalsuite.compare import open_sources
    from evalsuite.gate import load_rules, run_gate, to_junit, to_markdown

    spec = load_rules(rules)
    with tempfile.TemporaryDirectory(prefix="evalsuite-gate-") as scratch:
        try:
            base_rd, only_b = _one_run(open_sources([baseline], uri, Path(scratch) / "b"), "--baseline")
            cand_rd, only_c = _one_run(open_sources([candidate], uri, Path(scratch) / "c"), "--candidate")
            report = run_gate(base_rd, cand_rd, spec, str(rules), variant_baseline or only_b,
                              variant_candidate or only_c)
        except EvalsuiteError as e:
            raise ConfigError(str(e)) from None  # exit 2: an unreadable input is not a failed candidate
    text = to_markdown(report)
    if markdown:
        markdown.parent.mkdir(parents=True, exist_ok=True)
        markdown.write_text(text)
    if junit:
        junit.parent.mkdir(parents=True, exist_ok=True)
        junit.write_text(to_junit(report))
    typer.echo(text, nl=False)
    if not report.passed:
        raise typer.Exit(1)


def _one_run(sources, flag: str):
    """A gate side is one run; a variant run id (MLflow) also picks that variant."""
    if len(sources) != 1:
        raise ConfigError(f"{flag}: give one run (this names {len(sources)}; an experiment holds several)")
    rd, only = sources[0]
    return rd, next(iter(only)) if only and len(only) == 1 else None


def sync_command(
    run_dirs: list[Path] | None = typer.Argument(None, help="Run directories (default: every run under --output-dir)."),
    output_dir: Path = typer.Option(Path("runs"), "--output-dir", "-o", help="Where run folders are."),
    uri: str | None = typer.Option(None, "--uri", help="Tracking URI (default: config's tracking.uri, $MLFLOW_TRACKING_URI, else <output-dir>/mlflow.db)."),
) -> None:
    """Upload runs to MLflow that are not there yet; runs already there are left alone."""
    try:
        from evalsuite.tracking import find_run_dirs, log_run, run_tracking_config
    except ImportError as e:
        raise EvalsuiteError(f"sync needs mlflow ({e}); install evalsuite's dependencies") from None

    failed = 0
    for rd in find_run_dirs(list(run_dirs or []), output_dir):
        cfg = run_tracking_config(rd)
        if not run_dirs and not cfg.enabled:
            typer.echo(f"{rd.root}: tracking disabled in its config; skipped")
            continue
        try:
            res = log_run(rd, cfg, uri=uri)
        except Exception as e:  # noqa: BLE001 - one bad run must not stop the others
            failed += 1
            typer.echo(f"{rd.root}: not synced ({type(e).__name__}: {e})", err=True)
            continue
        what = f"uploaded {', '.join(res.created)}" if res.created else "already synced"
        typer.echo(f"{rd.root}: {what} (parent run {res.parent_run_id} at {res.uri})")
    if failed:
        raise typer.Exit(1)


def register(app: typer.Typer, friendly) -> None:
    app.command("compare")(friendly(compare_command))
    app.command("gate")(friendly(gate_command))
    app.command("sync")(friendly(sync_command))
