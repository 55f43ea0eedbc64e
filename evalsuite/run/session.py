"""One `evalsuite run`: config -> model -> run folder -> variants -> summary -> tracking."""

from __future__ import annotations

from pathlib import Path

from evalsuite.core.errors import ConfigError, EvalsuiteError
from evalsuite.core.records import RunDir, new_run_id
from evalsuite.core.types import RunRecord
from evalsuite.report.summary import print_summary
from evalsuite.run.config import load_config
from evalsuite.run.progress import Progress, console
from evalsuite.run.runner import execute, find_resumable, load_tokenizer, new_record, resolve_model
from evalsuite.tasks import TaskContext


def _open_run_dir(config_path: Path, out: Path, resume: bool, resolved: dict) -> RunDir:
    if resume:
        found = find_resumable(out, config_path.stem)
        if found is None:
            raise EvalsuiteError(f"--resume: no earlier run of {config_path.name} in {out}")
        import yaml

        if yaml.safe_load((found.root / "config.yaml").read_text()) != resolved:
            raise EvalsuiteError(f"--resume: {config_path} changed since run {found.run_id}; start a new run without --resume")
        return found
    return RunDir(out / new_run_id(config_path.stem))


def run_config(config_path: Path, *, output_dir: Path | None, resume: bool, cache_dir: Path,
               show_progress: bool | None = None, only: list[str] | None = None,
               ray_address: str | None = None) -> RunRecord:
    """ray_address: None runs as the config's scheduler says; "" (a bare --ray) or an address runs on Ray."""
    cfg = load_config(config_path)
    resolved = cfg.model_dump(mode="json", exclude={"scheduler"})  # where it runs is not what is measured
    if ray_address is not None:
        cfg.scheduler = cfg.scheduler.model_copy(update={"kind": "ray", "address": ray_address or cfg.scheduler.address})
    if only:
        unknown = [v for v in only if v not in cfg.variants]
        if unknown:
            raise ConfigError(f"--variant: unknown {', '.join(unknown)} (allowed: {', '.join(cfg.variants)})")
        # In the order given: a user who names the variants that matter first (a time-boxed run on a
        # lent GPU) gets those first, not the config's order.
        cfg.variants = {k: cfg.variants[k] for k in dict.fromkeys(only)}
    base_dir = config_path.resolve().parent
    out = Path(output_dir or cfg.output_dir)
    run_dir = _open_run_dir(config_path, out, resume, resolved)
    with console.status("resolving model"):
        model_dir = resolve_model(cfg, base_dir, cache_dir)
        tokenizer = load_tokenizer(cfg, model_dir)
    ctx = TaskContext(base_dir=base_dir, cache_dir=cache_dir, seed=cfg.seed, tokenizer=tokenizer,
                      max_model_len=_min_max_model_len(cfg))
    if resume:
        record = run_dir.load_run()
    else:
        run_dir.write_config(resolved)
        record = new_record(cfg, run_dir, config_path, model_dir)
        run_dir.write_run(record)
    console.print(f"run {run_dir.run_id} -> {run_dir.root}")
    try:
        with Progress(show_progress) as progress:
            if cfg.scheduler.kind == "ray":
                from evalsuite.run.scheduler import execute_ray

                record = execute_ray(cfg, run_dir, record, model_dir, ctx, progress, resume)
            else:
                record = execute(cfg, run_dir, record, model_dir, ctx, progress, resume)
    except KeyboardInterrupt:
        _score_interrupted(run_dir, cache_dir)
        raise
    print_summary(record)
    _track(cfg, run_dir, record)
    return record


def _score_interrupted(run_dir: RunDir, cache_dir: Path) -> None:
    """An interrupt (Ctrl-C, a time limit's SIGINT) leaves the run folder as `evalsuite finish` would:
    each interrupted variant `partial`, scored on the samples it recorded; --resume completes it."""
    from evalsuite.run.finish import finish_run

    print_summary(finish_run(run_dir.root, cache_dir))


def _min_max_model_len(cfg) -> int | None:
    lens = [v.max_model_len or v.engine_args.get("max_model_len") for v in cfg.variants.values()]
    lens = [n for n in lens if n]
    return min(lens) if lens else None


def _track(cfg, run_dir: RunDir, record: RunRecord) -> None:
    if not cfg.tracking.enabled:
        return
    try:
        from evalsuite.report.tracking import log_run
    except ImportError:
        return
    try:
        console.print(log_run(run_dir, cfg.tracking).link, markup=False, highlight=False)
    except Exception as e:  # noqa: BLE001 - tracking must never lose a finished run
        console.print(f"[yellow]MLflow logging failed ({type(e).__name__}: {e}); records are in {run_dir.root}; "
                      f"run `evalsuite sync` later")
