"""`evalsuite run --resume`: which run folder a config continues, and which of its variants are left to run.

A resumed run continues the latest folder whose run.json names the same config file, refused when
the config changed since in what it measures; a variant is left as recorded when it was skipped or
scored every item of this config (of a task that `--stop decided` ended early, the items it needed),
and run again otherwise (the runner then asks only for the items it has no record of).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from evalsuite.core.errors import ConfigError
from evalsuite.core.rundir import RUN_FILE, RunDir, create_run_dir, run_name, run_stem
from evalsuite.core.types import Sample, VariantResult
from evalsuite.run.config import RunConfig, Variant
from evalsuite.run.progress import console
from evalsuite.tasks import Task


def config_digest(resolved: dict) -> str:
    """sha256 of a resolved config (includes and defaults applied), as config.yaml records it."""
    return hashlib.sha256(json.dumps(resolved, sort_keys=True, default=str).encode()).hexdigest()


def find_resumable(output_dir: Path, config_path: Path) -> RunDir | None:
    """The latest run folder under `output_dir` whose record names `config_path` (run.json's
    config_path, resolved), whatever characters the file's name holds. A record from before it was
    kept resolved is matched by the run id's config stem. A folder whose run.json cannot be read is
    passed over, unless its name says it may be this config's run: then what is wrong is said."""
    target = Path(os.path.realpath(config_path))
    found = []
    for folder in sorted(output_dir.iterdir()) if output_dir.is_dir() else []:
        rd = RunDir(folder)
        if not (folder / RUN_FILE).exists() and not (folder / RUN_FILE).is_symlink():
            continue
        try:
            record = rd.load_run()
        except ConfigError:
            if run_name(folder.name) == run_stem(config_path.stem):
                raise
            continue
        if record.config_path is None:
            ran = run_name(folder.name) == run_stem(config_path.stem)
        else:
            ran = Path(os.path.realpath(record.config_path)) == target
        if ran:
            found.append(rd)
    return found[-1] if found else None


def open_run_dir(config_path: Path, out: Path, resume: bool, resolved: dict) -> RunDir:
    """The folder the run writes: a new one, or with `resume` the one it continues."""
    if resume:
        found = find_resumable(out, config_path)
        if found is None:
            raise ConfigError(f"--resume: no run of {config_path} in {out} (a run folder's run.json names the config "
                              f"it ran); start a new run without --resume")
        record = found.load_run()  # a damaged record is refused before the run takes the folder (a lock file)
        if record.config_sha256 != config_digest(resolved):  # none in older records: compare the configs
            changed = [k for k in differences(found.read_config(), resolved, most=100)
                       if k.split(".")[0] not in NOT_MEASURED][:3]
            if changed:
                raise ConfigError(f"--resume: {config_path} changed since run {found.run_id} ({', '.join(changed)}); "
                                  f"start a new run without --resume")
        return found
    return create_run_dir(out, config_path.stem)


# Keys of a config that change where a run reports (and whom it may reach), not what it measures: edited
# between two sessions, the run still resumes.
NOT_MEASURED = ("tracking", "output_dir", "allow_hosts")


def differences(old: object, new: object, where: str = "", most: int = 3) -> list[str]:
    """Up to `most` dotted keys where two resolved configs differ, so a refused --resume says what
    moved (an --limit or --tasks of its own changes the recorded config as an edit does)."""
    if isinstance(old, dict) and isinstance(new, dict):
        keys = list(old) + [k for k in new if k not in old]
        parts = [differences(old.get(k), new.get(k), f"{where}.{k}" if where else str(k), most) for k in keys]
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        parts = [differences(a, b, f"{where}.{i}", most) for i, (a, b) in enumerate(zip(old, new))]
    else:
        return [] if old == new else [where or "(whole config)"]
    return [d for p in parts for d in p][:most]


def to_run(cfg: RunConfig, run_dir: RunDir, tasks: list[Task], samples: dict[str, list[Sample]],
           resume: bool) -> tuple[dict[str, Variant], list[VariantResult]]:
    """The variants left to run, in the config's order, and the results --resume leaves as
    recorded, each said in one line."""
    todo, kept = {}, []
    for name, variant in cfg.variants.items():
        prev = run_dir.load_result(name) if resume else None
        if finished(prev, run_dir, variant, tasks, samples):
            if prev.status != "skipped":
                console.print(f"{name}: every item of this config is scored; left as recorded ({prev.status})")
            kept.append(prev)
        else:
            todo[name] = variant
    return todo, kept


def finished(prev: VariantResult | None, run_dir: RunDir, variant: Variant, tasks: list[Task],
             samples: dict[str, list[Sample]]) -> bool:
    """Whether --resume leaves a variant as recorded: skipped, or `ok` with a score for every item
    of this config. `ok` alone is not enough: the folder's scores may come from a smaller grid than
    this config's (a config edited between runs, or per-item scores imported from another run)."""
    if prev is None or prev.status == "skipped":
        return prev is not None
    if prev.status != "ok":
        return False
    for t in tasks:
        if t.harness or (variant.simulate and not t.runs_simulated) or t.name in prev.stopped:
            continue  # a harness keeps its own items; a simulated variant never runs this task; a task
            # stopped early (--stop decided) needs none of the items it did not score
        have = {r["sample"]["id"] for r in run_dir.load_samples(prev.variant, t.name)}
        if any(s.id not in have for s in samples[t.name]):
            return False
    return True
