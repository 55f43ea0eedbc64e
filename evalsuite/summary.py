"""The terminal summary: one row per variant with accuracy, memory and latency."""

from __future__ import annotations

import math

from rich.console import Console
from rich.table import Table

from evalsuite.types import RunRecord, VariantResult

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


def primary_metrics(record: RunRecord) -> list[str]:
    """Per task, the metric that answers 'how accurate': the first non-timing metric it logged."""
    names: list[str] = []
    for v in record.variants:
        for m in v.metrics:
            task = m.name.split("/")[0]
            if task in ("latency", "roofline", "engine") or m.name.endswith("_s") or any(n.split("/")[0] == task for n in names):
                continue
            names.append(m.name)
    return names


def _fmt(value, fmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return fmt.format(value)


def _row(v: VariantResult, accuracy: list[str], latency: list[tuple[str, str, str]]) -> list[str]:
    cells = [v.variant, {"ok": "[green]ok", "failed": "[red]failed", "skipped": "[yellow]skipped"}.get(v.status, v.status)]
    if v.settings.get("simulated"):
        cells[1] += " [cyan](simulated)"
    for name in accuracy:
        m = v.metric(name)
        cells.append("-" if m is None else f"{m.value:.3f}" + (f" ±{m.stderr:.3f}" if m.stderr else ""))
    cells += [_fmt(getattr(v.engine, key), fmt) for key, _, fmt in ENGINE_COLUMNS]
    for name, _, fmt in latency:
        m = v.metric(name)
        cells.append(_fmt(m.value if m else None, fmt))
    return cells


def table(record: RunRecord) -> Table:
    acc = primary_metrics(record)
    latency = latency_columns(record)
    t = Table(title=f"run {record.run_id} · {record.model}")
    for col in ["variant", "status", *acc, *[c[1] for c in ENGINE_COLUMNS], *[c[1] for c in latency]]:
        t.add_column(col, overflow="fold")
    for v in record.variants:
        t.add_row(*_row(v, acc, latency))
    return t


def print_summary(record: RunRecord, console: Console | None = None) -> None:
    console = console or Console(width=None if Console().is_terminal else 160)
    console.print(table(record))
    for v in record.variants:
        if v.reason:
            console.print(f"  {v.variant} {v.status}: {v.reason}", markup=False, highlight=False)
        elif v.settings.get("simulated"):
            console.print(f"  {v.variant} simulated: INT4 weights rounded as {v.settings.get('quantize')} W4A16 and run "
                          "dense; accuracy measured, memory predicted for INT4 kernels, no latency",
                          markup=False, highlight=False)
