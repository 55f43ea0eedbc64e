"""Run folders as `evalsuite check` reads them: variants by `run:variant` or plain name, metrics by address.

`run:variant`: `run` is a run id, or a pattern (fnmatch) over run names, a run's name being its
id without the leading timestamp, i.e. its config's stem: `h200-llama8b-128k:fp8`,
`qwen-1.5b*:bf16`. Where several matching runs hold the variant (results built up over separate
runs of one config), the latest run in which it finished `ok` and has the metric is read, and the
report names it. A plain `variant` must be in exactly one given run, so that two models' `fp8`
variants are never mixed up.
"""

from __future__ import annotations

import difflib
import fnmatch
import math
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import ValidationError

from evalsuite.check.schema import engine_field, split_at
from evalsuite.core.errors import ConfigError, EvalsuiteError
from evalsuite.core.rundir import RunDir, run_name
from evalsuite.core.types import Metric, RunRecord, VariantResult


class NotMeasurable(Exception):
    """A check cannot be answered from what was given; the message says why."""


@dataclass
class Run:
    rd: RunDir
    record: RunRecord
    config: dict
    results: dict[str, VariantResult] = field(default_factory=dict)

    @property
    def run_id(self) -> str:
        return self.rd.run_id

    @property
    def name(self) -> str:
        return run_name(self.run_id)

    def matches(self, pattern: str) -> bool:
        stem = Path(self.record.config_path).stem if self.record.config_path else None
        return pattern == self.run_id or any(fnmatch.fnmatchcase(n, pattern) for n in (self.name, stem) if n)


@dataclass
class Found:
    run: Run
    result: VariantResult

    @property
    def label(self) -> str:
        return f"{self.run.run_id}:{self.result.variant}"


def open_run(path: Path) -> Run:
    """One run folder, read only; unreadable input is a ConfigError (exit 2)."""
    rd = RunDir(path)
    if not rd.exists():
        raise ConfigError(f"RUN {path}: not a run folder (no run.json); give folders under runs/")
    try:
        record = rd.load_run()
    except EvalsuiteError as e:
        raise ConfigError(str(e)) from None
    results = {}
    for v in record.variants:
        try:  # result.json is rewritten as the variant runs: the freshest view of it
            results[v.variant] = rd.load_result(v.variant) or v
        except (ValidationError, ValueError) as e:
            raise ConfigError(f"{path / v.variant / 'result.json'}: not a variant result ({str(e).splitlines()[0]})") from None
    try:
        config = rd.read_config()
    except yaml.YAMLError:
        config = {}
    return Run(rd, record, config, results)


def find_variant(runs: list[Run], ref: str) -> list[Found]:
    """Every finished variant a reference may mean, latest run first."""
    run_name, _, variant = ref.rpartition(":")
    pool = [r for r in runs if r.matches(run_name)] if run_name else runs
    if run_name and not pool:
        raise NotMeasurable(f"no run matching {run_name!r} was given (given: {', '.join(r.run_id for r in runs) or 'none'})")
    # a variant an interrupted run never started holds nothing: another run's record of it speaks
    holders = [r for r in pool if variant in r.results and r.results[variant].status != "pending"]
    if not holders:
        where = f"runs matching {run_name!r}" if run_name else "the given runs"
        raise NotMeasurable(f"variant {variant!r} is not in {where}")
    if not run_name and len({r.name for r in holders}) > 1:
        raise NotMeasurable(f"variant {variant!r} is in runs of different configs "
                            f"({', '.join(r.run_id for r in holders)}): name it run:{variant}")
    ok = sorted((r for r in holders if r.results[variant].status == "ok"),
                key=lambda r: (r.record.created_at, r.run_id), reverse=True)
    if not ok:
        res = holders[-1].results[variant]
        raise NotMeasurable(f"variant {holders[-1].run_id}:{variant} is {res.status}: {res.reason or 'no reason recorded'}")
    return [Found(r, r.results[variant]) for r in ok]


def undefined_variant(runs: list[Run], ref: str) -> str | None:
    """Why a `run:variant` reference is bad input, or None: the runs it matches were given and none of
    their configs defines the variant (a misspelling). A variant a config defines but a run did not
    measure (`-V`, a cut run) is not measurable, not bad input; so is a run that was not given."""
    run_name, _, variant = ref.rpartition(":")
    pool = [r for r in runs if r.matches(run_name)] if run_name else []
    defined: set[str] = set()
    for r in pool:
        if not isinstance(r.config.get("variants"), dict):
            return None  # a run whose config cannot be read may define it
        defined |= set(r.config["variants"]) | set(r.results)
    if not pool or variant in defined:
        return None
    return (f"{ref!r}: the runs matching {run_name!r} define no variant {variant!r}; "
            f"allowed: {', '.join(f'{run_name}:{v}' for v in sorted(defined))}")


def lookup(found: Found, metric: str) -> tuple[float, Metric | None]:
    """The number a metric address names in one variant, and its Metric record (an engine stat's as
    engine/<field>)."""
    key, tokens = split_at(metric)
    fld = engine_field(key)
    if fld is not None:
        value = getattr(found.result.engine, fld)
        if value is None:
            raise NotMeasurable(f"{found.label}: the engine did not report {fld}")
        return float(value), found.result.measured()[f"engine/{fld}"]
    names = [f"{key}/ctx{tokens}", f"{key}/len{tokens}"] if tokens else [key]  # what a miss names
    whole = not tokens or _only_length(found.run.config, key) == tokens
    if tokens and whole:
        names.append(key)
    m = next((m for m in found.result.metrics if tokens and m.base == key and m.length == tokens and m.depth is None),
             found.result.metric(key) if whole else None)
    if m is not None:
        if math.isnan(m.value):
            raise NotMeasurable(f"{found.label}: {m.name} is NaN (no items scored)")
        return m.value, m
    have = [m.name for m in found.result.metrics]
    near = difflib.get_close_matches(names[0], have, n=3, cutoff=0.6)
    hint = f" (nearest: {', '.join(near)})" if near else ""
    raise NotMeasurable(f"{found.label} has no metric {' or '.join(names)}{hint}")


def _only_length(config: dict, key: str) -> int | None:
    """The single prompt length of a run's latency pass, whose metrics then have no /ctx suffix."""
    if not key.startswith("latency/"):
        return None
    lengths = (config.get("latency") or {}).get("prompt_tokens") or []
    return lengths[0] if len(lengths) == 1 else None


def dump(runs: list[Run]) -> list[dict]:
    return [{"run": r.run_id, "path": str(r.rd.root), "variants": {k: v.status for k, v in r.results.items()}}
            for r in runs]
