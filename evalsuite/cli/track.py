"""`evalsuite compare`, `gate` and `sync`: reading runs back, judging them, uploading them later."""

from __future__ import annotations

import tempfile
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from evalsuite.core.errors import ConfigError, EvalsuiteError, InternalError
from evalsuite.verdict.baseline import BASELINE_HELP
from evalsuite.tracking.settings import uri_problem

Format = StrEnum("Format", ["table", "markdown", "csv", "json"])
GateFormat = StrEnum("GateFormat", ["table", "markdown", "json"])


def uri_flag(value: str | None) -> str | None:
    """--uri as given, or a usage error where MLflow could not open it (before any run is read)."""
    problem = uri_problem(value) if value is not None else None
    if problem:
        raise typer.BadParameter(problem)
    return value


URI_HELP = "MLflow tracking URI for run ids and experiment names (default: $MLFLOW_TRACKING_URI, else runs/mlflow.db)."


def compare_command(
    runs: list[str] = typer.Argument(..., metavar="RUN...", help="Run folders (DIR or DIR:VARIANT), MLflow run ids or experiment names; several runs side by side."),
    baseline: str | None = typer.Option(None, "--baseline", metavar="VARIANT", help=f"{BASELINE_HELP} (default: the first run's config `baseline`, else its first variant)."),
    out: Path | None = typer.Option(None, "--out", metavar="DIR", help="Also write compare.md, compare.csv and PNG plots here."),
    fmt: Format = typer.Option(Format.table, "--format", metavar="FORMAT", help="What to print: table, markdown, csv or json."),
    metric: list[str] | None = typer.Option(None, "--metric", metavar="GLOB", help="Rows to show (glob, repeatable); CSV always has all."),
    uri: str | None = typer.Option(None, "--uri", callback=uri_flag, metavar="URI", help=URI_HELP),
) -> None:
    """Metrics x variants with deltas and paired 95% intervals against a baseline; plots with --out.

    Examples:
      evalsuite compare runs/A
      evalsuite compare runs/A runs/B:awq --out report/ --format csv"""
    from evalsuite.core.outputs import writing
    from evalsuite.report.compare import compare
    from evalsuite.report.compare_view import terminal_view, to_csv, to_json, to_markdown, write_report
    from evalsuite.tracking.sources import open_sources

    with tempfile.TemporaryDirectory(prefix="evalsuite-compare-") as scratch:
        result = compare(open_sources(runs, uri, Path(scratch)), baseline, metric or None)
        files = []
        if out:
            with writing("--out", out, folder=True):
                files = write_report(result, out)
    if fmt != Format.table:
        typer.echo({Format.markdown: to_markdown, Format.csv: to_csv, Format.json: to_json}[fmt](result), nl=False)
    else:
        console = Console()
        for part in terminal_view(result, console.width):  # 80 when piped, unless $COLUMNS says otherwise
            console.print(part)
    for f in files:
        typer.echo(f"wrote {f}", err=True)


def gate_command(
    baseline: str | None = typer.Option(None, "--baseline", metavar="RUN", help="Baseline run: a run folder (DIR or DIR:VARIANT) or an MLflow run id."),
    candidate: list[str] | None = typer.Option(None, "--candidate", metavar="RUN", help="Candidate run: a run folder (DIR or DIR:VARIANT) or an MLflow run id; repeatable."),
    rules: Path | None = typer.Option(None, "--rules", help="Gate rules YAML (default: the baseline run's config's `gate_rules`, else the shipped rules, evalsuite/verdict/gate_rules.yaml).", metavar="FILE"),
    control: list[str] | None = typer.Option(None, "--control", help="A control, named as RUN:VARIANT: the baseline rerun or another engine mode, a noise reference never judged; never a candidate or the baseline; repeatable (default: the baseline run's config `controls`).", metavar="RUN:VARIANT"),
    variant_baseline: str | None = typer.Option(None, "--variant-baseline", metavar="NAME", help="Baseline variant for a --baseline given without one (default: the only one, else its config's `baseline`)."),
    variant_candidate: str | None = typer.Option(None, "--variant-candidate", metavar="NAME", help="Candidate variant for candidates given without one (default: every variant)."),
    junit: Path | None = typer.Option(None, "--junit", metavar="FILE", help="Write JUnit XML here (one testcase per check)."),
    markdown: Path | None = typer.Option(None, "--markdown", metavar="FILE", help="Write the full Markdown report here (for a PR comment)."),
    json_out: Path | None = typer.Option(None, "--json", metavar="FILE", help="Write the gate as JSON here: every check, bound, limit, n and decision, and the exit code with its reason (schema: docs/statistics.md)."),
    fmt: GateFormat = typer.Option(GateFormat.table, "--format", metavar="FORMAT", help="What to print: table (a line per candidate and the checks that failed or could not be decided, at the terminal's width), markdown (the full report) or json (as --json writes it)."),
    plan: str | None = typer.Option(None, "--plan", help="Print what RULES (default: --rules, else the shipped rules) can resolve with --n paired items, then exit.", metavar="[RULES]"),
    n: int | None = typer.Option(None, "--n", min=1, metavar="N", help="With --plan: paired items per check."),
    discordance: float | None = typer.Option(None, "--discordance", min=0.0, max=1.0, metavar="SHARE", help="With --plan: fraction of items that change answer (default: the rules' `discordance`)."),
    uri: str | None = typer.Option(None, "--uri", callback=uri_flag, metavar="URI", help=URI_HELP),
) -> None:
    """Exit 0 if every candidate passed, 1 if any failed, 3 if any is inconclusive (no failure, but too
    little evidence to pass), 2 on bad input, 70 on an error of evalsuite's own (never a verdict).

    Examples:
      evalsuite gate --baseline runs/A:bf16 --candidate runs/A
      evalsuite gate --baseline runs/A:bf16 --candidate runs/B --markdown gate.md"""
    from evalsuite.core.outputs import write_output
    from evalsuite.verdict.rules import default_rules_path, load_rules
    from evalsuite.report.gate_json import to_json
    from evalsuite.report.gate_report import plan_text, to_junit, to_markdown

    _check_plan_flags(plan is not None, {"--n": n, "--discordance": discordance},
                      {"--baseline": baseline, "--candidate": candidate, "--control": control, "--uri": uri,
                       "--variant-baseline": variant_baseline, "--variant-candidate": variant_candidate,
                       "--markdown": markdown, "--junit": junit, "--json": json_out})
    if plan:  # `--plan RULES`, or a bare `--plan` (main.bare_flags) with --rules or the default
        rules = Path(plan)
    if plan is not None:
        shown = str(rules) if rules else "the shipped default"  # never a path of this machine in a report
        path = rules or default_rules_path()
        if n is None:
            raise ConfigError("--plan: give --n, the number of paired items per check")
        typer.echo(plan_text(load_rules(path), shown, n, discordance), nl=False)
        _say_default_rules(rules, path)
        return
    missing = [f for f, v in (("--baseline", baseline), ("--candidate", candidate)) if not v]
    if missing:
        raise ConfigError(f"{', '.join(missing)}: required (or --plan --n N)")
    with tempfile.TemporaryDirectory(prefix="evalsuite-gate-") as scratch:
        try:
            report, path = _run_gate(baseline, candidate, rules, variant_baseline, variant_candidate, uri,
                                     Path(scratch), control)
        except EvalsuiteError as e:
            raise ConfigError(str(e)) from None  # exit 2: an unreadable input is not a failed candidate
        except Exception as e:  # noqa: BLE001 - a bug of ours must not exit 1, which means "failed"
            raise InternalError(f"the gate could not judge these runs ({type(e).__name__}: {e}); this is a bug "
                                "in evalsuite, not a verdict on the candidate") from e
    text = to_markdown(report)
    as_json = to_json(report) if json_out or fmt == GateFormat.json else ""
    _print_gate(report, as_json if fmt == GateFormat.json else text, fmt, markdown)  # first: a file that cannot
    # be written must not cost the verdict
    for flag, out, body in (("--markdown", markdown, text), ("--junit", junit, to_junit(report) if junit else ""),
                            ("--json", json_out, as_json)):
        if out:
            write_output(flag, out, body)
    _say_default_rules(rules, path)
    if report.exit_code:
        raise typer.Exit(report.exit_code)


def _print_gate(report, text: str, fmt: GateFormat, markdown: Path | None) -> None:
    """The full Markdown report, or (the default, piped or not) a line per candidate and the checks
    that need a look, at the terminal's width: 80 when piped, unless $COLUMNS says otherwise."""
    from evalsuite.report.gate_view import terminal_view

    if fmt in (GateFormat.markdown, GateFormat.json):
        typer.echo(text, nl=False)
        return
    console = Console()
    for part in terminal_view(report, console.width, markdown):
        console.print(part)


def _check_plan_flags(planning: bool, plan_only: dict[str, Any], runs_only: dict[str, Any]) -> None:
    """A flag of the other mode is refused, not dropped: silently ignored, it would read as taken
    into the verdict (--n without --plan) or as a gate that ran (--candidate with --plan)."""
    for flag, value in (runs_only if planning else plan_only).items():
        if value:
            shown = " ".join(map(str, value)) if isinstance(value, list) else value
            if planning:
                raise ConfigError(f"{flag} {shown}: not with --plan, which reads only the rules and --n")
            raise ConfigError(f"{flag} {shown}: only with --plan; a gate measures the runs as they are")


def _say_default_rules(rules: Path | None, path: Path) -> None:
    """Which rules judged, where none were given; said last, so that bad input reads as one line."""
    from evalsuite.core.shared import shared_path
    from evalsuite.verdict.rules import default_rules_path

    if rules is None:
        which = "the shipped default" if path == default_rules_path() else "the baseline run's config's gate_rules"
        typer.echo(f"rules: {which} ({shared_path(path)}); --rules FILE for your own", err=True)


def _run_gate(baseline: str, candidates: list[str], rules: Path | None, variant_baseline: str | None,
              variant_candidate: str | None, uri: str | None, scratch: Path, controls: list[str] | None = None):
    """The gate's report and the rules file that judged: --rules, else the baseline run's config's
    `gate_rules` (the rules it was made to be judged by), else the shipped default."""
    from evalsuite.verdict.gate import run_gate
    from evalsuite.verdict.sides import OnlyControls, SideError
    from evalsuite.core.shared import shared_path
    from evalsuite.verdict.rules import SHIPPED_RULES, default_rules_path, load_rules, run_rules_path
    from evalsuite.tracking.sources import open_sources

    base = _one_run(open_sources([baseline], uri, scratch / "b"), "--baseline", variant_baseline, baseline)
    path = rules or run_rules_path(base[0].run_dir.read_config())
    shipped = {default_rules_path().parent / f: n for n, f in SHIPPED_RULES.items()}
    # never a path of this machine in a report: a shipped set by its name
    name = shipped.get(path.resolve())
    shown = shared_path(rules) if rules else "the shipped default" if name == "default" else \
        f"the shipped {name} rules" if name else shared_path(path)
    spec = load_rules(path)
    sides = [_one_run(open_sources([ref], uri, scratch / f"c{i}"), "--candidate", variant_candidate, ref)
             for i, ref in enumerate(candidates)]
    ctrl = [_one_run(open_sources([ref], uri, scratch / f"k{i}"), "--control", None, ref)
            for i, ref in enumerate(controls)] if controls else None
    flags = [base, *sides, *(ctrl or [])]
    try:
        return run_gate(base[0], [s for s, _ in sides], spec, shown, [s for s, _ in ctrl] if ctrl else None), path
    except (SideError, OnlyControls) as e:
        raise ConfigError(_worded(e, flags)) from None


FLAGS = {"baseline": "--baseline", "candidate": "--candidate", "control": "--control"}


def _worded(e, flags: list) -> str:
    """A side the gate could not pick, said with the flag that named it (--variant-baseline or
    --variant-candidate where that gave its variant); a side read from the run's config, by its role."""
    from evalsuite.verdict.sides import BaselineUnnamed, ControlTaken, NoCandidate, NotAVariant, OnlyControls

    if isinstance(e, OnlyControls):
        return f"{e}; give a --candidate that is not one"
    flag = next((f for s, f in flags if s is e.side), FLAGS[e.role])
    if isinstance(e, BaselineUnnamed):
        return (f"--baseline: run {e.run_id} holds {', '.join(e.names)}; name one as {e.side.run_dir.root}:VARIANT "
                f"or with --variant-baseline (or set `baseline` in its config)")
    if isinstance(e, NotAVariant):
        return f"{flag}: {e.name!r} is not a variant of run {e.run_id} (allowed: {', '.join(e.names)})"
    if isinstance(e, NoCandidate):
        but = f" but its controls ({', '.join(e.controls)}), which are noise references" if e.controls else ""
        return f"{flag}: run {e.run_id} has no variant to compare with {e.baseline!r}{but}; nothing to judge"
    if isinstance(e, ControlTaken):
        role = "the baseline" if e.taken_by == "baseline" else "a candidate" if e.whole_run is None else \
            f"a candidate (--candidate {e.whole_run} judges every variant of that run but its controls)"
        return (f"{flag} {e.side.run_dir.root}:{e.side.variant}: is {role}; a control is another variant (the "
                f"baseline rerun, or another engine mode)")
    return str(e)


def _one_run(sources, flag: str, variant: str | None, ref: str):
    """A gate side is one run; DIR:VARIANT or a variant's MLflow run id also picks that variant. The
    side comes with the flag that named its variant (--variant-baseline or --variant-candidate where
    that gave it), for an error about it."""
    from evalsuite.verdict.sides import Side

    if len(sources) != 1:
        raise ConfigError(f"{flag}: give one run (this names {len(sources)}; an experiment holds several)")
    rd, only = sources[0]
    picked = next(iter(only)) if only and len(only) == 1 else None
    if flag == "--baseline" and picked and variant and picked != variant:
        # --variant-candidate is documented as the default for candidates named without one; the baseline
        # is one variant, and two names for it leave no way to tell which the user meant
        raise ConfigError(f"--baseline names variant {picked!r} and --variant-baseline {variant!r}; give one")
    if flag == "--control" and not picked:
        _unnamed_control(rd, ref)
    named_by = flag if picked or not variant else f"--variant-{flag.removeprefix('--')}"
    return Side(rd, picked or variant), named_by


def _unnamed_control(rd, ref: str) -> None:
    """A control is named, never inferred: RUN:VARIANT, even where the run holds one variant."""
    names = [v.variant for v in rd.load_run().variants]
    raise ConfigError(f"--control {ref}: a control is named as RUN:VARIANT, never inferred from a run "
                      f"(allowed: {', '.join(f'{ref}:{n}' for n in names)})")


def sync_command(
    run_dirs: list[Path] | None = typer.Argument(None, metavar="[RUN_DIR]...", help="Run folders (default: every run under --output-dir)."),
    output_dir: Path = typer.Option(Path("runs"), "--output-dir", "-o", metavar="DIR", help="Where run folders are."),
    uri: str | None = typer.Option(None, "--uri", callback=uri_flag, metavar="URI", help="Tracking URI (default: the tracking.uri each run recorded, else $MLFLOW_TRACKING_URI, else mlflow.db in the folder that holds the run)."),
) -> None:
    """Upload runs to MLflow that are not there yet; runs already there are left alone.

    Examples:
      evalsuite sync
      evalsuite sync runs/A --uri http://127.0.0.1:5000"""
    try:
        from evalsuite.tracking.store import env_uri, find_run_dirs, log_run, recorded_host_problem, run_tracking_config
    except ImportError as e:
        raise EvalsuiteError(f"sync needs mlflow ({e}); install evalsuite's dependencies") from None

    env_uri()  # a $MLFLOW_TRACKING_URI MLflow cannot open is one line, not a failure per run
    failed, links = 0, []
    found = find_run_dirs(list(run_dirs or []), output_dir)
    if not found:  # an empty --output-dir is no error, but a silent exit 0 reads as "uploaded"
        typer.echo(f"nothing to sync: no run folders (with a run.json) in {output_dir}")
    for rd in found:
        cfg = run_tracking_config(rd)
        if not run_dirs and not cfg.enabled:
            typer.echo(f"{rd.root}: tracking disabled in its config; skipped")
            continue
        problem = recorded_host_problem(rd, cfg, uri)
        if problem:
            failed += 1
            typer.echo(f"{rd.root}: not synced ({problem})", err=True)
            continue
        try:
            res = log_run(rd, cfg, uri=uri)
        except Exception as e:  # noqa: BLE001 - one bad run must not stop the others
            failed += 1
            typer.echo(f"{rd.root}: not synced ({type(e).__name__}: {e})", err=True)
            continue
        what = f"uploaded {', '.join(res.created)}" if res.created else "already synced"
        typer.echo(f"{rd.root}: {what} (parent run {res.parent_run_id} at {res.uri})")
        links.append(res.link)
    for link in dict.fromkeys(links):  # the runs table of each experiment written to
        typer.echo(link)
    if failed:
        raise typer.Exit(1)


def register(app: typer.Typer, friendly) -> None:
    app.command("compare")(friendly(compare_command))
    app.command("gate")(friendly(gate_command))
    app.command("sync")(friendly(sync_command))
