"""The per-length table of the H200 results pages, from the per-item scores in their data archives.

Keeping and importing per-item scores is the product's (`evalsuite export RUN --scores DIR`,
`evalsuite import KEPT OUT`, `evalsuite results fetch PAGE`); this script prints the one table the
pages show that `evalsuite compare` does not: per variant, MMLU and CUAD with paired differences (the
strata and the paired test of evalsuite.stats, as compare takes them), the found/n of every long-task
length, the engine's weights and KV tokens, and TTFT/ITL medians alone on the card.

    evalsuite results fetch h200-2026-12-01-qwen2.5-coder-1.5b
    python lab/scores.py glance SHORT_KEPT LONG_KEPT LATENCY_KEPT [--baseline bf16]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from evalsuite.core.errors import ConfigError
from evalsuite.core.types import meaning_of_name
from evalsuite.results.scores import read_kept
from evalsuite.stats.paired import difference_interval, item_mean, pair

HEADLINES = {"mmlu": "mmlu/acc", "legal": "legal/balanced_acc"}


def _diff(data: dict, variant: str, task: str, baseline: str) -> str:
    """Headline with its n and, off the baseline, the paired difference in points [95%], weighed by
    the headline metric's strata."""
    rows, base = data[variant].get(task), data.get(baseline, {}).get(task)
    if not rows:
        return "-"
    strata = meaning_of_name(HEADLINES[task])["strata"]
    head = f"{item_mean(rows, strata):.3f}"
    if variant == baseline or not base:
        return f"{head} (n={len(rows):,})"
    p = pair(base, rows, strata)
    lo, hi, _ = difference_interval(p, 0.95)
    d = p.means()[1] - p.means()[0]
    return f"{head} {100 * d:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}] (n={p.n:,})"


def _found(rows: dict | None, lengths: list[int]) -> str:
    """Items right / items recorded at each length, joined by ' / '."""
    if not rows:
        return "-"
    cells = []
    for n in lengths:
        at = [r["value"] for r in rows.values() if r.get("extra", {}).get("length") == n]
        cells.append(f"{sum(v >= 1 for v in at)}/{len(at)}" if at else "-")
    return " / ".join(cells)


def _latency(rows: dict | None, lengths: list[str], full: dict[str, int]) -> list[str]:
    """Median TTFT and ITL at each of `lengths` (prompt tokens), one cell each; a median of fewer
    requests than the fullest variant's at that length (a cut run) says its n."""
    out = []
    for key, digits in (("ttft_ms", 0), ("itl_ms", 2)):
        cells = []
        for n in lengths:
            at = [r["extra"][key] for r in (rows or {}).values() if r["group"] == n and r["extra"].get(key) is not None]
            short = f" (n={len(at)})" if 0 < len(at) < full.get(n, 0) else ""
            cells.append(f"{np.median(at):,.{digits}f}{short}" if at else "-")
        out.append(" / ".join(cells) if rows else "-")
    return out


def _lengths(data: dict, task: str) -> list[int]:
    """Every context length any variant recorded for a task, ascending."""
    return sorted({r["extra"]["length"] for tasks in data.values() for r in (tasks.get(task) or {}).values()
                   if r.get("extra", {}).get("length") is not None})


def _header(name: str, lengths: list[int]) -> str:
    return f"{name} " + " / ".join(f"{n // 1024}K" for n in lengths) if lengths else name


_LONG_TASKS = ("needle", "needle_multikey", "legal_long")
_LONG_NAMES = {"needle": "needle", "needle_multikey": "multi-key", "legal_long": "legal_long"}


def glance(short: Path, long: Path, latency: Path, baseline: str) -> None:
    """One row per variant: accuracy to 32K with paired differences, the YaRN grid's found/n, the
    engine's weights and KV tokens (16 GiB pool), and TTFT/ITL medians alone on the card. The
    lengths of each column are the ones the kept records hold."""
    s, y, lat = (read_kept(d) if d.is_dir() else {} for d in (short, long, latency))
    # the two longest prompts of the latency pass: at 1K every variant is fixed per-step cost
    lat_lengths = sorted({r["group"] for t in lat.values() for r in t.get("latency", {}).values()}, key=int)[-2:]
    full = {n: max(sum(r["group"] == n for r in t.get("latency", {}).values()) for t in lat.values())
            for n in lat_lengths}
    grids = [(s, t, _lengths(s, t), _LONG_NAMES[t]) for t in _LONG_TASKS]
    grids += [(y, t, _lengths(y, t), "YaRN " + _LONG_NAMES[t]) for t in _LONG_TASKS]
    heads = ["variant", "MMLU, diff pt [95%]", "CUAD bal. acc., diff pt [95%]",
             *(_header(name, lens) for _, _, lens, name in grids),
             "weights GiB", "KV tokens in 16 GiB",
             *(f"{k} ms " + " / ".join(f"{int(n) // 1000}K" for n in lat_lengths) for k in ("TTFT", "ITL"))]
    print("| " + " | ".join(heads) + " |")
    print("|" + "---|" * len(heads))
    for v in sorted(set(s) | set(y), key=lambda v: (v != baseline, v)):
        eng = {}
        for dest in (short, long):
            if (dest / v / "result.json").is_file():
                eng = json.loads((dest / v / "result.json").read_text()).get("engine") or {}
                break
        cells = [_diff(s, v, "mmlu", baseline) if v in s else "-", _diff(s, v, "legal", baseline) if v in s else "-",
                 *(_found(data.get(v, {}).get(t), lens) for data, t, lens, _ in grids),
                 f"{eng['weights_gib']:.2f}" if eng.get("weights_gib") else "-",
                 f"{eng['kv_cache_tokens']:,}" if eng.get("kv_cache_tokens") else "-",
                 *_latency(lat.get(v, {}).get("latency"), lat_lengths, full)]
        print(f"| {v} | " + " | ".join(cells) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("glance")
    g.add_argument("short", type=Path, help="kept scores of the 32K config")
    g.add_argument("long", type=Path, help="kept scores of the YaRN 128K config")
    g.add_argument("latency", type=Path, help="kept records of the latency config")
    g.add_argument("--baseline", default="bf16")
    a = ap.parse_args()
    try:
        glance(a.short, a.long, a.latency, a.baseline)
    except ConfigError as e:  # bad input: one line, exit 2, as the CLI does
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
