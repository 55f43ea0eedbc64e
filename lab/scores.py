"""Two things the H200 results pages show that `evalsuite compare` does not print.

glance: per variant, MMLU and CUAD with paired differences (the strata and the paired test of
evalsuite.stats, as compare takes them), the found/n of every long-task length, the engine's weights
and KV tokens, and TTFT/ITL medians alone on the card, from kept per-item scores (`evalsuite export`,
`evalsuite import`, `evalsuite results fetch PAGE` are the product's).
effective: per candidate, the effective context length, read from the gate's own per-length checks
(`evalsuite gate --json`), so that it is the gate's decision and no second statistics path.

    evalsuite results fetch h200-2026-12-01-qwen2.5-coder-1.5b
    python lab/scores.py glance SHORT_KEPT LONG_KEPT LATENCY_KEPT [--baseline bf16]
    python lab/scores.py effective GATE_JSON... [--metric ruler/score] [--into PAGE]
"""

from __future__ import annotations

import argparse
import json
import re
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


_AT_LENGTH = re.compile(r"/len(\d+)$")


def _reading(check: dict | None) -> tuple[bool, str]:
    """Whether a per-length check shows the candidate within its limit, and its cell: the drop's
    upper bound, with why where it is not evidence of being within."""
    if check is None:
        return False, "not measured"
    fmt = lambda x: f"{x:+.1f}" if x is not None else "-"  # noqa: E731
    if check["status"] == "pass" and check.get("evidence", True):
        return True, fmt(check["high"])
    if check["status"] == "fail":
        if check.get("low") is not None and check["low"] > check["limit"]:
            return False, f"beyond the limit (lower bound {fmt(check['low'])})"
        return False, f"{fmt(check['high'])} (not shown within)"
    if check["status"] == "warn":
        return False, f"insufficient n ({check['n']} items)"
    return False, check.get("mark") or check["status"]  # at chance, at ceiling: no evidence either way


def effective(gates: list[Path], metric: str = "ruler/score") -> list[str]:
    """One line per candidate: the longest length up to which the gate shows every length's `metric`
    within its limit of the baseline's (none where the shortest is not), then each length's reading.
    A length with no check for a candidate (a gate it is not in, or no items) is 'not measured'."""
    at: dict[str, dict[int, dict]] = {}
    lengths, limits = set(), set()
    for path in gates:
        data = json.loads(path.read_text())
        for c in data["checks"]:
            m = _AT_LENGTH.search(c["metric"])
            if m and c["metric"][: m.start()] == metric:
                lengths.add(int(m.group(1)))
                limits.add(f"{c['limit']:g} {c['unit']}")
                at.setdefault(c["candidate"], {})[int(m.group(1))] = c
    if not lengths:
        raise ConfigError(f"{', '.join(map(str, gates))}: no per-length check of {metric} (metric "
                          f"{metric}/len<N>); allowed: gate JSON files of a task scored per length")
    lines = [f"Effective context length on `{metric}`: the longest length up to which the gate shows every "
             f"length within {' / '.join(sorted(limits))} of the baseline's; then, per length, the drop's "
             "one-sided 95% upper bound:", ""]
    for name, checks in at.items():
        readings = [(n, *_reading(checks.get(n))) for n in sorted(lengths)]
        reach = None
        for n, ok, _ in readings:
            if not ok:
                break
            reach = n
        head = f"{reach // 1024}K" if reach else "none"
        lines.append(f"- `{name}`: **{head}**; " + "; ".join(f"{n // 1024}K {text}" for n, _, text in readings))
    return lines


BLOCK = ("<!-- effective: written by `python lab/scores.py effective --into` -->", "<!-- /effective -->")


def write_into(page: Path, lines: list[str]) -> None:
    """Replace the text between the page's BLOCK markers with `lines`, so that the page's figures are
    the script's and a rerun shows a change as a diff."""
    text = page.read_text()
    start, end = text.find(BLOCK[0]), text.find(BLOCK[1])
    if start < 0 or end < start:
        raise ConfigError(f"{page}: no block {BLOCK[0]} ... {BLOCK[1]} to write the effective lengths into; "
                          "allowed: a page holding both markers, in that order")
    page.write_text(text[: start + len(BLOCK[0])] + "\n" + "\n".join(lines) + "\n" + text[end:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("glance")
    g.add_argument("short", type=Path, help="kept scores of the 32K config")
    g.add_argument("long", type=Path, help="kept scores of the YaRN 128K config")
    g.add_argument("latency", type=Path, help="kept records of the latency config")
    g.add_argument("--baseline", default="bf16")
    e = sub.add_parser("effective")
    e.add_argument("gates", type=Path, nargs="+", help="`evalsuite gate --json` files, one per length config")
    e.add_argument("--metric", default="ruler/score", help="the score judged per length (METRIC/len<N>)")
    e.add_argument("--into", type=Path, help="a page whose effective block the lines replace, instead of printing")
    a = ap.parse_args()
    try:
        if a.cmd == "effective" and a.into:
            write_into(a.into, effective(a.gates, a.metric))
        elif a.cmd == "effective":
            print("\n".join(effective(a.gates, a.metric)))
        else:
            glance(a.short, a.long, a.latency, a.baseline)
    except ConfigError as e:  # bad input: one line, exit 2, as the CLI does
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
