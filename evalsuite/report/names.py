"""Metric names and values as reports show them: units, headline rows, formatting, each task's primary metric,
a variant's status, and the mark on latency timed on a loaded host."""

from __future__ import annotations

import math

from rich.text import Text

from evalsuite.core.types import ITL_P50, TTFT_P50, HostLoad, Metric, RunWall, VariantResult
from evalsuite.verdict.compare import is_latency

ENGINE_HEADLINE = ["engine/weights_gib", "engine/required_gib", "engine/kv_cache_tokens", "engine/max_concurrency"]
LATENCY_HEADLINE = [TTFT_P50, ITL_P50]
# the engine stats a table of variants (the summary, the MLflow runs view) shows beside their scores:
# EngineStats field, label, format
ENGINE_COLUMNS = [("weights_gib", "weights GiB", "{:.3f}"), ("kv_cache_tokens", "KV tokens", "{:,}")]
WHOLE_UNITS = ("tokens", "blocks")  # counted, shown without decimals
LOADED = "†"  # beside a latency figure timed on a loaded host
REDEFINED = "◊"  # beside a score of a task whose definition's version is not the baseline's (redefined_note)
APART = "≠"  # beside a latency figure not timed as the baseline's was (core.types.timing_unlike)

# A variant's status as tables show it (rich markup): `pending` is a variant an interrupted run never reached.
STATUS_CELLS = {"ok": "[green]ok", "partial": "[yellow]partial", "failed": "[red]failed", "skipped": "[yellow]skipped",
                "pending": "[dim]not started"}


def status_word(status: str) -> str:
    """The status as tables say it, without its colour (markdown, CSV)."""
    return Text.from_markup(STATUS_CELLS.get(status, status)).plain


def meanings(results: list[VariantResult]) -> dict[str, Metric]:
    """Metric name -> the metric as first recorded among `results`: what each table row is."""
    out: dict[str, Metric] = {}
    for r in results:
        for name, m in r.measured().items():
            out.setdefault(name, m)
    return out


def in_points(meaning: dict[str, Metric], name: str) -> bool:
    """A score or fraction (changes in points), as opposed to a quantity with a unit (in percent)."""
    m = meaning.get(name)
    return m is None or m.in_points


def fmt_value(unit: str, value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if unit in WHOLE_UNITS:
        return f"{value:,.0f}"
    if unit == "%":
        return f"{value:.0f}%"
    return f"{value:.3f}" if unit in ("", "GiB") else f"{value:.4g}"


def fmt_delta(unit: str, delta) -> str:
    if delta is None or (isinstance(delta, float) and math.isnan(delta)):
        return ""
    return f"{delta:+.1f} pt" if unit == "" else f"{delta:+.1f}%"


def prop(v: float) -> str:
    """0.408 -> .408: three digits of a proportion, narrow enough for an 80-column table."""
    text = f"{v:.3f}"
    return "1.00" if text.startswith("1") else text.lstrip("0")  # .9996 rounds to 1.000: one form of 1


def primary_metrics(results: list[VariantResult]) -> list[str]:
    """Per task, the metric that answers 'how accurate', in task order.

    Each result names them (`primary_metrics`, saved by the runner from the tasks' own choice); a
    record written before that field existed falls back to the first score each task logged.
    """
    names: list[str] = []
    meaning = meanings(results)
    for v in results:
        saved = v.primary_metrics or _first_scores(v)
        names += [n for n in saved if n not in names and in_points(meaning, n)]
    return names


def _first_scores(v: VariantResult) -> list[str]:
    seen: dict[str, str] = {}
    for m in v.metrics:
        if m.headline_score:
            seen.setdefault(m.task, m.name)
    return list(seen.values())


def loaded_mark(metric: str, load: HostLoad | None) -> str:
    """The mark a figure of the latency pass carries where the host was loaded during the pass."""
    return LOADED if is_latency(metric) and load is not None and load.loaded else ""


def loaded_note(loads: dict[str, HostLoad | None]) -> str | None:
    """What the mark beside latency figures says, per variant (or row) timed on a loaded host; None
    where none was."""
    parts = [f"{name} ({_load(load)})" for name, load in loads.items() if load is not None and load.loaded]
    if not parts:
        return None
    return (f"{LOADED} latency timed on a loaded host (more runnable threads besides a CPU engine's own than the "
            f"CPUs left free, by the 1-minute load: requests also waited for a CPU, so these figures do not "
            f"compare with a quiet host's): {'; '.join(parts)}")


def timed_note(results: list[VariantResult]) -> str | None:
    """How each variant's latency pass was timed (core.types.TimingCondition), where a record says;
    a pass whose figures measure no engine by itself says why: the gate does not compare it."""
    timed = {v.variant: t for v in results if (t := v.timed_as()) is not None and not t.derived}
    if not timed:
        return None
    doubts = [f"{n} ({why})" for n, t in timed.items() if (why := t.doubt())]
    return ("Latency timed: " + "; ".join(f"{n} {t.describe()}" for n, t in timed.items())
            + (f". Not compared: {'; '.join(doubts)}" if doubts else ""))


def apart_note(apart: dict[str, str]) -> str | None:
    """What the mark beside latency figures not timed as the baseline's says, per variant and why."""
    if not apart:
        return None
    return (f"{APART} latency not timed as the baseline's was, so not compared (the gate does not judge it, "
            f"report does not rank it): {'; '.join(f'{n} ({why})' for n, why in apart.items())}")


def redefined_note(redefined: dict[str, dict[str, str]]) -> str | None:
    """What the mark beside scores of a task defined otherwise than in the baseline's run says, per
    variant (label -> task -> how, core.types.definitions_unlike); None where every definition agrees."""
    parts = [f"{label} ({'; '.join(how.values())})" for label, how in redefined.items() if how]
    if not parts:
        return None
    return (f"{REDEFINED} task definition of another version than the baseline's, so its scores measure another "
            f"task (its change is not the variant's alone): {'; '.join(parts)}")


def cost_note(wall: RunWall | None) -> str | None:
    """What the run's variants cost: their wall (items built to the last variant's end) and the share of
    it with no kernel on the GPU; None for a record from before the run sampled it."""
    if wall is None:
        return None
    cards = f", {len(wall.devices)} card{'s' if len(wall.devices) != 1 else ''}" if wall.devices else ""
    idle = (f"GPU idle {wall.idle_text()} of it (NVML utilization{cards})" if wall.gpu_idle_frac is not None
            else f"GPU idle {wall.idle_text()}")
    return f"Wall {wall.wall_s:,.1f} s from items to the last variant's end; {idle}"


def stopped_note(stopped: dict[str, list[str]]) -> str | None:
    """Which variants' tasks `run --stop decided` ended early (variant -> tasks), whose scores' intervals
    are their confidence sequences'; None where none was."""
    parts = [f"{name} ({', '.join(tasks)})" for name, tasks in stopped.items() if tasks]
    if not parts:
        return None
    return (f"Tasks ended early by run --stop decided: {'; '.join(parts)}; their scores' intervals are "
            "confidence sequences over the seeded order, wider than a fixed-n interval")


def _load(load: HostLoad) -> str:
    end = f"{load.end[0]:.1f}" if load.end else "-"
    own = f", {load.engine_threads} of them the engine's threads" if load.engine_threads else ""
    return f"1-min load {load.start[0]:.1f} at start, {end} at end, {load.cpus} CPUs{own}"
