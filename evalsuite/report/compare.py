"""Variants side by side: metrics as rows, variants as columns, deltas against a baseline.

Sources are run directories, as many as given (variants measured at different times each live
in their own run folder); MLflow run ids and experiment names are first materialised into the
same layout (evalsuite.tracking.store.fetch), so everything below reads files only. Engine stats
become rows named `engine/<field>`, the names MLflow and the gate use. The intervals, paired deltas
and marks come from evalsuite.verdict.compare; compare_view.py writes the table out.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field

import pandas as pd

from evalsuite.core.errors import ConfigError
from evalsuite.core.rundir import RunDir
from evalsuite.core.types import (POOL_METRICS, HostLoad, Metric, TimingCondition, definitions_unlike, pools_comparable,
                                  task_of, timing_unlike)
from evalsuite.report.capacity_view import headline_rows, loaded_at
from evalsuite.report.names import (
    APART,
    ENGINE_HEADLINE,
    LATENCY_HEADLINE,
    REDEFINED,
    fmt_delta,
    fmt_value,
    in_points,
    loaded_mark,
    meanings,
    primary_metrics,
    prop,
)
from evalsuite.verdict.compare import (
    Entry,
    PairedDelta,
    baseline_marks,
    flat_metrics,
    intervals,
    is_latency,
    load_entries,
    paired_deltas,
    pick_baseline,
)


# in place of a pool-bound figure's delta where the candidate's KV pool was sized on another device model
OTHER_POOL = "another device's pool"


def metrics_frame(entries: list[Entry]) -> pd.DataFrame:
    """Index: variant label; columns: status, then every metric in first-seen order."""
    rows = {e.label: {"status": e.result.status, **flat_metrics(e.result)} for e in entries}
    frame = pd.DataFrame.from_dict(rows, orient="index")
    frame.index.name = "variant"
    return frame


def delta_frame(frame: pd.DataFrame, baseline: str, meaning: dict[str, Metric]) -> pd.DataFrame:
    """Candidate minus baseline: points (x100) for unitless scores, percent for quantities with units."""
    values = frame.drop(columns="status").apply(pd.to_numeric, errors="coerce")
    base = values.loc[baseline]
    out = pd.DataFrame(index=values.index, columns=values.columns, dtype=float)
    for col in values.columns:
        if in_points(meaning, col):
            out[col] = (values[col] - base[col]) * 100
        else:
            out[col] = (values[col] - base[col]) / abs(base[col]) * 100 if base[col] else float("nan")
    return out


def headline(frame: pd.DataFrame, primary: list[str], meaning: dict[str, Metric],
             patterns: list[str] | None = None) -> list[str]:
    """Rows worth a terminal: the tasks' primary metrics, then their other task-level scores, latency
    per prompt length (a median over mixed lengths is no latency), and the memory figures."""
    cols = [c for c in frame.columns if c != "status"]
    if patterns:
        rows = [c for c in cols if any(fnmatch.fnmatchcase(c, p) for p in patterns)]
        if not rows:  # an empty table would read as "no such figures were measured"
            some = ", ".join(list(dict.fromkeys([c for c in primary if c in cols] + cols))[:4])
            raise ConfigError(f"--metric: {', '.join(map(repr, patterns))} match no metric of these runs (they hold "
                              f"{some}, ...; `--format csv` names every one)")
        return rows  # a glob that matches only some runs' metrics (one set of globs over several pages) is no error
    scores = [c for c in primary if c in cols]
    scores += [c for c in cols if c in meaning and meaning[c].headline_score and c not in scores]
    per_length = {c: meaning[c] for c in cols if c in meaning and meaning[c].length is not None}
    latency = [c for c, m in per_length.items() if m.base in LATENCY_HEADLINE and m.depth is None]
    latency = sorted(latency, key=lambda c: (LATENCY_HEADLINE.index(per_length[c].base), per_length[c].length))
    latency = latency or [c for c in LATENCY_HEADLINE if c in cols]
    return scores + latency + [c for c in ENGINE_HEADLINE if c in cols] + headline_rows(cols)


@dataclass
class Comparison:
    entries: list[Entry]
    baseline: str
    frame: pd.DataFrame
    deltas: pd.DataFrame
    columns: list[str]
    intervals: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)  # (label, metric)
    paired: dict[tuple[str, str], PairedDelta] = field(default_factory=dict)
    primary: list[str] = field(default_factory=list)  # per task, its primary metric
    marks: dict[str, str] = field(default_factory=dict)  # baseline's metric -> at chance / at ceiling
    meaning: dict[str, Metric] = field(default_factory=dict)  # metric name -> what it is (names.meanings)
    # labels whose KV pool was sized on another device model than the baseline's (core.types.pools_comparable):
    # their POOL_METRICS get no delta
    elsewhere: set[str] = field(default_factory=set)

    def unit(self, metric: str) -> str:
        m = self.meaning.get(metric)
        return m.unit if m else ""

    def runs(self) -> list[str]:
        return list(dict.fromkeys(e.run_dir.run_id for e in self.entries))

    def counts(self) -> dict[tuple[str, str], int]:
        """Items behind each (variant label, metric) that counts them."""
        return {(e.label, m.name): m.n for e in self.entries for m in e.result.metrics if m.n}

    def methods(self) -> list[str]:
        return list(dict.fromkeys(p.method for p in self.paired.values()))

    def loads(self) -> dict[str, HostLoad | None]:
        """Each variant's host load over its latency pass, by label."""
        return {e.label: e.result.host_load for e in self.entries}

    def timings(self) -> dict[str, TimingCondition | None]:
        """How each variant's latency pass was timed, by label."""
        return {e.label: e.result.timed_as() for e in self.entries}

    def timed_apart(self) -> dict[str, str]:
        """label -> why its latency does not compare with the baseline's (core.types.timing_unlike), for
        the variants whose does not; the gate leaves those checks unjudged."""
        timed = self.timings()
        base = timed.get(self.baseline)
        out = {}
        for label, t in timed.items():
            why = (t.doubt() if t is not None else None) if label == self.baseline else timing_unlike(base, t)
            if why:
                out[label] = why
        return out

    def redefined(self) -> dict[str, dict[str, str]]:
        """label -> task -> how its definition's version differs from the baseline's (core.types.definitions_unlike),
        for the variants with such a task."""
        base = next(e.result for e in self.entries if e.label == self.baseline)
        found = {e.label: definitions_unlike(base, e.result) for e in self.entries if e.label != self.baseline}
        return {label: how for label, how in found.items() if how}

    def capacity_loaded(self, label: str, metric: str) -> bool:
        """A capacity figure of the variant swept on a loaded host (evalsuite.report.capacity_view)."""
        return loaded_at(self.frame.loc[label].to_dict(), metric)

    def without_other_pools(self, frame: pd.DataFrame) -> pd.DataFrame:
        """A copy of `frame` (values or deltas) with the pool-bound figures of `elsewhere` left out."""
        frame = frame.copy()
        frame.loc[list(self.elsewhere), [c for c in frame.columns if c in POOL_METRICS]] = float("nan")
        return frame

    def plot_frame(self) -> pd.DataFrame:
        """The frame with the figures that do not compare with the baseline's left out, so that no plot
        draws a Pareto front across KV pools of two cards."""
        return self.without_other_pools(self.frame)

    def cell(self, label: str, metric: str) -> list[str]:
        """A cell's lines: value, its interval, the delta, the delta's paired interval."""
        value = self.value_lines(label, metric)
        return value if value == ["-"] else value + self.change_lines(label, metric)

    def value_lines(self, label: str, metric: str) -> list[str]:
        """The value (marked where a loaded host timed it) and its 95% interval with n."""
        lines = [fmt_value(self.unit(metric), self.frame.at[label, metric])]
        if lines[0] == "-":
            return lines
        lines[0] += loaded_mark(metric, self.loads()[label]) or ("†" if self.capacity_loaded(label, metric) else "") \
            or (APART if is_latency(metric) and label in self.timed_apart() else "")
        lines[0] += REDEFINED if task_of(metric) in self.redefined().get(label, {}) else ""
        ci = self.intervals.get((label, metric))
        if ci:
            n = self.counts().get((label, metric))
            lines.append(f"({prop(ci[0])}–{prop(ci[1])}" + (f", n={n:,})" if n else ")"))
        return lines

    def change_lines(self, label: str, metric: str) -> list[str]:
        """Against the baseline: the delta and its paired 95% interval; on the baseline, its task's mark
        (at chance, at ceiling); where the pools differ, why there is no delta."""
        if label == self.baseline:
            return [self.marks[metric]] if metric in self.marks else []
        if label in self.elsewhere and metric in POOL_METRICS:
            return [OTHER_POOL]
        lines = []
        pd_ = self.paired.get((label, metric))
        if pd_ and pd_.sequence and pd_.outside:  # the estimate is the interval, not a mean it excludes
            return [SEQUENCE_CELL, f"[{pd_.low:+.1f}, {pd_.high:+.1f}]"]
        d = fmt_delta(self.unit(metric), pd_.delta if pd_ else self.deltas.at[label, metric])
        if d:
            lines.append(d + ("‡" if pd_ and pd_.subset else ""))
        if pd_:
            lines.append(f"[{pd_.low:+.1f}, {pd_.high:+.1f}]")
        return lines

    def sequence_outside(self) -> bool:
        return any(p.sequence and p.outside for p in self.paired.values())


# a stopped candidate's change where its confidence sequence's interval excludes the mean of the items
# scored: the cell gives the interval, and SEQUENCE_NOTE says why, once, under the table
SEQUENCE_CELL = "confidence sequence§"
SEQUENCE_NOTE = ("§ confidence sequence: the candidate's task stopped early (run --stop decided); its change is the "
                 "running intersection of an anytime-valid confidence sequence, valid at every look at once, which can "
                 "exclude the mean of the items scored when earlier looks bounded the change more tightly: the interval "
                 "is the estimate (docs/statistics.md, \"Reading a confidence sequence\")")


def compare(sources: list[tuple[RunDir, set[str] | None]], baseline: str | None = None,
            patterns: list[str] | None = None) -> Comparison:
    entries = load_entries(sources)
    base = pick_baseline(entries, baseline)
    frame = metrics_frame(entries)
    primary = primary_metrics([e.result for e in entries])
    meaning = meanings([e.result for e in entries])
    comparison = Comparison(entries, base.label, frame, delta_frame(frame, base.label, meaning),
                            headline(frame, primary, meaning, patterns), primary=primary, meaning=meaning)
    comparison.intervals = intervals(entries)
    comparison.paired = paired_deltas(base, entries, comparison.columns)
    comparison.elsewhere = {e.label for e in entries if not pools_comparable(base.result, e.result)}
    comparison.deltas = comparison.without_other_pools(comparison.deltas)  # the cell says why there is none
    comparison.marks = baseline_marks(base, frame.columns.tolist())
    return comparison


