"""The terminal summary: one row per variant with accuracy (and its 95% interval, marked where the
baseline is at chance or at ceiling), memory, latency (marked where timed on a loaded host) and its
gate verdict against the baseline under the shipped rules, then what drop a paired comparison of
runs this size can resolve; the same rules and decision as `evalsuite gate`."""

from __future__ import annotations

import math
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from evalsuite.core.errors import ConfigError
from evalsuite.core.records import RunDir
from evalsuite.core.types import ITL_P50, TTFT_P50, USABLE_STATUSES, Metric, RunRecord, VariantResult
from evalsuite.report.gate import Side, run_gate
from evalsuite.report.rules import Rules, chance_margins, decision_rule, default_rules_path, load_rules
from evalsuite.report.placement import placement_table
from evalsuite.report.names import ENGINE_COLUMNS, STATUS_CELLS, loaded_mark, loaded_note, primary_metrics
from evalsuite.stats.informative import task_marks
from evalsuite.stats.metrics import accuracy_interval

LATENCY_COLUMNS = [(TTFT_P50, "TTFT p50 ms", "{:.1f}"), (ITL_P50, "ITL p50 ms", "{:.2f}")]


def latency_columns(record: RunRecord) -> list[tuple[str, int | None, str, str]]:
    """(metric, prompt length, label, format): TTFT/ITL at the longest prompt measured, since a median
    over mixed lengths means nothing; the pooled figure where the run measured one length."""
    lengths = {m.length for v in record.variants for m in v.metrics
               if m.base == LATENCY_COLUMNS[0][0] and m.length is not None}
    if not lengths:
        return [(key, None, label, fmt) for key, label, fmt in LATENCY_COLUMNS]
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


def _row(v: VariantResult, accuracy: list[str], latency: list[tuple[str, int | None, str, str]],
         marks: dict[str, str]) -> list[str]:
    cells = [v.variant, STATUS_CELLS.get(v.status, v.status)]
    if v.settings.get("simulated"):
        cells[1] += " [cyan](simulated)"
    for name in accuracy:
        m = v.metric(name)
        ci = accuracy_interval(m) if m is not None else None
        cells.append("-" if m is None else f"{m.value:.3f}" + (f" ({ci[0]:.3f}–{ci[1]:.3f})" if ci else "")
                     + (escape(f" [{marks[name]}]") if name in marks else ""))
    cells += [_fmt(getattr(v.engine, key), fmt) for key, _, fmt in ENGINE_COLUMNS]
    for base, length, _, fmt in latency:
        m = _at_length(v, base, length)
        cells.append(_fmt(m.value if m else None, fmt) + (loaded_mark(base, v.host_load) if m else ""))
    return cells


def table(record: RunRecord, verdicts: dict[str, str] | None = None, marks: dict[str, str] | None = None) -> Table:
    acc = primary_metrics(record.variants)
    latency = latency_columns(record)
    t = Table(title=f"run {record.run_id} · {record.model}", caption=escape("accuracy: value (95% interval; Wilson for a "
              "proportion, normal over fixed strata for a macro or balanced one) [at chance / at ceiling: the baseline's task cannot show a loss / shows only a collapse]"),
              caption_justify="left")
    gate_col = ["gate"] if verdicts else []
    for col in ["variant", "status", *acc, *[c[1] for c in ENGINE_COLUMNS], *[c[2] for c in latency], *gate_col]:
        t.add_column(col, overflow="fold")
    for v in record.variants:
        t.add_row(*_row(v, acc, latency, marks or {}), *([verdicts.get(v.variant, "baseline")] if verdicts else []))
    return t


def gate_verdicts(rd: RunDir, record: RunRecord, rules: Rules) -> tuple[dict[str, str], dict[str, str]]:
    """Each variant's verdict against the run's baseline under `rules`, and the baseline's task marks;
    nothing where the run has no second usable variant or no metric a rule names."""
    base = _baseline(rd, record)
    usable = [v for v in record.variants if v.status in USABLE_STATUSES]
    if base is None or len(usable) < 2 or record.variant(base) not in usable:
        return {}, {}
    try:
        report = run_gate(Side(rd, base), [Side(rd)], rules, str(default_rules_path()))
    except ConfigError:
        return {}, {}
    marks = task_marks(record.variant(base), rd, rules.ceiling, chance_margins(rules, [m.name for m in record.variant(base).metrics]))
    return {v: f"{word} vs {base}" for v, word in report.verdicts().items()}, marks


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
    """The rules a run's early stops followed (run --stop decided with scheduler.stop_rules), so that its
    gate column judges by the checks that stopped it; else the shipped ones."""
    named = next((Path(s.rules) for v in record.variants for s in v.stopped.values() if s.rules), None)
    return named if named is not None and named.is_file() else default_rules_path()


def print_summary(record: RunRecord, console: Console | None = None, run_dir: RunDir | None = None) -> None:
    console = console or Console(width=None if Console().is_terminal else 160)
    rules = load_rules(_rules_path(record))
    verdicts, marks = gate_verdicts(run_dir, record, rules) if run_dir is not None else ({}, {})
    console.print(table(record, verdicts, marks))
    for note in (loaded_note({v.variant: v.host_load for v in record.variants}), resolution_note(record, rules, run_dir)):
        if note:
            console.print(note, markup=False, highlight=False)
    if (packing := placement_table(record)) is not None:
        console.print(packing)
    for v in record.variants:
        if v.reason:
            console.print(f"  {v.variant} {v.status}: {v.reason}", markup=False, highlight=False)
        elif v.settings.get("simulated"):
            console.print(f"  {v.variant} simulated: INT4 weights rounded as {v.settings.get('quantize')} W4A16 and run "
                          "dense; accuracy measured, memory predicted for INT4 kernels, no latency",
                          markup=False, highlight=False)
        for task, stop in v.stopped.items():
            decided = ", ".join(f"{m} {d}" for m, d in stop.decided.items())
            console.print(f"  {v.variant} · {task}: stopped at {stop.items:,} of {stop.of:,} items, every check decided "
                          f"({decided}; --stop decided)", markup=False, highlight=False)
