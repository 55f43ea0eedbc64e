"""A results page's decision tables, quoted from the report files beside it.

A page marks each quote with `<!-- quoted from REL: WHAT -->` (ending a line) ... `<!-- /quoted -->`
(a line of its own), REL a report.md inside the page's folder and WHAT `picks`, `variants` or both
(comma-separated): the "What to serve" section's objective table, its per-variant table and the line
after it that says how to read it. Every quote is rewritten from the file as `evalsuite report` last
wrote it, so a recomputed report (lab/regen_results.sh) recomputes the page's tables too, and the two
never drift apart by hand.

    python lab/quote_report.py docs/results/h200-2026-12-01-qwen2.5-coder-1.5b.md
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

START = re.compile(r"<!-- quoted from (\S+): ([a-z, ]+) -->")
END = "<!-- /quoted -->"
PARTS = ("picks", "variants")


def what_to_serve(report: Path) -> dict[str, list[str]]:
    """The picks table, and the variants table with its reading line, of report.md's What to serve."""
    lines = report.read_text().splitlines()
    start = lines.index("## What to serve")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    tables, i = [], start + 1
    while i < end:
        if lines[i].startswith("|"):
            j = i
            while j < end and lines[j].startswith("|"):
                j += 1
            note = [lines[j + 1]] if j + 1 < end and lines[j + 1].startswith("verdict: ") else []
            tables.append(lines[i:j] + ([""] + note if note else []))
            i = j
        i += 1
    if len(tables) != 2:
        raise SystemExit(f"{report}: {len(tables)} tables under What to serve, not the objective and the variant tables")
    return dict(zip(PARTS, tables))


def quote(page: Path) -> int:
    """Rewrite every quote of `page`; returns how many."""
    lines, out, n = page.read_text().splitlines(), [], 0
    i = 0
    while i < len(lines):
        out.append(lines[i])
        m = START.search(lines[i])
        if m:
            end = lines.index(END, i)
            parts = what_to_serve(page.with_suffix("") / m.group(1))
            wanted = [w.strip() for w in m.group(2).split(",")]
            if any(w not in PARTS for w in wanted):
                raise SystemExit(f"{page}:{i + 1}: quote what? {m.group(2)!r} (allowed: {', '.join(PARTS)})")
            for w in wanted:
                out += [""] + parts[w]
            out.append(END)
            i, n = end, n + 1
        i += 1
    page.write_text("\n".join(out) + "\n")
    return n


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(f"{arg}: {quote(Path(arg))} quote(s) rewritten")
