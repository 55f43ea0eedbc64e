"""A Comparison's three views (rich tables sized to the terminal, Markdown, CSV) and the report files.

On a terminal the variants are columns where they all fit side by side; where they do not (80
columns hold two or three), each variant is a block of its metrics, every variant once.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from evalsuite.core.types import USABLE_STATUSES
from evalsuite.report.capacity_view import loaded_note as capacity_note
from evalsuite.report.compare import OTHER_POOL, SEQUENCE_NOTE, Comparison
from evalsuite.report.names import STATUS_CELLS, apart_note, loaded_note, redefined_note, status_word, stopped_note
from evalsuite.report.plots import write_plots
from evalsuite.report.terminal import Block, Blocks, fits

LEGEND = ("value (95% interval, Wilson for a proportion, normal over fixed strata for a macro or balanced one, n items); delta vs baseline: points for scores, with the paired "
          "two-sided 95% interval [low, high] over the items both answered (‡: fewer items than the runs hold); % for "
          "quantities")
POOL_NOTE = (f"{OTHER_POOL}: KV capacity measured on another device model than the baseline's, its pool not fixed "
             "alike, so no delta (and left out of the KV capacity plot)")


def legend(c: Comparison) -> str:
    """What a cell holds, and which variants' latency a loaded host slowed."""
    swept = [e.label for e in c.entries if any(c.capacity_loaded(e.label, m) for m in c.columns)]
    early = {e.label: [t for t, stop in e.result.stopped.items() if stop.early] for e in c.entries}
    notes = [n for n in (redefined_note(c.redefined()), loaded_note(c.loads()), apart_note(c.timed_apart()),
                         stopped_note(early),
                         capacity_note(swept),
                         POOL_NOTE if c.elsewhere else "", SEQUENCE_NOTE if c.sequence_outside() else "") if n]
    return ". ".join([LEGEND, *notes])


# ---------------------------------------------------------------- terminal


def _header(c: Comparison, label: str) -> str:
    """run:variant on two lines, so that a long run name does not widen the column."""
    return label.replace(":", ":\n") + (" (baseline)" if label == c.baseline else "")


def _labels(c: Comparison) -> list[str]:
    return [c.baseline, *(e.label for e in c.entries if e.label != c.baseline)]


def _title(c: Comparison, label: str) -> Text:
    """run:variant (baseline) · status: what a table column head says, on one line."""
    status = str(c.frame.at[label, "status"])
    title = Text(label, style="bold") + Text(" (baseline)" if label == c.baseline else "")
    title += Text("  ") + Text.from_markup(STATUS_CELLS.get(status, status))
    reason = next(e.result.reason for e in c.entries if e.label == label)
    if status not in USABLE_STATUSES and reason:
        title += Text(f": {reason}")
    return title


def wide_table(c: Comparison) -> Table:
    """Metrics as rows, every variant a column."""
    labels = _labels(c)
    status = dict(zip(c.frame.index, c.frame["status"], strict=True))
    t = Table(title=Text(f"evalsuite compare: {', '.join(c.runs())}"), show_lines=True,
              caption=Text(legend(c)), caption_justify="left")
    t.add_column("metric", overflow="fold", max_width=28)
    for label in labels:
        t.add_column(Text(_header(c, label)), overflow="fold")
    t.add_row("status", *(Text.from_markup(STATUS_CELLS.get(status[x], status[x])) for x in labels))
    for metric in c.columns:  # Text, not markup: "[+2.7, +9.0]" is data
        t.add_row(Text(metric), *(Text("\n".join(c.cell(x, metric))) for x in labels))
    return t


def variant_blocks(c: Comparison) -> Blocks:
    """Each variant once, one block of metrics each: where the variants do not fit side by side."""
    blocks = []
    for label in _labels(c):
        rows = []
        for metric in c.columns:
            value = c.value_lines(label, metric)
            if value != ["-"]:
                rows.append([metric, " ".join(value), " ".join(c.change_lines(label, metric))])
        blocks.append(Block(_title(c, label), rows))
    return Blocks(["metric", "value (95% interval, n)", "change vs baseline [paired 95%]"], blocks,
                  caption=legend(c))


def terminal_view(c: Comparison, width: int = 80) -> list[RenderableType]:
    """The variants as columns where they fit in `width`, else each variant as a block of rows."""
    wide = wide_table(c)
    if fits(wide, width):
        return [wide]
    return [Text(f"evalsuite compare: {', '.join(c.runs())}", style="bold"), variant_blocks(c).render(width)]


# ---------------------------------------------------------------- files


def to_markdown(c: Comparison) -> str:
    """Metrics as rows, variants as columns, each cell on one line."""
    labels = [c.baseline, *(x for x in c.frame.index if x != c.baseline)]
    head = [f"{x} (baseline)" if x == c.baseline else x for x in labels]
    lines = [f"### evalsuite compare: {', '.join(c.runs())}", "",
             f"Baseline: `{c.baseline}`. Each cell: {legend(c)}. Paired intervals by {'; '.join(c.methods()) or '-'}.",
             "",
             "| metric | " + " | ".join(head) + " |", "|" + "---|" * (len(labels) + 1),
             "| status | " + " | ".join(status_word(str(c.frame.at[x, "status"])) for x in labels) + " |"]
    for metric in c.columns:
        row = [" ".join(c.cell(x, metric)).replace("|", "\\|") for x in labels]
        lines.append(f"| {metric} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def delta_key(c: Comparison, metric: str) -> str:
    """The name a change carries its unit in: `delta_pt` (points, for scores) or `delta_pct` (percent of
    the baseline's figure, for quantities with a unit)."""
    return "delta_pt" if c.unit(metric) == "" else "delta_pct"


def to_csv(c: Comparison) -> str:
    """Every metric, raw numbers, variants as rows: `<m>`, `<m> delta_pt` (points, for scores) or `<m>
    delta_pct` (percent, for quantities), `<m> ci95 low/high`, for the rows shown the paired delta in
    points, its two-sided 95% interval and n, and whether the latency pass ran on a loaded host (with
    its 1-minute load) and how it was timed (core.types.TimingCondition.describe)."""
    out = c.frame[["status"]].copy()
    extra: dict[str, list] = {}
    for col in c.deltas.columns:
        extra[col] = list(c.frame[col])
        extra[f"{col} {delta_key(c, col)}"] = list(c.deltas[col])
        if c.unit(col) == "" and any((x, col) in c.intervals for x in c.frame.index):
            extra[f"{col} ci95 low"] = [c.intervals.get((x, col), (math.nan,) * 2)[0] for x in c.frame.index]
            extra[f"{col} ci95 high"] = [c.intervals.get((x, col), (math.nan,) * 2)[1] for x in c.frame.index]
        if any((x, col) in c.paired for x in c.frame.index):
            paired = [c.paired.get((x, col)) for x in c.frame.index]
            extra[f"{col} paired delta_pt"] = [p.delta if p else math.nan for p in paired]
            extra[f"{col} paired delta_pt ci95 low"] = [p.low if p else math.nan for p in paired]
            extra[f"{col} paired delta_pt ci95 high"] = [p.high if p else math.nan for p in paired]
            extra[f"{col} paired n"] = [p.n if p else math.nan for p in paired]
    loads = c.loads()
    extra["latency host loaded"] = [None if loads[x] is None else loads[x].loaded for x in c.frame.index]
    extra["latency host load 1m"] = [None if loads[x] is None else loads[x].peak for x in c.frame.index]
    timed = c.timings()
    extra["latency timed"] = [None if timed[x] is None else timed[x].describe() for x in c.frame.index]
    out = pd.concat([out, pd.DataFrame(extra, index=c.frame.index)], axis=1)
    return out.to_csv()


def _num(x):
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x.item() if hasattr(x, "item") else x


def _metric_json(c: Comparison, label: str, col: str) -> dict:
    """One metric of one variant: its value and unit, n, 95% interval, and against the baseline the
    change in the unit its key names (`delta_pt` or `delta_pct`, the other null), with, where items
    pair, the paired two-sided 95% interval of `delta_pt`."""
    ci, paired = c.intervals.get((label, col)), c.paired.get((label, col))
    delta = None if label == c.baseline else _num(paired.delta if paired else c.deltas.at[label, col])
    key = delta_key(c, col)
    return {"value": _num(c.frame.at[label, col]), "unit": c.unit(col) or "score", "n": c.counts().get((label, col)),
            "ci95": list(ci) if ci else None,
            "delta_pt": delta if key == "delta_pt" else None, "delta_pct": delta if key == "delta_pct" else None,
            "delta_pt_ci95": [paired.low, paired.high] if paired else None,
            "delta_method": paired.method if paired else None, "paired_n": paired.n if paired else None,
            # the interval is a stopped task's confidence sequence; outside: it excludes delta_pt (SEQUENCE_NOTE)
            "delta_pt_sequence": ("outside" if paired.outside else "inside") if paired and paired.sequence else None}


def to_json(c: Comparison) -> str:
    """Every metric of every variant as numbers (missing ones null): see _metric_json. Intervals are
    two-sided 95%."""
    variants = {}
    for label in c.frame.index:
        load = c.loads()[label]
        variants[label] = {"status": _num(c.frame.at[label, "status"]),
                           "metrics": {col: _metric_json(c, label, col) for col in c.deltas.columns},
                           "host_load": None if load is None else {**load.model_dump(), "loaded": load.loaded},
                           "timing": None if (t := c.timings()[label]) is None else t.model_dump()}
    return json.dumps({"baseline": c.baseline, "runs": c.runs(), "interval": "two-sided 95%", "variants": variants},
                      indent=2) + "\n"


def write_report(comparison: Comparison, out_dir: Path) -> list[Path]:
    """compare.md, compare.csv and the PNG plots; the same set log_run attaches to the parent run."""
    out_dir.mkdir(parents=True, exist_ok=True)
    md, csv = out_dir / "compare.md", out_dir / "compare.csv"
    md.write_text(to_markdown(comparison))
    csv.write_text(to_csv(comparison))
    return [md, csv, *write_plots(comparison.plot_frame(), comparison.primary, out_dir, comparison.meaning, comparison.intervals,
                                  comparison.counts())]
