"""PNG plots over a comparison frame (index: variant label; columns: metric names).

Each plot is written only when its data exists, so a run without a latency pass or a
needle task simply has fewer files. Accuracies have 95% error bars (Wilson for a proportion, normal over fixed strata for a macro or balanced one),
so that a half-point difference is not drawn as a cliff.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

# Figure objects, not pyplot: rendered by Agg straight to PNG, no display, no global backend state.
from matplotlib.figure import Figure

from evalsuite.core.types import USABLE_STATUSES, Metric
from evalsuite.report.names import LATENCY_HEADLINE, in_points

Intervals = dict[tuple[str, str], tuple[float, float]]  # (variant label, metric) -> (low, high)

LATENCY_BASES = LATENCY_HEADLINE  # the latency series drawn against prompt length
# One style per variant across a figure's panels: matplotlib's default cycle has ten colours, and a
# sweep of more variants drew two of them alike; a marker per variant on top of twenty colours.
MARKERS = "osD^vP*Xh<>p"


def _style(i: int) -> dict:
    from matplotlib import colormaps

    colors = colormaps["tab20"].colors
    return {"color": colors[(2 * i) % 20 + (i // 10) % 2], "marker": MARKERS[i % len(MARKERS)]}


def pareto_front(points: list[tuple[float, float]], x_lower_is_better: bool) -> list[int]:
    """Indices of points no other point beats on x and on accuracy (y, higher is better)."""
    sign = 1 if x_lower_is_better else -1
    front = []
    for i, (x, y) in enumerate(points):
        dominated = any(sign * xo <= sign * x and yo >= y and (sign * xo < sign * x or yo > y)
                        for j, (xo, yo) in enumerate(points) if j != i)
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: points[i][0])


def _numeric(frame: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    ok = frame[frame["status"].isin(USABLE_STATUSES)] if "status" in frame else frame
    return ok.reindex(columns=cols).apply(pd.to_numeric, errors="coerce")


def front_labels(sub: pd.DataFrame, x_col: str, col: str, partial: set, x_lower_is_better: bool) -> list:
    """The variants of `sub` on the Pareto front of (x_col, col), partial variants left out."""
    whole = sub[[label not in partial for label in sub.index]]
    pts = list(zip(whole[x_col], whole[col], strict=True))
    return [whole.index[i] for i in pareto_front(pts, x_lower_is_better)]


def _partial(frame: pd.DataFrame) -> set:
    """Variants scored on part of their items: their points stand apart and never make the front,
    since an accuracy over a subset is not comparable with one over the whole task."""
    return set(frame.index[frame["status"] == "partial"]) if "status" in frame else set()


def _incomplete(frame: pd.DataFrame, col: str, counts: dict[tuple[str, str], int] | None) -> set:
    """The partial variants whose `col` holds fewer items than another variant's: a variant cut in
    one task may have finished another, and its accuracy there is comparable (counts unknown: all)."""
    partial = _partial(frame)
    if not counts:
        return partial
    most = max((counts.get((str(label), col), 0) for label in frame.index), default=0)
    return {label for label in partial if counts.get((str(label), col), 0) < most}


def _name(label, partial: set) -> str:
    return f"{label} (partial)" if label in partial else str(label)


def _grid(n: int, title: str):
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(5 * cols, 4 * rows))
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    fig.suptitle(title)
    return fig, list(axes.flat)


def _yerr(keys: list[tuple[str, str]], values: list[float], intervals: Intervals) -> list[list[float]] | None:
    """matplotlib's asymmetric error bars (below, above) for (label, metric) points; None if none has one."""
    rows = [intervals.get((str(label), col)) for label, col in keys]
    if not any(rows):
        return None
    return [[max(v - r[0], 0.0) if r else 0.0 for v, r in zip(values, rows, strict=True)],
            [max(r[1] - v, 0.0) if r else 0.0 for v, r in zip(values, rows, strict=True)]]


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")  # "tight" keeps a legend placed below the panels
    return path


def _compact_ticks(axis) -> None:
    """At most five ticks, large numbers as 145K or 1.2M: six-digit token counts written out run into
    each other in a 5-inch panel."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    def short(v: float, _pos) -> str:
        for size, suffix in ((1e6, "M"), (1e3, "K")):
            if abs(v) >= 10 * size:  # 145K; 1.5M; under 10,000 as it is
                return f"{v / size:.{0 if v % size == 0 or abs(v) >= 100 * size else 1}f}{suffix}"
        return f"{v:,g}"

    axis.set_major_locator(MaxNLocator(nbins=5))
    axis.set_major_formatter(FuncFormatter(short))


def _dodged(xs: pd.Series) -> list[float]:
    """x positions where variants sharing one x (bf16 and an FP8 KV cache: the same weights) stand side
    by side, 1.5% of the axis apart and centred on it, instead of one on top of the other."""
    step = 0.015 * ((xs.max() - xs.min()) or abs(xs.max()) or 1.0)
    count, seen, out = xs.value_counts(), {}, []
    for x in xs:
        k = seen[x] = seen.get(x, -1) + 1
        out.append(x + (k - (count[x] - 1) / 2) * step)
    return out


def plot_tradeoff(frame: pd.DataFrame, accuracy: list[str], x_col: str, x_label: str, x_lower_is_better: bool,
                  path: Path, intervals: Intervals | None = None,
                  counts: dict[tuple[str, str], int] | None = None, eligible: set | None = None) -> Path | None:
    """Accuracy (with 95% error bars) vs a resource, one panel per task's primary metric, the Pareto
    front drawn and ringed over the `eligible` variants (None: all; the report page passes those the
    gate passed, and the baseline, so the line never runs through a failed one). A variant keeps its colour and
    marker in every panel (and in the context plots), its error bar too, hollow where its task is
    incomplete (`counts`: items per (variant, metric)); variants at one x are set side by side. One
    legend below the panels names them, since labels beside the points overlap."""
    acc = [c for c in accuracy if c in frame.columns]
    data = _numeric(frame, [x_col, *acc])
    panels = [c for c in acc if data[[x_col, c]].dropna().shape[0] > 0]
    if not panels:
        return None
    fig, axes = _grid(len(panels), f"accuracy vs {x_label}")
    partial = _partial(frame)
    styles = {label: _style(i) for i, label in enumerate(data.index)}
    handles: dict[str, object] = {}
    for ax, col in zip(axes, panels, strict=False):
        sub, cut = data[[x_col, col]].dropna(), _incomplete(frame, col, counts)
        for label, x, y in zip(sub.index, _dodged(sub[x_col]), sub[col], strict=True):
            st = styles[label]
            handles.setdefault(_name(label, partial), ax.errorbar(
                [x], [y], yerr=_yerr([(label, col)], [y], intervals or {}), ls="none", capsize=3, ecolor=st["color"],
                zorder=2, marker=st["marker"], color=st["color"], mfc="none" if label in cut else st["color"]))
        judged = sub if eligible is None else sub[[label in eligible for label in sub.index]]
        front = judged.loc[front_labels(judged, x_col, col, cut, x_lower_is_better)]
        (handles["Pareto front"],) = ax.plot(front[x_col], front[col], color="tab:red", ls="--", zorder=1)
        ax.scatter(front[x_col], front[col], s=160, facecolors="none", edgecolors="tab:red", zorder=3)
        ax.set_xlabel(x_label)
        ax.set_ylabel(f"{col} (95% CI)" if intervals else col)
        ax.grid(alpha=0.3)
        _compact_ticks(ax.xaxis)
    handles["Pareto front"] = handles.pop("Pareto front")  # last in the legend
    only = "" if eligible is None else "; the front joins only the variants the gate passed and the baseline"
    fig.legend(list(handles.values()), list(handles), loc="upper center", bbox_to_anchor=(0.5, 0.0),
               ncol=min(len(handles), 4), fontsize=8,
               title=f"hollow: over part of the task's items (never on the front){only}", title_fontsize=8)
    return _save(fig, path)


def context_series(frame: pd.DataFrame, meaning: dict[str, Metric]) -> dict[str, dict[int, str]]:
    """base metric -> {context length: column}, over the columns whose metric is one prompt length's
    figure (`meaning`: what each column is; needle/acc/len1024, latency/ttft_ms_p50/ctx512)."""
    out: dict[str, dict[int, str]] = {}
    for col in frame.columns:
        m = meaning.get(col)
        if m is not None and m.length is not None and m.depth is None:
            out.setdefault(m.base, {})[m.length] = col
    return out


def score_bases(series: dict[str, dict[int, str]], meaning: dict[str, Metric]) -> list[str]:
    """The base metrics of `series` whose per-length values are scores (in points), not timings."""
    return [b for b, cols in series.items() if all(in_points(meaning, c) for c in cols.values())]


def plot_vs_context(frame: pd.DataFrame, meaning: dict[str, Metric], bases: list[str], title: str, path: Path,
                    intervals: Intervals | None = None) -> Path | None:
    """One panel per base metric, one line per variant (with 95% error bars where known), log2 context
    axis; `meaning`: what each column is."""
    series = context_series(frame, meaning)
    bases = [b for b in bases if b in series]
    if not bases:
        return None
    fig, axes = _grid(len(bases), title)
    partial = _partial(frame)
    for ax, base in zip(axes, bases, strict=False):
        lengths = sorted(series[base])
        data = _numeric(frame, [series[base][n] for n in lengths])
        cols = [series[base][n] for n in lengths]
        for i, (label, row) in enumerate(data.iterrows()):
            yerr = _yerr([(label, c) for c in cols], list(row), intervals or {})
            ax.errorbar(lengths, list(row), yerr=yerr, capsize=3, label=_name(label, partial),
                        ls="--" if label in partial else "-", **_style(i))
        ax.set_xscale("log", base=2)
        ax.set_xticks(lengths, [str(n) for n in lengths])
        ax.minorticks_off()
        ax.set_xlabel("context length (tokens)")
        ax.set_ylabel(base)
        ax.grid(alpha=0.3)
    # one legend for all panels, below them: every panel has the same variants, and a legend inside
    # a panel covers its points once there are more than a few
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(len(labels), 4), fontsize=8)
    return _save(fig, path)


def write_plots(frame: pd.DataFrame, accuracy: list[str], out_dir: Path, meaning: dict[str, Metric],
                intervals: Intervals | None = None, counts: dict[tuple[str, str], int] | None = None) -> list[Path]:
    """`accuracy`: the tasks' primary metrics (evalsuite.report.names.primary_metrics); `meaning`: what
    each column is (names.meanings); `counts`: items per (variant, metric), which tell a partial
    variant's finished tasks from its cut ones."""
    out_dir.mkdir(parents=True, exist_ok=True)
    acc_bases = score_bases(context_series(frame, meaning), meaning)
    made = [
        plot_tradeoff(frame, accuracy, "engine/weights_gib", "weights GiB", True, out_dir / "accuracy_vs_weights_gib.png",
                      intervals, counts),
        plot_tradeoff(frame, accuracy, "engine/kv_cache_tokens", "KV cache capacity (tokens)", False,
                      out_dir / "accuracy_vs_kv_tokens.png", intervals, counts),
        plot_vs_context(frame, meaning, acc_bases, "accuracy vs context length (95% CI)",
                        out_dir / "accuracy_vs_context.png", intervals),
        plot_vs_context(frame, meaning, LATENCY_BASES, "latency vs context length", out_dir / "latency_vs_context.png"),
    ]
    return [p for p in made if p is not None]


Grid = dict[tuple[int, int], float]  # (context length, needle depth %) -> accuracy


def plot_heatmaps(grids: dict[str, Grid], title: str, path: Path) -> Path | None:
    """One depth-by-length panel per variant, cells coloured by accuracy on one 0-100% scale and
    written in percent, so that a needle lost at one depth shows where a mean over depths hides it.
    Constrained layout spaces the panels' titles and axis labels, and the colour bar, apart."""
    grids = {k: g for k, g in grids.items() if g}
    if not grids:
        return None
    n = len(grids)
    cols = min(n, 3)
    # a panel sized to its cells: a 1-by-2 demo grid needs no 4.6-inch square
    most_lengths = max(len({k for k, _ in g}) for g in grids.values())
    most_depths = max(len({d for _, d in g}) for g in grids.values())
    width, height = min(4.6, 1.8 + 0.9 * most_lengths), min(3.8, 1.4 + 0.3 * most_depths)
    fig = Figure(figsize=(width * cols + 1.0, height * math.ceil(n / cols) + 0.4), layout="constrained")
    axes = list(fig.subplots(math.ceil(n / cols), cols, squeeze=False).flat)
    for ax in axes[n:]:
        ax.set_visible(False)
    fig.suptitle(title)
    image = None
    for ax, (label, grid) in zip(axes, grids.items(), strict=False):
        lengths = sorted({n for n, _ in grid})
        depths = sorted({d for _, d in grid})
        cells = [[grid.get((n, d), math.nan) * 100 for n in lengths] for d in depths]
        image = ax.imshow(cells, vmin=0, vmax=100, cmap="RdYlGn", aspect="auto", origin="lower")
        if len(lengths) * len(depths) <= 120:
            for i, row in enumerate(cells):
                for j, v in enumerate(row):
                    if not math.isnan(v):
                        # white on the scale's dark ends (deep red, deep green), black between
                        ax.text(j, i, f"{v:.0f}%", ha="center", va="center", fontsize=7,
                                color="white" if v <= 15 or v >= 85 else "black")
        ax.set_xticks(range(len(lengths)), [f"{n // 1024}K" if n >= 1024 else str(n) for n in lengths])
        ax.set_yticks(range(len(depths)), [str(d) for d in depths])
        ax.set_xlabel("context length (tokens)")
        ax.set_ylabel("needle depth (%)")
        ax.set_title(str(label), fontsize=9)
    fig.colorbar(image, ax=axes[:n], shrink=0.8, label="accuracy (%)", format="{x:.0f}%")
    fig.savefig(path, dpi=110)
    return path
