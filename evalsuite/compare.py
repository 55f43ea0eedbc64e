"""Variants side by side: a variants x metrics table with deltas against a baseline, and plots.

Sources are run directories; MLflow run ids and experiment names are first materialised
into the same layout (evalsuite.tracking.fetch), so everything below reads files only.
Engine stats become columns named `engine/<field>`, the names MLflow and the gate use.
"""

from __future__ import annotations

import fnmatch
import math
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml
from rich.table import Table

from evalsuite.errors import ConfigError
from evalsuite.records import RunDir
from evalsuite.types import EngineStats, VariantResult

# Unit suffixes: a change in these reads best in percent; unitless scores read in points.
UNIT_SUFFIXES = ("_s", "_ms", "_gib", "_tokens", "_blocks", "_per_s", "_token", "_bytes")
HEADLINE_EXTRA = ["latency/ttft_ms_p50", "latency/itl_ms_p50", "engine/weights_gib", "engine/required_gib",
                  "engine/kv_cache_tokens", "engine/max_concurrency"]
CONTEXT_GROUP = re.compile(r"^(?P<base>.+)/(?:len|ctx|length)(?P<n>\d+)$")


@dataclass
class Entry:
    """One variant of one run, under the label shown in tables and plots."""

    label: str
    run_dir: RunDir
    result: VariantResult


def engine_metrics(engine: EngineStats) -> dict[str, float]:
    out = {}
    for key, value in engine.model_dump().items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[f"engine/{key}"] = float(value)
    return out


def flat_metrics(result: VariantResult) -> dict[str, float]:
    """Every number a variant produced: its metrics, then its engine stats as engine/<field>."""
    out = {m.name: m.value for m in result.metrics}
    out.update(engine_metrics(result.engine))
    return out


def read_config(run_dir: RunDir) -> dict:
    path = run_dir.root / "config.yaml"
    if not path.exists():
        return {}
    data = yaml.safe_load(path.read_text())
    return data if isinstance(data, dict) else {}


def load_entries(sources: list[tuple[RunDir, set[str] | None]]) -> list[Entry]:
    """Variants of every source, labelled by name, or run:name where names repeat across runs."""
    pairs = []
    for rd, only in sources:
        record = rd.load_run()
        pairs += [(rd, v) for v in record.variants if only is None or v.variant in only]
    names = [v.variant for _, v in pairs]
    return [Entry(label=v.variant if names.count(v.variant) == 1 else f"{rd.run_id}:{v.variant}", run_dir=rd, result=v)
            for rd, v in pairs]


def pick_baseline(entries: list[Entry], wanted: str | None) -> Entry:
    """--baseline by label or variant name; else the first run's config `baseline`; else the first variant."""
    if not entries:
        raise ConfigError("compare: no variants to compare")
    if wanted is None:
        first = entries[0].run_dir
        named = read_config(first).get("baseline")
        match = [e for e in entries if e.run_dir.root == first.root and e.result.variant == named]
        return match[0] if match else entries[0]  # the config's baseline may not be among those picked
    matches = [e for e in entries if e.label == wanted] or [e for e in entries if e.result.variant == wanted]
    if len(matches) != 1:
        labels = ", ".join(e.label for e in entries)
        how = "is ambiguous" if matches else "is not a variant"
        raise ConfigError(f"--baseline: {wanted!r} {how} (choose one of: {labels})")
    return matches[0]


def metrics_frame(entries: list[Entry]) -> pd.DataFrame:
    """Index: variant label; columns: status, then every metric in first-seen order."""
    rows = {e.label: {"status": e.result.status, **flat_metrics(e.result)} for e in entries}
    frame = pd.DataFrame.from_dict(rows, orient="index")
    frame.index.name = "variant"
    return frame


def is_unitless(name: str) -> bool:
    """Scores like mmlu/acc or needle/acc/len1024, as opposed to engine/, latency/ or *_s, *_gib."""
    parts = name.split("/")
    if parts[0] in ("engine", "latency"):
        return False
    return not (parts[1] if len(parts) > 1 else parts[0]).endswith(UNIT_SUFFIXES)


def delta_frame(frame: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """Candidate minus baseline: points (x100) for unitless scores, percent for quantities with units."""
    values = frame.drop(columns="status").apply(pd.to_numeric, errors="coerce")
    base = values.loc[baseline]
    out = pd.DataFrame(index=values.index, columns=values.columns, dtype=float)
    for col in values.columns:
        if is_unitless(col):
            out[col] = (values[col] - base[col]) * 100
        else:
            out[col] = (values[col] - base[col]) / abs(base[col]) * 100 if base[col] else float("nan")
    return out


def headline(frame: pd.DataFrame, patterns: list[str] | None = None) -> list[str]:
    """Columns worth a terminal: task-level scores and the memory/latency figures the issue is about."""
    cols = [c for c in frame.columns if c != "status"]
    if patterns:
        return [c for c in cols if any(fnmatch.fnmatchcase(c, p) for p in patterns)]
    scores = [c for c in cols if c.count("/") == 1 and is_unitless(c)]
    return scores + [c for c in HEADLINE_EXTRA if c in cols]


def fmt_value(name: str, value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if name.endswith(("_tokens", "_blocks")):
        return f"{value:,.0f}"
    if is_unitless(name):
        return f"{value:.3f}"
    return f"{value:.3f}" if name.endswith("_gib") else f"{value:.4g}"


def fmt_delta(name: str, delta) -> str:
    if delta is None or (isinstance(delta, float) and math.isnan(delta)):
        return ""
    return f"{delta:+.1f} pt" if is_unitless(name) else f"{delta:+.1f}%"


def cells(frame: pd.DataFrame, deltas: pd.DataFrame, baseline: str, columns: list[str]) -> pd.DataFrame:
    """Display strings: 'value (delta)' per cell; the baseline row carries values only."""
    shown = pd.DataFrame(index=frame.index, columns=["status", *columns], dtype=object)
    shown["status"] = frame["status"]
    for label in frame.index:
        for col in columns:
            text = fmt_value(col, frame.at[label, col])
            d = "" if label == baseline else fmt_delta(col, deltas.at[label, col])
            shown.at[label, col] = f"{text} ({d})" if d and text != "-" else text
    shown.index = [f"{i} (baseline)" if i == baseline else i for i in shown.index]
    shown.index.name = "variant"
    return shown


def to_markdown(shown: pd.DataFrame) -> str:
    """GitHub table without tabulate (pandas' to_markdown needs it and it is not a dependency)."""
    header = [shown.index.name or "", *map(str, shown.columns)]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * len(header)) + "|"]
    for label, row in shown.iterrows():
        lines.append("| " + " | ".join([str(label), *(str(v).replace("|", "\\|") for v in row)]) + " |")
    return "\n".join(lines) + "\n"


def to_csv(frame: pd.DataFrame, deltas: pd.DataFrame) -> str:
    """All metrics, raw numbers: `<metric>` then `<metric> delta` (points or percent, as displayed)."""
    out = frame.copy()
    for col in deltas.columns:
        out[f"{col} delta"] = deltas[col]
    ordered = ["status"] + [c for col in deltas.columns for c in (col, f"{col} delta")]
    return out[ordered].to_csv()


def rich_table(shown: pd.DataFrame, title: str) -> Table:
    t = Table(title=title)
    t.add_column("variant", overflow="fold")
    for col in shown.columns:
        t.add_column(str(col), overflow="fold")
    for label, row in shown.iterrows():
        t.add_row(str(label), *(str(v) for v in row))
    return t


@dataclass
class Comparison:
    entries: list[Entry]
    baseline: str
    frame: pd.DataFrame
    deltas: pd.DataFrame
    columns: list[str]

    def shown(self) -> pd.DataFrame:
        return cells(self.frame, self.deltas, self.baseline, self.columns)

    def markdown(self) -> str:
        runs = sorted({e.run_dir.run_id for e in self.entries})
        head = f"### evalsuite compare: {', '.join(runs)}\n\nBaseline: `{self.baseline}`. "
        note = "Deltas are points (x100) for scores, percent for quantities with units.\n\n"
        return head + note + to_markdown(self.shown())

    def csv(self) -> str:
        return to_csv(self.frame, self.deltas)


def compare(sources: list[tuple[RunDir, set[str] | None]], baseline: str | None = None,
            patterns: list[str] | None = None) -> Comparison:
    entries = load_entries(sources)
    base = pick_baseline(entries, baseline)
    frame = metrics_frame(entries)
    return Comparison(entries, base.label, frame, delta_frame(frame, base.label), headline(frame, patterns))


def write_report(comparison: Comparison, out_dir: Path) -> list[Path]:
    """compare.md, compare.csv and the PNG plots; the same set log_run attaches to the parent run."""
    from evalsuite.plots import write_plots

    out_dir.mkdir(parents=True, exist_ok=True)
    md, csv = out_dir / "compare.md", out_dir / "compare.csv"
    md.write_text(comparison.markdown())
    csv.write_text(comparison.csv())
    return [md, csv, *write_plots(comparison.frame, out_dir)]


def open_sources(refs: list[str], uri: str | None, scratch: Path) -> list[tuple[RunDir, set[str] | None]]:
    """Run directories as they are; anything else is looked up in MLflow and downloaded to `scratch`."""
    out: list[tuple[RunDir, set[str] | None]] = []
    for ref in refs:
        path = Path(ref)
        if path.exists():
            rd = RunDir(path)
            if not rd.exists():
                raise ConfigError(f"{ref}: not a run directory (no run.json)")
            out.append((rd, None))
            continue
        try:  # only now: mlflow is slow to import, and run directories alone must not need it
            from evalsuite.tracking import fetch
        except ImportError as e:
            raise ConfigError(f"{ref}: no such run directory (MLflow lookups need mlflow: {e})") from None
        out += fetch(ref, uri, scratch)
    return out
