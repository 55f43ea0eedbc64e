"""The terminal summary: one row per variant with accuracy (and its 95% interval, marked where the
baseline is at chance or at ceiling), memory, latency (marked where timed on a loaded host) and its
gate verdict against the baseline under the shipped rules, then what drop a paired comparison of
runs this size can resolve; the same rules and decision as `evalsuite gate`."""

from __future__ import annotations

import math
import os
from pathlib import Path

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from evalsuite.core.errors import ConfigError
from evalsuite.core.rundir import RunDir
from evalsuite.core.types import ITL_P50, TTFT_P50, USABLE_STATUSES, Metric, RunRecord, VariantResult
from evalsuite.report.capacity_view import summary_cell, summary_columns
from evalsuite.verdict.capacity import length_of
from evalsuite.verdict.gate import GateReport, failed_checks_line, run_gate
from evalsuite.verdict.sides import Side
from evalsuite.verdict.rules import Rules, chance_margins, decision_rule, default_rules_path, load_rules, run_rules_path
from evalsuite.report.placement import placement_table
from evalsuite.report.terminal import Block, Blocks, fits
from evalsuite.report.names import (ENGINE_COLUMNS, STATUS_CELLS, cost_note, loaded_mark, loaded_note,
                                    primary_metrics, stopped_note, timed_note)
from evalsuite.verdict.informative import task_marks
from evalsuite.stats.metrics import accuracy_interval

LATENCY_COLUMNS = [(TTFT_P50, "TTFT p50 ms", "{:.1f}"), (ITL_P50, "ITL p50 ms", "{:.2f}")]


def latency_columns(record: RunRecord) -> list[tuple[str, int | None, str, str]]:
    """(metric, prompt length, label, format): TTFT/ITL at the longest prompt measured, since a median
    over mixed lengths means nothing; the pooled figure where the run measured one length."""
    lengths = {m.length for v in record.variants for m in v.metrics
               if m.base == LATENCY_COLUMNS[0][0] and m.length is not None}
    if not lengths:  # pooled figures where some variant has them; no columns of dashes where none has
        timed = any(v.metric(key) is not None for v in record.variants for key, _, _ in LATENCY_COLUMNS)
        return [(key, None, label, fmt) for key, label, fmt in LATENCY_COLUMNS] if timed else []
    n = max(lengths)
    return [(key, n, f"{label} @{n:,}", fmt) for key, label, fmt in LATENCY_COLUMNS]


def _at_length(v: VariantResult, base: str, length: int | None) -> Metric | None:
    if length is None:
        return v.metric(base)
    return next((m for m in v.metrics if m.base == base and m.length == length and m.depth is None), None)


def _fmt(value, fmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return fmt.format(value)


def _accuracy(m: Metric | None, mark: str | None) -> str:
    """value (95% interval) [mark]; `-` where the variant has no such metric."""
    if m is None:
        return "-"
    ci = accuracy_interval(m)
    return f"{m.value:.3f}" + (f" ({ci[0]:.3f}–{ci[1]:.3f})" if ci else "") + (f" [{mark}]" if mark else "")


def _status(v: VariantResult) -> Text:
    return Text.from_markup(STATUS_CELLS.get(v.status, v.status)) + (
        Text(" (simulated)", style="cyan") if v.simulated else Text(""))


def _figures(v: VariantResult, latency: list[tuple[str, int | None, str, str]],
             capacity: list[str]) -> list[tuple[str, str]]:
    """(label, cell) of the engine's memory figures, the latency pass's and the capacity pass's."""
    cells = [(label, _fmt(getattr(v.engine, key), fmt)) for key, label, fmt in ENGINE_COLUMNS]
    for base, length, label, fmt in latency:
        m = _at_length(v, base, length)
        cells.append((label, _fmt(m.value if m else None, fmt) + (loaded_mark(base, v.host_load) if m else "")))
    return cells + [(f"at SLO @{length_of(c):,}", summary_cell(v, c)) for c in capacity]


CAPTION = ("accuracy: value (95% interval; Wilson for a proportion, normal over fixed strata for a macro or balanced "
           "one). [at chance]: the baseline's 95% interval reaches within the gate's limit of what an answer that "
           "ignores the item scores (too few items, or no skill: a 1.000 of 2 items is one), so its task cannot show "
           "a loss; [at ceiling]: its lower bound is 0.95 or more, so it shows only a collapse")


def wide_table(record: RunRecord, verdicts: dict[str, str], marks: dict[str, str], base: str | None) -> Table:
    """One row per variant, every figure a column: where it fits the terminal. The task marks are the
    baseline's, and only its cells carry them."""
    acc, latency = primary_metrics(record.variants), latency_columns(record)
    capacity = summary_columns(record.variants)
    t = Table(title=f"run {record.run_id} · {record.model}", caption=Text(CAPTION), caption_justify="left")
    for head in ["variant", "status", *acc, *[c[1] for c in ENGINE_COLUMNS], *[c[2] for c in latency],
                 *(f"at SLO @{length_of(c):,}" for c in capacity)]:
        t.add_column(head, overflow="fold")
    if verdicts:  # where the gate names the check that decided, the cell wraps at its spaces
        t.add_column("gate", overflow="fold", max_width=36)
    for v in record.variants:
        mine = marks if v.variant == base else {}
        cells = [Text(v.variant), _status(v), *(Text(_accuracy(v.metric(n), mine.get(n))) for n in acc),
                 *(Text(cell) for _, cell in _figures(v, latency, capacity))]
        t.add_row(*cells, *([Text(verdicts.get(v.variant, "baseline"))] if verdicts else []))
    return t


def variant_blocks(record: RunRecord, verdicts: dict[str, str], marks: dict[str, str], base: str | None) -> Blocks:
    """Each variant as a block of its figures: where the table is wider than the terminal."""
    acc, latency = primary_metrics(record.variants), latency_columns(record)
    capacity = summary_columns(record.variants)
    blocks = []
    for v in record.variants:
        title = Text(v.variant, style="bold") + Text("  ") + _status(v)
        if verdicts:
            title += Text(f"  gate: {verdicts.get(v.variant, 'baseline')}")
        mine = marks if v.variant == base else {}
        rows = [[n, _accuracy(v.metric(n), mine.get(n))] for n in acc if v.metric(n) is not None]
        if v.status in USABLE_STATUSES:
            rows += [[label, cell] for label, cell in _figures(v, latency, capacity)]
        blocks.append(Block(title, rows))
    return Blocks(["figure", "value"], blocks, caption=CAPTION)


def table(record: RunRecord, verdicts: dict[str, str] | None = None, marks: dict[str, str] | None = None,
          width: int | None = None, base: str | None = None) -> RenderableType:
    """The run's table at `width`: one row per variant where that fits, else a block per variant."""
    wide = wide_table(record, verdicts or {}, marks or {}, base)
    if width is None or fits(wide, width):
        return wide
    return Group(Text(f"run {record.run_id} · {record.model}", style="bold"),
                 variant_blocks(record, verdicts or {}, marks or {}, base).render(width))


def run_gate_report(rd: RunDir, record: RunRecord, rules: Rules) -> GateReport | None:
    """Every variant against the run's baseline under `rules`; None where the run has no second
    usable variant or no metric a rule names."""
    base = _baseline(rd, record)
    usable = [v for v in record.variants if v.status in USABLE_STATUSES]
    if base is None or len(usable) < 2 or record.variant(base) not in usable:
        return None
    try:
        return run_gate(Side(rd, base), [Side(rd)], rules, str(run_rules_path(rd.read_config())))
    except ConfigError:
        return None


def gate_verdicts(rd: RunDir, record: RunRecord, rules: Rules) -> tuple[dict[str, str], dict[str, str]]:
    """Each variant's verdict against the run's baseline under `rules`, and the baseline's task marks;
    nothing where the run has no gate (run_gate_report)."""
    return _verdict_cells(rd, record, rules, run_gate_report(rd, record, rules))


def _verdict_cells(rd: RunDir, record: RunRecord, rules: Rules,
                   report: GateReport | None) -> tuple[dict[str, str], dict[str, str]]:
    if report is None:
        return {}, {}
    base = _baseline(rd, record)
    marks = task_marks(record.variant(base), rd, rules.ceiling, chance_margins(rules, [m.name for m in record.variant(base).metrics]))
    return {v: _verdict_cell(report, v, word, base) for v, word in report.verdicts().items()}, marks


def _verdict_cell(report, variant: str, word: str, base: str) -> str:
    """`passed vs bf16`; a failed one names the checks it failed; a control is a noise reference."""
    if variant in report.controls:
        return f"control (noise reference for {base})"
    failing = failed_checks_line(report, variant) if word == "failed" else ""
    return f"{word} vs {base}" + (f": {failing}" if failing else "")


def resolution_note(record: RunRecord, rules: Rules, rd: RunDir | None = None) -> str | None:
    """The smallest accuracy drop a paired gate could certify at each task's n (see `gate --plan`),
    weighed as the gate weighs the baseline's items where the run folder has them."""
    from evalsuite.stats.significance import planned_se, resolvable_drop

    base = _baseline(rd, record) if rd is not None else None
    parts = []
    for name in primary_metrics(record.variants):
        n = max((m.n or 0 for v in record.variants if (m := v.metric(name))), default=0)
        if n:
            drop = _weighted_resolution(rd, record, base, name, rules)
            if drop is None:
                drop = resolvable_drop(n, planned_se(n, rules.discordance), rules.confidence, rules.power)
            parts.append(f"{name} {drop * 100:.1f} pt (n={n:,})")
    if not parts:
        return None
    return (f"Accuracy drop limits a paired gate on runs this size certifies with {rules.power:.0%} power: "
            f"{'; '.join(parts)} ({rules.discordance:.0%} of answers changing, {rules.confidence:.0%} one-sided); "
            f"a finer limit mostly fails to be shown, and one that not even equal answers could show reports "
            f"insufficient n. {decision_rule(rules)} Plan with `evalsuite gate --plan --n N`.")


def _baseline(rd: RunDir, record: RunRecord) -> str | None:
    return rd.read_config().get("baseline") or (record.variants[0].variant if record.variants else None)


def _weighted_resolution(rd: RunDir | None, record: RunRecord, base: str | None, name: str,
                         rules: Rules) -> float | None:
    """The baseline's items' resolution under the metric's weights; None without them."""
    from evalsuite.stats.paired import planned_resolution, read_scores

    result = record.variant(base) if rd is not None and base is not None else None
    m = result.metric(name) if result is not None else None
    items = read_scores(rd, base, m) if m is not None and m.strata is not None else {}
    if not items:
        return None
    return planned_resolution(items, m.strata, rules.confidence, rules.power, rules.discordance)


def _rules_path(record: RunRecord) -> Path:
    """The rules a run's early stops followed (run --stop decided: its gate_rules), so that its gate
    column judges by the checks that stopped it; else the shipped ones."""
    named = next((Path(s.rules) for v in record.variants for s in v.stopped.values() if s.rules), None)
    return named if named is not None and named.is_file() else default_rules_path()


def print_summary(record: RunRecord, console: Console | None = None, run_dir: RunDir | None = None) -> GateReport | None:
    """The run's table and notes; returns the run's gate (run_gate_report), for whoever shows it next."""
    # piped output gets 160 columns, unless $COLUMNS names a width
    console = console or Console(width=None if Console().is_terminal or os.environ.get("COLUMNS") else 160)
    rules = load_rules(run_rules_path(run_dir.read_config()) if run_dir is not None else _rules_path(record))
    report = run_gate_report(run_dir, record, rules) if run_dir is not None else None
    verdicts, marks = _verdict_cells(run_dir, record, rules, report)
    base = _baseline(run_dir, record) if run_dir is not None else None
    console.print(table(record, verdicts, marks, console.width, base))
    early = {v.variant: [t for t, stop in v.stopped.items() if stop.early] for v in record.variants}
    for note in (loaded_note({v.variant: v.host_load for v in record.variants}), timed_note(record.variants),
                 stopped_note(early),
                 resolution_note(record, rules, run_dir), cost_note(record.wall)):
        if note:
            console.print(note, markup=False, highlight=False)
    if (packing := placement_table(record)) is not None:
        console.print(packing)
    for v in record.variants:
        if v.reason:
            console.print(f"  {v.variant} {v.status}: {v.reason}", markup=False, highlight=False)
        elif v.simulated:
            console.print(f"  {v.variant} simulated: INT4 weights rounded as {v.build.method} W4A16 and run "
                          "dense; accuracy measured, memory predicted for INT4 kernels, no latency",
                          markup=False, highlight=False)
        for task, stop in v.stopped.items():
            decided = ", ".join(f"{m} {d}" for m, d in stop.decided.items()) or "none decided"
            where = (f"stopped at {stop.items:,} of {stop.of:,} items, every check decided" if stop.early else
                     f"ran all {stop.of:,} items, judged by its confidence sequence")
            console.print(f"  {v.variant} · {task}: {where} ({decided}; --stop decided)", markup=False, highlight=False)
    return report
