"""Length x depth heatmaps of grid tasks (needle, legal_long), and deltas between variants.

Inputs are what a run leaves behind: per-sample rows (dicts as the run folder stores them,
{"sample", "completion", "score"}, or bare Score objects / dicts) or a VariantResult, whose
`{task}/acc/len{L}_depth{D}` metrics hold the cell means. Figures are drawn on a bare
matplotlib Figure (Agg canvas), so no global backend is switched and no window opens.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalsuite.types import Score, VariantResult

_GROUP = re.compile(r"len(\d+)_depth(\d+)$")


@dataclass
class Grid:
    """Mean score per (length, depth %) cell, with the number of samples behind each."""

    cells: dict[tuple[int, int], float] = field(default_factory=dict)
    counts: dict[tuple[int, int], int] = field(default_factory=dict)

    @property
    def lengths(self) -> list[int]:
        return sorted({n for n, _ in self.cells})

    @property
    def depths(self) -> list[int]:
        return sorted({d for _, d in self.cells})

    def matrix(self) -> list[list[float]]:
        """Rows are depths (0% first), columns lengths; NaN where a cell is missing."""
        return [[self.cells.get((n, d), math.nan) for n in self.lengths] for d in self.depths]


def _score_of(row: Any) -> Score:
    if isinstance(row, Score):
        return row
    if isinstance(row, dict) and "score" in row:
        row = row["score"]
    return Score.model_validate(row)


def _cell(score: Score) -> tuple[int, int] | None:
    if "length" in score.extra and "depth" in score.extra:
        return int(score.extra["length"]), int(score.extra["depth"])
    m = _GROUP.search(score.group or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def grid_from_rows(rows: Iterable[Any], task: str | None = None) -> Grid:
    """Cell means of per-sample scores; rows of other tasks (when `task` is given) are skipped."""
    sums: dict[tuple[int, int], float] = defaultdict(float)
    counts: dict[tuple[int, int], int] = defaultdict(int)
    for row in rows:
        s = _score_of(row)
        cell = _cell(s)
        if cell is None or (task and s.task != task):
            continue
        sums[cell] += s.value
        counts[cell] += 1
    return Grid({c: sums[c] / counts[c] for c in sums}, dict(counts))


def grid_from_result(result: VariantResult, task: str = "needle") -> Grid:
    pattern = re.compile(rf"^{re.escape(task)}/acc/len(\d+)_depth(\d+)$")
    grid = Grid()
    for m in result.metrics:
        hit = pattern.match(m.name)
        if hit:
            cell = (int(hit.group(1)), int(hit.group(2)))
            grid.cells[cell] = m.value
            grid.counts[cell] = m.n or 0
    return grid


def to_grid(source: Grid | VariantResult | Iterable[Any], task: str = "needle") -> Grid:
    if isinstance(source, Grid):
        return source
    if isinstance(source, VariantResult):
        return grid_from_result(source, task)
    return grid_from_rows(source, task)


def delta_grid(base: Grid, cand: Grid) -> Grid:
    """cand - base over the cells both have."""
    common = set(base.cells) & set(cand.cells)
    return Grid({c: cand.cells[c] - base.cells[c] for c in common},
                {c: min(base.counts.get(c, 0), cand.counts.get(c, 0)) for c in common})


def _length_label(n: int) -> str:
    return f"{n // 1024}K" if n % 1024 == 0 else str(n)


def _draw(grid: Grid, path: Path, title: str, cmap: str, vmin: float, vmax: float, cbar: str, fmt: str) -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not grid.cells:
        raise ValueError(f"no length/depth cells to plot for {title!r}")
    lengths, depths = grid.lengths, grid.depths
    fig = Figure(figsize=(1.0 + 0.9 * max(len(lengths), 3), 1.2 + 0.45 * max(len(depths), 3)))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    im = ax.imshow(grid.matrix(), cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", origin="upper")
    ax.set_xticks(range(len(lengths)), [_length_label(n) for n in lengths])
    ax.set_yticks(range(len(depths)), [f"{d}%" for d in depths])
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("depth")
    ax.set_title(title)
    for i, d in enumerate(depths):
        for j, n in enumerate(lengths):
            v = grid.cells.get((n, d))
            if v is not None:
                ax.text(j, i, format(v, fmt), ha="center", va="center", fontsize=8,
                        color="black" if abs(v - (vmin + vmax) / 2) < (vmax - vmin) / 4 else "white")
    fig.colorbar(im, ax=ax, label=cbar)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path


def heatmap_png(source: Grid | VariantResult | Iterable[Any], path: str | Path, task: str = "needle",
                title: str | None = None) -> Path:
    """Accuracy per (length, depth) cell, 0 red to 1 green."""
    name = source.variant if isinstance(source, VariantResult) else ""
    return _draw(to_grid(source, task), Path(path), title or f"{task} accuracy {name}".strip(),
                 "RdYlGn", 0.0, 1.0, "accuracy", ".2f")


def delta_heatmap_png(base: Grid | VariantResult | Iterable[Any], cand: Grid | VariantResult | Iterable[Any],
                      path: str | Path, task: str = "needle", title: str | None = None) -> Path:
    """Accuracy of `cand` minus `base` per cell (e.g. kv_fp8 - bf16): blue better, red worse."""
    if title is None:
        names = [s.variant for s in (cand, base) if isinstance(s, VariantResult)]
        title = f"{task} accuracy delta" + (f" {names[0]} - {names[1]}" if len(names) == 2 else "")
    d = delta_grid(to_grid(base, task), to_grid(cand, task))
    span = max([abs(v) for v in d.cells.values()] + [0.05])
    return _draw(d, Path(path), title, "RdBu", -span, span, "accuracy delta", "+.2f")
