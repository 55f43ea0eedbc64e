"""Claims -> verdicts: measure each check from run folders, the planner or vLLM's defaults, then judge it.

Verdicts: `held` (the measured value, or its whole interval, is what the claim says), `not held`
(it is not: with an interval, the whole interval is outside), `not measurable` (with why: the
claim names no number, a setting the engine does not have, a run or metric that is missing,
too few items, two variants' latency timed in two conditions ("not comparable"), or an interval
that straddles the claimed bound). A claim is not held when any of its checks is, else not
measurable when any is, else held; informational checks do not count.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from evalsuite.check import stats
from evalsuite.stats import timing
from evalsuite.check.runs import Found, NotMeasurable, Run, find_variant, lookup, undefined_variant
from evalsuite.check.schema import Check, Claim, ClaimsFile, Side, split_at
from evalsuite.core.configfile import format_validation_error
from evalsuite.core.errors import ConfigError
from evalsuite.core.types import REQUEST_TIMINGS, TTFT_P50, UNIT_SUFFIXES, MetricKind, task_of, timing_unlike
from evalsuite.core.units import GIB

Verdict = Literal["held", "not held", "not measurable"]


@dataclass
class Measured:
    """One side's number and where it came from."""

    value: float
    label: str
    metric: str
    record: stats.Metric | None = None
    found: Found | None = None


@dataclass
class CheckResult:
    what: str
    verdict: Verdict
    claimed: str
    source: str
    measured: float | None = None
    unit: str = ""
    interval: timing.Interval | None = None
    sides: list[Measured] = field(default_factory=list)
    detail: str = ""
    informational: bool = False
    note: str | None = None


@dataclass
class ClaimResult:
    claim: Claim
    verdict: Verdict
    checks: list[CheckResult]


@dataclass
class Context:
    spec: ClaimsFile
    base_dir: Path  # the claims file's folder: planner models resolve against it
    runs: list[Run]
    where: str = ""  # claims.<i>.checks.<j>, for error messages


def unit_of(kind: str, side: Measured) -> str:
    """The unit a measured quantity is shown in: the kind's, else the metric's own."""
    if kind in ("ratio", "change_pct", "points"):
        return {"ratio": "x", "change_pct": "%", "points": "pt"}[kind]
    if side.record is not None:
        return side.record.unit
    # a planner field or an engine argument is no metric: its name is all that says its unit, and that
    # may sit inside it (`kv_gib_per_request`)
    name = split_at(side.metric)[0].rsplit("/", 1)[-1]
    return next((unit for part, unit, _ in UNIT_SUFFIXES if f"{part}_" in f"{name}_"), "")


def is_score(side: Measured) -> bool:
    """A mean of per-item scores recorded by a run, which an interval over its items can be drawn for."""
    return side.record is not None and side.record.item_score


# ---------------------------------------------------------------- measuring one side


def measure_run(ctx: Context, check: Check, side: Side) -> Measured:
    metric = side.metric or check.metric
    first: NotMeasurable | None = None
    for found in find_variant(ctx.runs, side.variant):
        try:
            value, record = lookup(found, metric)
        except NotMeasurable as e:
            first = first or e
            continue
        return Measured(value, found.label, metric, record, found)
    raise first


def measure_planner(ctx: Context, check: Check, side: Side) -> Measured:
    from evalsuite.memory.planner import plan, read_config

    metric = side.metric or check.metric
    settings = check.settings.model_dump(exclude_unset=True)  # what the claim says; the rest is the planner's
    if side.settings is not None:
        settings.update(side.settings.model_dump(exclude_unset=True))
    try:
        config = read_config(ctx.base_dir / check.model)
    except ConfigError as e:
        raise ConfigError(f"{ctx.where}.model: {e}") from None
    try:
        p = plan(config, **settings)
    except ConfigError as e:  # a setting the planner does not model is an answer, not bad input
        raise NotMeasurable(f"planner: {e}") from None
    derived = {"kv_bytes_per_request": p.kv_bytes_per_token * p.max_model_len,
               "kv_gib_per_request": p.kv_bytes_per_token * p.max_model_len / GIB,
               "kv_gib_all_seqs": p.kv_bytes_per_token * p.max_model_len * p.max_num_seqs / GIB}
    value = derived[metric] if metric in derived else getattr(p, metric)
    shown = ", ".join(f"{k}={v}" for k, v in settings.items())
    return Measured(float(value), f"planner: {check.model}" + (f" ({shown})" if shown else ""), metric)


def measure_vllm_default(ctx: Context, check: Check) -> Measured:
    """An engine argument's default, read from the vLLM installed where `check` runs."""
    # check reads a default here and starts no engine: vLLM's warnings at import (a CPU build finding
    # Triton without its CPU backend, logged before vLLM's logger has a handler) would print as lines
    # of check's own output.
    logging.disable(logging.WARNING)
    try:
        import vllm
        from vllm.engine.arg_utils import EngineArgs
    except Exception as e:  # noqa: BLE001 - any import failure means this machine cannot answer
        raise NotMeasurable(f"vLLM is not importable here ({type(e).__name__}); run check where vLLM is installed") from None
    finally:
        logging.disable(logging.NOTSET)
    # the installed vLLM's own fields are the allowed values: a name it lacks is a misspelling (or an
    # argument of another release), which the claims file must say, not an unanswerable claim
    fields = {f.name: f for f in dataclasses.fields(EngineArgs)}
    numeric = sorted(n for n, f in fields.items()
                     if isinstance(f.default, (int, float)) and not isinstance(f.default, bool))
    f = fields.get(check.metric)
    if check.metric not in numeric:
        what = "no engine argument" if f is None else f"no numeric default for the engine argument (it is {f.default!r})"
        near = difflib.get_close_matches(check.metric, numeric, n=5, cutoff=0.5) or numeric[:8]
        raise ConfigError(f"{ctx.where}.metric: vLLM {vllm.__version__} has {what} {check.metric!r}; "
                          f"allowed: its numeric engine arguments, e.g. {', '.join(near)}")
    return Measured(float(f.default), f"vLLM {vllm.__version__} EngineArgs default", check.metric)


def measure(ctx: Context, check: Check, side: Side) -> Measured:
    if check.source == "planner":
        return measure_planner(ctx, check, side)
    if check.source == "vllm_default":
        return measure_vllm_default(ctx, check)
    return measure_run(ctx, check, side)


def measure_pair(ctx: Context, check: Check, sides: list[Side]) -> list[Measured] | None:
    """Both sides from the newest run that holds both, so that a comparison of timings (or anything a
    machine, a day or a vLLM build moves) is made within one run; None when no run holds both."""
    base_found, cand_found = (find_variant(ctx.runs, s.variant) for s in sides)  # each latest run first
    metrics = [s.metric or check.metric for s in sides]
    for b in base_found:
        c = next((f for f in cand_found if f.run is b.run), None)
        if c is None:
            continue
        try:
            looked = [lookup(f, m) for f, m in zip((b, c), metrics)]
        except NotMeasurable:
            continue
        return [Measured(v, f.label, m, rec, f) for (v, rec), f, m in zip(looked, (b, c), metrics)]
    return None


def check_references(ctx: Context, check: Check) -> None:
    """A `run:variant` that names no variant of the runs given is bad input (exit 2), named by its key."""
    if check.source != "run":
        return
    for key, side in (("variant", check.variant), ("baseline.variant", check.baseline),
                      ("candidate.variant", check.candidate)):
        why = undefined_variant(ctx.runs, side.variant) if side and side.variant else None
        if why:
            raise ConfigError(f"{ctx.where}.{key}: {why}")


def measure_sides(ctx: Context, check: Check) -> list[Measured]:
    check_references(ctx, check)
    sides = check.sides()
    if check.source == "run" and len(sides) == 2 and all(s.variant for s in sides):
        pair = measure_pair(ctx, check, sides)
        if pair is not None:
            return pair
    return [measure(ctx, check, side) for side in sides]


# ---------------------------------------------------------------- judging


def quantity(kind: str, sides: list[Measured]) -> float:
    if kind == "value":
        return sides[0].value
    b, c = sides[0].value, sides[1].value
    if kind in ("ratio", "change_pct") and b == 0:
        raise NotMeasurable(f"{sides[0].label}: {sides[0].metric} is 0, so a {kind} is undefined")
    return {"ratio": c / b if b else math.nan, "change_pct": (c - b) / abs(b) * 100 if b else math.nan,
            "difference": c - b, "points": (c - b) * 100}[kind]


def central(side: Measured) -> tuple[str, int | None] | None:
    """`latency/ttft_ms_p50@130000` -> (`latency/ttft_ms`, 130000): a timing's median or mean, split
    from its statistic; None for other metrics (a p90 has no interval from a mean)."""
    key, tokens = split_at(side.metric)
    record = side.record
    if record is None or record.kind != MetricKind.timing or not (record.percentile == 50 or key.endswith("_mean")):
        return None
    return key.removesuffix("_p50").removesuffix("_mean"), tokens


def mean_of(side: Measured) -> str | None:
    """The per-request mean beside a median timing (`latency/ttft_ms_p50@130000` -> `..._mean@130000`)."""
    c = central(side)
    if c is None:
        return None
    key, tokens = c[0] + "_mean", c[1]
    return f"{key}@{tokens}" if tokens is not None else key


def paired_timings(check: Check, sides: list[Measured], confidence: float) -> timing.Interval | None:
    """Two variants' timing over the same requests: the paired interval from their samples."""
    (key, tokens), other = central(sides[0]), central(sides[1])
    task, _, timed = key.partition("/")
    if timed not in REQUEST_TIMINGS or other != (key, tokens):
        return None
    group = str(tokens) if tokens is not None else None
    per = [stats.request_timings(s.found.run.rd.root, s.found.result.variant, task, timed, group) for s in sides]
    return timing.paired_timing_interval(check.effect.kind, per[0], per[1], confidence)


def timing_interval(check: Check, sides: list[Measured], confidence: float) -> timing.Interval | None:
    """Two variants' timings: paired over their requests, else Welch's interval on the recorded means."""
    means = [mean_of(s) for s in sides]
    if None in means or any(s.found is None for s in sides):
        return None
    paired = paired_timings(check, sides, confidence)
    if paired is not None:
        return paired
    try:
        records = [lookup(s.found, m)[1] for s, m in zip(sides, means)]
    except NotMeasurable:
        return None
    return timing.welch_interval(check.effect.kind, records[0], records[1], confidence)


def interval_for(ctx: Context, check: Check, sides: list[Measured]) -> timing.Interval | None:
    """Accuracy intervals and two variants' timing intervals, in the kind's unit; None for the rest."""
    kind, conf = check.effect.kind, ctx.spec.confidence
    if check.source != "run":
        return None
    if not all(is_score(s) for s in sides):
        return timing_interval(check, sides, conf) if kind in ("ratio", "change_pct", "difference") else None
    if kind not in ("value", "difference", "points"):
        return None
    if kind == "value":
        s = sides[0]
        items = stats.items_for(s.found.run.rd.root, s.found.result.variant, s.record)
        return (stats.stopped_single(s.found, s.record, conf) or stats.single_interval(items, s.record, s.value, conf)
                or timing.normal_interval(s.value, [s.record], conf))
    b, c = sides
    scale = 100.0 if kind == "points" else 1.0
    iv = None
    if b.metric == c.metric:  # a task run under --stop decided: the gate's confidence sequence
        iv = stats.stopped_difference(b.found, c.found, b.record, conf) or stats.paired_interval(
            stats.items_for(b.found.run.rd.root, b.found.result.variant, b.record),
            stats.items_for(c.found.run.rd.root, c.found.result.variant, c.record), b.record, (b.value, c.value), conf)
    iv = iv or timing.normal_interval(c.value - b.value, [b.record, c.record], conf)
    if iv is not None:
        iv.low, iv.high = iv.low * scale, iv.high * scale
    return iv


def timed_apart(sides: list[Measured]) -> str | None:
    """Two variants' latency figures timed in two conditions (core.types.timing_unlike, the gate's rule:
    a side beside running engines or not found idle, another warm-up, device, engine mode or cores)
    measure the conditions as much as the settings: not comparable, whatever the numbers say."""
    if len(sides) != 2 or any(s.found is None for s in sides) or \
            not any(task_of(s.metric) == task_of(TTFT_P50) for s in sides):
        return None
    why = timing_unlike(*(s.found.result.timed_as() for s in sides))
    return None if why is None else f"not comparable: {why}"


def too_few(ctx: Context, sides: list[Measured]) -> str | None:
    for s in sides:
        if is_score(s) and s.record.n is not None and s.record.n < ctx.spec.min_n:
            return f"insufficient n: {s.label} {s.metric} has n={s.record.n} < min_n {ctx.spec.min_n}"
    return None


def decide(ctx: Context, check: Check, q: float, iv: timing.Interval | None) -> tuple[Verdict, str]:
    eff = check.effect
    if iv is not None and ctx.spec.decide_on == "interval":
        conf = f"{ctx.spec.confidence:.0%}"
        if eff.holds(iv.low) and eff.holds(iv.high):
            return "held", f"the whole {conf} interval is within the claim"
        if eff.excludes(iv.low, iv.high):
            return "not held", f"the whole {conf} interval is outside the claim"
        return "not measurable", (f"insufficient n: the {conf} interval {iv.low:+.3g}..{iv.high:+.3g} straddles "
                                  f"the claimed bound")
    return ("held", "") if eff.holds(q) else ("not held", "")


def _unsupported(requires: dict) -> str | None:
    """Why the engine cannot be set as the claim needs, from the values evalsuite's Variant (vLLM's) accepts."""
    from evalsuite.run.config import Variant

    for key, value in requires.items():
        try:
            Variant.model_validate({key: value})
        except ValidationError as e:
            return f"not a setting vLLM has: {format_validation_error(e, Variant)}"
    return None


def _preconditions(ctx: Context, check: Check) -> str | None:
    for k, pre in enumerate(check.given):
        # a bad reference in a precondition is named where it is
        r = evaluate_check(dataclasses.replace(ctx, where=f"{ctx.where}.given.{k}"), pre)
        if r.verdict == "not measurable":
            return f"precondition not measurable ({pre.what}: {r.detail})"
        if r.verdict == "not held":
            return f"precondition not met ({pre.what}: {number(r.measured, r.unit)}, needs {r.claimed})"
    return None


def number(v: float | None, unit: str = "") -> str:
    """A measured number as the report shows it: thousands separated, units after."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if unit == "x":
        return f"{v:.3g}x"
    if unit in ("%", "pt"):
        return f"{v:+.2f}{'%' if unit == '%' else ' pt'}"
    text = f"{v:,.0f}" if abs(v) >= 1000 or float(v).is_integer() else f"{v:.4g}"
    return f"{text} {unit}".strip()


def evaluate_check(ctx: Context, check: Check) -> CheckResult:
    out = CheckResult(check.what, "not measurable", check.effect.describe(), check.source,
                      informational=check.informational, note=check.note)
    if not check.measurable:
        out.detail = check.why
        return out
    why = _unsupported(check.requires) or _preconditions(ctx, check)
    if why:
        out.detail = why
        return out
    try:
        out.sides = measure_sides(ctx, check)
        out.unit = unit_of(check.effect.kind, out.sides[0])
        out.measured = quantity(check.effect.kind, out.sides)
        few = too_few(ctx, out.sides) or timed_apart(out.sides)
        if few:
            raise NotMeasurable(few)
        out.interval = interval_for(ctx, check, out.sides)
    except NotMeasurable as e:
        out.detail = str(e)
        return out
    out.verdict, out.detail = decide(ctx, check, out.measured, out.interval)
    return out


def evaluate_claim(ctx: Context, index: int, claim: Claim) -> ClaimResult:
    if not claim.measurable:
        return ClaimResult(claim, "not measurable", [])
    results = []
    for j, check in enumerate(claim.checks):
        ctx.where = f"claims.{index}.checks.{j}"
        results.append(evaluate_check(ctx, check))
    counted = [r.verdict for r in results if not r.informational] or [r.verdict for r in results]
    verdict: Verdict = ("not held" if "not held" in counted else
                        "not measurable" if "not measurable" in counted else "held")
    return ClaimResult(claim, verdict, results)


def evaluate(spec: ClaimsFile, base_dir: Path, runs: list[Run], path: str = "") -> list[ClaimResult]:
    ctx = Context(spec, base_dir, runs)
    try:
        return [evaluate_claim(ctx, i, c) for i, c in enumerate(spec.claims)]
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}" if path else str(e)) from None
