"""Variants side by side: metrics as rows, variants as columns, deltas against a baseline, and plots.

Sources are run directories, as many as given (variants measured at different times each live
in their own run folder); MLflow run ids and experiment names are first materialised into the
same layout (evalsuite.report.tracking.fetch), so everything below reads files only. Engine stats
become rows named `engine/<field>`, the names MLflow and the gate use.

Every accuracy carries its 95% interval (Wilson for a proportion), and every accuracy delta its
paired 95% interval over the items both variants answered (evalsuite.stats.significance names the method).
"""

from __future__ import annotations

import fnmatch
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from evalsuite.core.errors import ConfigError
from evalsuite.stats.metrics import accuracy_interval, is_interval_bound
from evalsuite.core.records import RunDir
from evalsuite.core.types import EngineStats, VariantResult

# Unit suffixes: a change in these reads best in percent; unitless scores read in points.
UNIT_SUFFIXES = ("_s", "_ms", "_gib", "_tokens", "_blocks", "_per_s", "_token", "_bytes", "_pct")
QUANTITY_PREFIXES = ("engine", "latency", "roofline")
ENGINE_HEADLINE = ["engine/weights_gib", "engine/required_gib", "engine/kv_cache_tokens", "engine/max_concurrency"]
LATENCY_HEADLINE = ["latency/ttft_ms_p50", "latency/itl_ms_p50"]
CONTEXT_GROUP = re.compile(r"^(?P<base>.+)/(?:len|ctx|length)(?P<n>\d+)$")
CONFIDENCE = 0.95  # two-sided, for every interval compare shows


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


def label_entries(pairs: list[tuple[RunDir, VariantResult]]) -> list[str]:
    """A variant's name, or run:name where the name repeats across runs (run = the run folder's name)."""
    names = [v.variant for _, v in pairs]
    labels = [v.variant if names.count(v.variant) == 1 else f"{rd.run_id}:{v.variant}" for rd, v in pairs]
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        raise ConfigError(f"two run folders share the name and variant {', '.join(twice)}; rename a folder")
    return labels


def load_entries(sources: list[tuple[RunDir, set[str] | None]]) -> list[Entry]:
    """Variants of every source in order; a run folder given twice counts once."""
    pairs, seen = [], set()
    for rd, only in sources:
        record = rd.load_run()
        missing = sorted((only or set()) - {v.variant for v in record.variants})
        if missing:
            raise ConfigError(f"{rd.root}:{missing[0]}: no such variant in run {record.run_id} "
                              f"(allowed: {', '.join(v.variant for v in record.variants)})")
        for v in record.variants:
            key = (rd.root.resolve(), v.variant)
            if (only is None or v.variant in only) and key not in seen:
                seen.add(key)
                pairs.append((rd, v))
    return [Entry(label, rd, v) for (rd, v), label in zip(pairs, label_entries(pairs), strict=True)]


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
    """Scores like mmlu/acc or needle/acc/len1024, as opposed to engine/, latency/, roofline/ or *_s, *_gib, *_pct."""
    parts = name.split("/")
    if parts[0] in QUANTITY_PREFIXES:
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
    """Rows worth a terminal: task-level scores, latency per prompt length (a median over mixed
    lengths is no latency), and the memory figures."""
    cols = [c for c in frame.columns if c != "status"]
    if patterns:
        return [c for c in cols if any(fnmatch.fnmatchcase(c, p) for p in patterns)]
    scores = [c for c in cols if c.count("/") == 1 and is_unitless(c) and not is_interval_bound(c)]
    order = {f"{b}/ctx": i for i, b in enumerate(LATENCY_HEADLINE)}
    latency = [c for c in cols if c.rsplit("ctx", 1)[0] + "ctx" in order]
    latency = sorted(latency, key=lambda c: (order[c.rsplit("ctx", 1)[0] + "ctx"], int(c.rsplit("ctx", 1)[1])))
    latency = latency or [c for c in LATENCY_HEADLINE if c in cols]
    return scores + latency + [c for c in ENGINE_HEADLINE if c in cols]


def fmt_value(name: str, value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if name.endswith(("_tokens", "_blocks")):
        return f"{value:,.0f}"
    if "_pct" in name.split("/")[1 if "/" in name else 0]:
        return f"{value:.0f}%"
    if is_unitless(name):
        return f"{value:.3f}"
    return f"{value:.3f}" if name.endswith("_gib") else f"{value:.4g}"


def fmt_delta(name: str, delta) -> str:
    if delta is None or (isinstance(delta, float) and math.isnan(delta)):
        return ""
    return f"{delta:+.1f} pt" if is_unitless(name) else f"{delta:+.1f}%"


def _prop(v: float) -> str:
    """0.408 -> .408: three digits of a proportion, narrow enough for an 80-column table."""
    return f"{v:.3f}".lstrip("0") if v < 1 else "1.00"


@dataclass
class PairedDelta:
    """Candidate - baseline in points on the items both answered, with its two-sided 95% interval."""

    delta: float
    low: float
    high: float
    method: str
    n: int
    subset: bool  # fewer items than one of the two metrics counts: the delta differs from theirs


@dataclass
class Comparison:
    entries: list[Entry]
    baseline: str
    frame: pd.DataFrame
    deltas: pd.DataFrame
    columns: list[str]
    intervals: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)  # (label, metric)
    paired: dict[tuple[str, str], PairedDelta] = field(default_factory=dict)

    def runs(self) -> list[str]:
        return list(dict.fromkeys(e.run_dir.run_id for e in self.entries))

    def methods(self) -> list[str]:
        return list(dict.fromkeys(p.method for p in self.paired.values()))

    def cell(self, label: str, metric: str) -> list[str]:
        """A cell's lines: value, its interval, the delta, the delta's paired interval."""
        lines = [fmt_value(metric, self.frame.at[label, metric])]
        if lines[0] == "-":
            return lines
        ci = self.intervals.get((label, metric))
        if ci:
            lines.append(f"({_prop(ci[0])}–{_prop(ci[1])})")
        if label != self.baseline:
            pd_ = self.paired.get((label, metric))
            d = fmt_delta(metric, pd_.delta if pd_ else self.deltas.at[label, metric])
            if d:
                lines.append(d + ("‡" if pd_ and pd_.subset else ""))
            if pd_:
                lines.append(f"[{pd_.low:+.1f}, {pd_.high:+.1f}]")
        return lines

    def markdown(self) -> str:
        from evalsuite.report.compare_view import to_markdown

        return to_markdown(self)

    def csv(self) -> str:
        from evalsuite.report.compare_view import to_csv

        return to_csv(self)


def compare(sources: list[tuple[RunDir, set[str] | None]], baseline: str | None = None,
            patterns: list[str] | None = None) -> Comparison:
    from evalsuite.report.compare_view import add_intervals

    entries = load_entries(sources)
    base = pick_baseline(entries, baseline)
    frame = metrics_frame(entries)
    comparison = Comparison(entries, base.label, frame, delta_frame(frame, base.label), headline(frame, patterns))
    add_intervals(comparison)
    return comparison


def write_report(comparison: Comparison, out_dir: Path) -> list[Path]:
    """compare.md, compare.csv and the PNG plots; the same set log_run attaches to the parent run."""
    from evalsuite.report.plots import write_plots

    out_dir.mkdir(parents=True, exist_ok=True)
    md, csv = out_dir / "compare.md", out_dir / "compare.csv"
    md.write_text(comparison.markdown())
    csv.write_text(comparison.csv())
    return [md, csv, *write_plots(comparison.frame, out_dir, comparison.intervals)]


def open_sources(refs: list[str], uri: str | None, scratch: Path) -> list[tuple[RunDir, set[str] | None]]:
    """Run directories as they are (`DIR:VARIANT` picks one variant); anything else is looked up in
    MLflow and downloaded to `scratch`."""
    out: list[tuple[RunDir, set[str] | None]] = []
    for i, ref in enumerate(refs):
        path, variant = split_ref(ref)
        if path is not None:
            rd = RunDir(path)
            if not rd.exists():
                raise ConfigError(f"{ref}: not a run directory (no run.json)")
            out.append((rd, {variant} if variant else None))
            continue
        try:  # only now: mlflow is slow to import, and run directories alone must not need it
            from evalsuite.report.tracking import fetch
        except ImportError as e:
            raise ConfigError(f"{ref}: no such run directory (MLflow lookups need mlflow: {e})") from None
        out += fetch(ref, uri, scratch / str(i))
    return out


def split_ref(ref: str) -> tuple[Path | None, str | None]:
    """`runs/A` -> (runs/A, None); `runs/A:bf16` -> (runs/A, bf16); anything else is no folder."""
    if Path(ref).exists():
        return Path(ref), None
    head, sep, variant = ref.rpartition(":")
    if sep and variant and Path(head).is_dir():
        return Path(head), variant
    return None, None
