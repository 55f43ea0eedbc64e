"""`evalsuite export`, `evalsuite import` and `evalsuite results`: per-item scores kept out of a run
folder and back, and the results pages' data archives."""

from __future__ import annotations

from pathlib import Path

import typer

from evalsuite.cli.usage import OneLineUsageGroup

results_app = typer.Typer(cls=OneLineUsageGroup, no_args_is_help=True,
                          help="The results pages' data: rebuild each page's archive from the clone's history (or fetch it "
                               "from a mirror) with its sha256 checked; pack new data into archives.")
PAGE_HELP = "A results page: its .md file, its folder, or its name in docs/results."


def export_command(
    run: Path = typer.Argument(..., metavar="RUN", help="A run folder."),
    scores: Path = typer.Option(..., "--scores", metavar="DIR", help="Keep each variant's per-item scores here "
                                "(beside what is kept there already): result, config, engine memory lines and one "
                                "gzip JSONL of scores per task."),
    variant: list[str] = typer.Option([], "--variant", "-V", metavar="NAME", help="Only these variants (repeatable)."),
) -> None:
    """Keep a run's per-item scores without its prompts and completions; `evalsuite import` reads them back.

    Example:
      evalsuite export runs/A --scores kept/"""
    from evalsuite.core.outputs import writing
    from evalsuite.results.scores import export_scores

    with writing("--scores", scores, folder=True):
        for line in export_scores(run, scores, variant):
            typer.echo(f"{run.name}/{line}")


def import_command(
    kept: Path = typer.Argument(..., metavar="KEPT", help="A folder of kept scores (`evalsuite export --scores`)."),
    out: Path = typer.Argument(..., metavar="OUT", help="The run folder to make (new or empty); with --for-resume, "
                               "the output folder `evalsuite run --resume` will be given."),
    config: Path | None = typer.Option(None, "--config", metavar="CONFIG", help="The config the scores were run with "
                                       "(default: the one the kept variants share)."),
    variant: list[str] = typer.Option([], "--variant", "-V", metavar="NAME", help="Only these variants (repeatable)."),
    for_resume: bool = typer.Option(False, "--for-resume", help="Make the run folder where `evalsuite run --resume "
                                    "CONFIG -o OUT` finds it, with CONFIG's tasks only: the run then measures only the "
                                    "items not kept (never latency)."),
) -> None:
    """A run folder from kept per-item scores, every metric recomputed as `evalsuite finish` does:
    `gate`, `compare`, `report` and `check` read it as the run it came from.

    Example:
      evalsuite import kept/ runs/A-again"""
    from evalsuite.core.outputs import writing
    from evalsuite.data.assets import default_cache_dir
    from evalsuite.results.scores import import_scores

    with writing("OUT", out, folder=True):
        done = import_scores(kept, out, config, variant, default_cache_dir(), for_resume=for_resume)
    for line in done.said:
        typer.echo(line)
    if done.root is not None:
        typer.echo(done.root)


def fetch_command(
    page: list[str] = typer.Argument(..., metavar="PAGE...", help=PAGE_HELP),
    source: str | None = typer.Option(None, "--from", metavar="DIR|URL", help="A mirror of the archives: a folder, "
                                      "file://, http:// on 127.0.0.1, or https:// from a --trust-host (default: "
                                      "$EVALSUITE_RESULTS_FROM, else rebuilt from this clone's git history, from the "
                                      "commit the page records)."),
    into: Path | None = typer.Option(None, "--into", metavar="DIR", help="Unpack here instead of the page's folder "
                                     "(one page only)."),
    trust_host: list[str] = typer.Option([], "--trust-host", metavar="HOST", help="Also fetch over https from HOST "
                                         "(repeatable): a mirror. The sha256 is checked all the same."),
    root: Path | None = typer.Option(None, "--root", metavar="DIR", help="Where pages named by name are (default: "
                                     "docs/results)."),
) -> None:
    """Put pages' data beside them: each archive rebuilt from the commit the page records (or fetched from a
    mirror), its sha256 checked against the page's, then unpacked.

    Example:
      evalsuite results fetch h200-2026-12-01-qwen2.5-coder-1.5b"""
    from evalsuite.core.errors import ConfigError
    from evalsuite.core.outputs import writing
    from evalsuite.results.archive import fetch
    from evalsuite.results.pages import find_page
    from evalsuite.results.sources import default_source

    if into is not None and len(page) > 1:
        raise ConfigError("--into: one page at a time")
    source = source or default_source()
    for ref in page:
        p = find_page(ref, root)
        dest = into or p.folder
        with writing("--into" if into else "PAGE", dest, folder=True):
            archive, files = fetch(p, source, dest, tuple(h.lower() for h in trust_host))
        state = f"{len(files)} files unpacked" if files else "already there"
        origin = f", rebuilt from commit {archive.commit[:12]}" if files and source is None and archive.commit else ""
        typer.echo(f"{dest}: {archive.file} (sha256 {archive.sha256[:12]}...{origin}): {state}")


def pack_command(
    page: list[str] = typer.Argument(..., metavar="PAGE...", help=PAGE_HELP),
    out: Path = typer.Option(Path("build/results"), "--out", metavar="DIR", help="Where the archives are written."),
    summary: list[str] | None = typer.Option(None, "--summary", metavar="FILE", help="A file of the page's folder "
                                             "kept in git, not archived (repeatable; default: those the page "
                                             "records). Markdown always is."),
    commit: str | None = typer.Option(None, "--commit", metavar="REV", help="The commit that holds these files in "
                                      "the page's folder (`git add -f` them first), recorded for a clone to rebuild "
                                      "the archive from; checked to make the same tar (default: the one the page "
                                      "records, while the files are the same)."),
    root: Path | None = typer.Option(None, "--root", metavar="DIR", help="Where pages named by name are (default: "
                                     "docs/results)."),
) -> None:
    """Pack pages' data into versioned archives, their sha256 and the commit holding their files recorded
    in each page.

    An archive holds every file of the page's folder but its Markdown and JSON summaries; the same files
    make the same tar.

    Example:
      evalsuite results pack h200-2026-12-01-qwen2.5-coder-1.5b"""
    from evalsuite.core.outputs import writing
    from evalsuite.results.archive import pack
    from evalsuite.results.pages import find_page

    for ref in page:
        p = find_page(ref, root)
        with writing("--out", out, folder=True):
            done = pack(p, out, summary or None, commit)
        what = "new version" if done.changed else "unchanged"
        typer.echo(f"{done.path}: {done.archive.files} files, {done.archive.bytes:,} bytes, "
                   f"sha256 {done.archive.sha256} ({what})")
        if done.note:
            typer.echo(f"note: {done.note}", err=True)


def list_command(
    root: Path | None = typer.Option(None, "--root", metavar="DIR", help="The pages' folder (default: docs/results)."),
) -> None:
    """Every results page, the archive it records, and whether its data is here.

    Examples:
      evalsuite results list
      evalsuite results list --root ~/evalsuite/docs/results"""
    from evalsuite.results.pages import fetched, pages

    for p in pages(pages_root(root)):
        archive = p.archive()
        if archive is None:
            typer.echo(f"{p.name}: no data archive (summaries only)")
            continue
        got = fetched(p)
        here = "fetched" if got and got.sha256 == archive.sha256 else "not fetched"
        held = f"commit {archive.commit[:12]}" if archive.commit else "no commit holds it"
        typer.echo(f"{p.name}: {archive.file} ({archive.bytes / 1e6:.1f} MB, {archive.files} files, {held}): {here}")


def pages_root(root: Path | None) -> Path:
    """--root, else docs/results of the clone this folder is in (here or a folder above, as git finds
    its root); a folder without pages is one line, exit 2, never an empty list that reads as none."""
    from evalsuite.core.errors import ConfigError
    from evalsuite.results.pages import RESULTS_DIR, pages

    if root is None:
        here = Path.cwd()
        root = next((d / RESULTS_DIR for d in (here, *here.parents) if (d / RESULTS_DIR).is_dir()), RESULTS_DIR)
    if not pages(root):
        raise ConfigError(f"{root}: no results pages here (nor in docs/results of a folder above); run it in a "
                          "clone of evalsuite, or give --root DIR")
    return root
