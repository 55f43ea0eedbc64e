"""Text sized to the terminal: a wide table where it fits, else one block per record.

A table of records (variants) as columns or rows reads best until it is wider than the terminal;
rich then folds every column to a few letters (`legal/balanced_ac` over `c`). `fits` tells whether
a table shows at its natural width; `Blocks` is the fallback: one block per record, its title on
a line of its own (a name is never cut), then its fields as aligned rows whose last column wraps
under itself. Any command that lists records (compare, the run summary, gate) can use it.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field

from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

INDENT = 2  # a block's rows, under its title
GAP = 2  # between columns


def natural_width(renderable: RenderableType) -> int:
    """The widest line `renderable` draws when nothing limits it."""
    return Console(width=10_000, file=io.StringIO()).measure(renderable).maximum


def fits(renderable: RenderableType, width: int) -> bool:
    """True where `renderable` shows in `width` columns without folding a cell."""
    return natural_width(renderable) <= width


def aligned(rows: list[list[str | Text]]) -> Table:
    """Records one a line, columns aligned, every column but the last kept whole (a name is never
    cut) and the last wrapping under itself where the terminal is narrower: `kv_fp8  FAILED
    mmlu/acc dropped 7.0 pt [6.3, 7.8], limit 2`, one line per candidate."""
    grid = Table.grid(padding=(0, GAP, 0, 0), pad_edge=False)
    columns = max((len(r) for r in rows), default=0)
    for i in range(columns):
        grid.add_column(no_wrap=i < columns - 1, overflow="fold")
    for row in rows:
        grid.add_row(*(c if isinstance(c, Text) else Text(c) for c in row))
    return grid


@dataclass
class Block:
    """One record: a title (its name, status, verdict) and rows of fields."""

    title: Text
    rows: list[list[str | Text]] = field(default_factory=list)


@dataclass
class Blocks:
    """Records one after another, their rows' columns aligned across every block.

    Columns keep their natural width where the terminal allows; otherwise the first column (a
    field's name) gives way first, down to `min_first`, then the last (it wraps under itself).
    """

    headers: list[str]
    blocks: list[Block]
    caption: str = ""
    min_first: int = 12
    justify: list[str] | None = None  # per column: "left" (default) or "right" for figures

    def widths(self, width: int) -> list[int]:
        cols = len(self.headers)
        words = [max(map(len, h.split()), default=0) for h in self.headers]  # a heading wraps at its spaces
        natural = [max([words[i]] + [_len(r[i]) for b in self.blocks for r in b.rows if i < len(r)])
                   for i in range(cols)]
        room = width - INDENT - GAP * (cols - 1)
        over = sum(natural) - room
        if over > 0 and cols > 1:  # the field names first, then the last column
            cut = min(over, max(natural[0] - self.min_first, 0))
            natural[0] -= cut
            over -= cut
        if over > 0:
            natural[-1] = max(natural[-1] - over, 8)
        return natural

    def render(self, width: int) -> Group:
        widths = self.widths(width)
        head = self._grid(widths, [[Text(h, style="bold") for h in self.headers]])
        parts: list[RenderableType] = [Padding(head, (0, 0, 0, INDENT), expand=False)]
        for b in self.blocks:
            title = b.title.copy()
            title.overflow = "fold"
            parts += [title, Padding(self._grid(widths, b.rows), (0, 0, 0, INDENT), expand=False)]
        if self.caption:
            parts.append(Text(self.caption, style="dim"))
        return Group(*parts)

    def _grid(self, widths: list[int], rows: list[list[str | Text]]) -> Table:
        grid = Table.grid(padding=(0, GAP, 0, 0), pad_edge=False)
        for i, w in enumerate(widths):
            grid.add_column(width=w, overflow="fold", justify=self.justify[i] if self.justify else "left")
        for row in rows:
            first, *rest = (c if isinstance(c, Text) else Text(c) for c in row)
            grid.add_row(Text("\n".join(wrap_name(first.plain, widths[0])), style=first.style), *rest)
        return grid


def wrap_name(name: str, width: int) -> list[str]:
    """A long name on several lines, broken at a space or after a `/` or `_` where one falls within
    `width` (else at `width`): `needle_multikey/` over `extra_value_rate`, not `needle_multikey/extr`
    over `a_value_rate`."""
    lines = []
    while len(name) > width:
        space = name.rfind(" ", 0, width + 1)
        cut = max(name.rfind("/", 0, width), name.rfind("_", 0, width)) + 1
        if space >= cut and space > 0:
            lines.append(name[:space])
            name = name[space + 1:]
            continue
        cut = cut if cut > 0 else width
        lines.append(name[:cut])
        name = name[cut:]
    return [*lines, name]


def _len(cell: str | Text) -> int:
    text = cell.plain if isinstance(cell, Text) else cell
    return max((len(line) for line in text.splitlines()), default=0)
