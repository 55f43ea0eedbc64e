"""The terminal summary: one row per variant with accuracy (and its 95% interval), memory and
latency, then what drop a paired comparison of runs this size can resolve."""

from __future__ import annotations

import math

from rich.console import Console
from rich.table import Table

from evalsuite.core.types import RunRecord, VariantResult
from evalsuite.report.names import primary_metrics
from evalsuite.stats.metrics import accuracy_interval

# what the resolution note assumes: the gate's defaults (configs/gates/default.yaml)
PLAN_CONFIDENCE, PLAN_POWER, PLAN_DISCORDANCE = 0.95, 0.8, 0.05

ENGINE_COLUMNS = [("weights_gib", "weights GiB", "{:.3f}"), ("kv_cache_tokens", "KV tokens", "{:,}")]
LATENCY_COLUMNS = [("latency/ttft_ms_p50", "TTFT p50 ms", "{:.1f}"), ("latency/itl_ms_p50", "ITL p50 ms", "{:.2f}")]


def latency_columns(record: RunRecord) -> list[tuple[str, str, str]]:
    """TTFT/ITL at the longest prompt measured: a median over mixed lengths means nothing."""
    lengths = {int(m.name.rsplit("ctx", 1)[1]) for v in record.variants for m in v.metrics
               if m.name.startswith("latency/ttft_ms_p50/ctx")}
    if not lengths:
        return LATENCY_COLUMNS
    n = max(lengths)
    return [(f"{key}/ctx{n}", f"{label} @{n:,}", fmt) for key, label, fmt in LATENCY_COLUMNS]


def _fmt(value, fmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return fmt.format(value)


def _row(v: VariantResult, accuracy: list[str], latency: list[tuple[str, str, str]]) -> list[str]:
    cells = [v.variant, {"ok": "[green]ok", "partial": "[yellow]partial", "failed": "[red]failed", "skipped": "[yellow]skipped"}.get(v.status, v.status)]
    if v.settings.get("simulated"):
        cells[1] += " [cyan](simulated)"
    for name in accuracy:
        m = v.metric(name)
        ci = accuracy_interval(m) if m is not None else None
        cells.append("-" if m is None else f"{m.value:.3f}" + (f" ({ci[0]:.3f}–{ci[1]:.3f})" if ci else ""))
    cells += [_fmt(getattr(v.engine, key), fmt) for key, _, fmt in ENGINE_COLUMNS]
    for name, _, fmt in latency:
        m = v.metric(name)
        cells.append(_fmt(m.value if m else None, fmt))
    return cells


def table(record: RunRecord) -> Table:
    acc = primary_metrics(record.variants)
    latency = latency_columns(record)
    t = Table(title=f"run {record.run_id} · {record.model}", caption="accuracy: value (95% interval; Wilson for a "
              "proportion)", caption_justify="left")
    for col in ["variant", "status", *acc, *[c[1] for c in ENGINE_COLUMNS], *[c[1] for c in latency]]:
        t.add_column(col, overflow="fold")
    for v in record.variants:
        t.add_row(*_row(v, acc, latency))
    return t


def resolution_note(record: RunRecord) -> str | None:
    """The smallest accuracy drop a paired gate could certify at each task's n (see `gate --plan`)."""
    from evalsuite.stats.significance import planned_se, resolvable_drop

    parts = []
    for name in primary_metrics(record.variants):
        n = max((m.n or 0 for v in record.variants if (m := v.metric(name))), default=0)
        if n:
            drop = resolvable_drop(n, planned_se(n, PLAN_DISCORDANCE), PLAN_CONFIDENCE, PLAN_POWER) * 100
            parts.append(f"{name} {drop:.1f} pt (n={n:,})")
    if not parts:
        return None
    return (f"A paired gate on runs this size certifies accuracy drop limits no finer than: {'; '.join(parts)} "
            f"({PLAN_DISCORDANCE:.0%} of answers changing, {PLAN_POWER:.0%} power, {PLAN_CONFIDENCE:.0%} one-sided); "
            f"a finer limit reports insufficient n. Plan with `evalsuite gate --plan RULES --n N`.")


def print_summary(record: RunRecord, console: Console | None = None) -> None:
    console = console or Console(width=None if Console().is_terminal else 160)
    console.print(table(record))
    note = resolution_note(record)
    if note:
        console.print(note, markup=False, highlight=False)
    for v in record.variants:
        if v.reason:
            console.print(f"  {v.variant} {v.status}: {v.reason}", markup=False, highlight=False)
        elif v.settings.get("simulated"):
            console.print(f"  {v.variant} simulated: INT4 weights rounded as {v.settings.get('quantize')} W4A16 and run "
                          "dense; accuracy measured, memory predicted for INT4 kernels, no latency",
                          markup=False, highlight=False)
