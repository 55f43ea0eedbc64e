"""What `gate` prints on a terminal: a line per candidate, then the checks that need a look.

Each candidate gets its verdict in plain words and the check that decided it: the most telling
failure, the check too small to decide, or (passed) the one closest to its limit. Then a table of the
checks that failed or could not be decided, at the terminal's width (a block per candidate where the
table does not fit), and a line naming the method and the full report (Markdown, `--format
markdown`). Bounds are the one-sided ones the gate decides with, named as such: `compare` prints a
two-sided 95% interval of the same change, which is wider.
"""

from __future__ import annotations

import math
from pathlib import Path

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from evalsuite.verdict.checks import MISSING, NO_SHARED, Check
from evalsuite.verdict.gate import GateReport, failure_kind
from evalsuite.report.gate_report import METHOD
from evalsuite.report.names import redefined_note
from evalsuite.report.terminal import Block, Blocks, aligned, fits
from evalsuite.stats.significance import resolves

WORDS = {"passed": ("PASSED", "green"), "failed": ("FAILED", "bold red"), "inconclusive": ("INCONCLUSIVE", "yellow"),
         "skipped": ("SKIPPED", "dim"), "control": ("CONTROL", "cyan")}
MOST = 8  # open checks shown per candidate; the Markdown report has them all
WHY_WIDTH = 32  # the table's last column wraps under itself past this


def _moved(c: Check, rules) -> str:
    """`dropped 7.0 pt`, `rose 0.7 pt`, `grew 12.0%`: the change in the direction its rule limits."""
    if c.change is None or math.isnan(c.change):
        return "not measured"
    size = f"{abs(c.change):.1f}{' pt' if c.unit == 'pt' else '%'}"
    rule = rules.rule_for(c.metric)
    growth = rule is not None and rule.spec.growth
    worse, better = ("grew", "shrank") if growth else ("dropped", "rose")
    return f"{worse if c.change >= 0 else better} {size}"


def bound(c: Check, rules) -> tuple[str, str] | None:
    """The one-sided bound that decided the check: (`<= 0.8 pt` or `>= 6.4 pt`, `95% upper bound`).
    A failure shown beyond its limit is told by its lower bound, anything else under `upper_bound` by
    its upper one; `lower_bound` decides by the lower, `point` by no bound at all."""
    if c.low is None or c.high is None or rules.decision == "point":
        return None
    lower = rules.decision == "lower_bound" or (c.status == "fail" and failure_kind(c) == "beyond the limit")
    conf = "confidence sequence's" if c.outside else f"{rules.confidence:.0%}"
    return (f">= {c.low:.1f} pt", f"{conf} lower bound") if lower else (f"<= {c.high:.1f} pt", f"{conf} upper bound")


def _limit(c: Check) -> str:
    return "-" if c.limit is None else f"{c.limit:g}{'%' if c.unit == '%' else ' pt'}"


def says(c: Check, rules) -> str:
    """One check in a few words: `mmlu/acc dropped 7.0 pt (>= 6.4 pt, 95% lower bound), limit 2`."""
    if c.rule == "status":
        return _not_run(c)
    undecided = _undecided(c, ", limit " + f"{c.limit:g}" if c.limit is not None else "")
    if undecided:
        return f"{c.metric}: {undecided}"
    if c.status == "fail" and failure_kind(c) == "not measured":
        return f"{c.metric} not measured" + ("" if c.detail == MISSING else f": {c.detail.removeprefix(MISSING + ' ')}")
    limit = f", limit {c.limit:g}" if c.limit is not None else ""
    b = bound(c, rules)
    if b and c.status == "pass" and rules.decision == "upper_bound":
        return f"{c.metric} drop {b[0]} ({b[1]}){limit}"
    return f"{c.metric} {_moved(c, rules)}" + (f" ({b[0]}, {b[1]})" if b else "") + limit


def _not_run(c: Check) -> str:
    """A variant that did not run: its reason (`skipped: no W4A16 kernel`), the word said once."""
    status, _, reason = c.detail.partition(": ")
    return reason if c.status == "skip" else f"variant {status}: {reason}"


def _undecided(c: Check, limit: str = "") -> str | None:
    """Why a check that neither passed nor failed could not decide: too few items (`35 items resolve
    9.9 pt{limit} (about 52 needed)`), or a baseline at chance; None for a decided one."""
    if c.status == "uninformative":
        return "baseline at chance, so no evidence either way"
    if not too_few(c):
        return None
    settled = "" if c.status == "warn" else f"; {c.status}ed as insufficient_n says"
    # items that do not stand for the metric (other items, whole groups missing): more of them is no cure
    unrepresentative = c.pairs.startswith(NO_SHARED) or c.unmeasured[0] > 0
    if c.n and c.resolvable is not None and c.limit is not None and c.resolvable > c.limit and not unrepresentative:
        need = f" (about {c.needed:,} needed)" if c.needed else ""
        return f"{resolves(c.n, c.resolvable / 100)}{limit}{need}{settled}"
    return (c.insufficient or c.detail.removeprefix("insufficient n: ").split("; ")[0]) + settled


def too_few(c: Check) -> bool:
    """Too few items to decide: a warning, or a pass or failure only because `insufficient_n` says so
    (a drop shown beyond the limit at that n is a failure on evidence)."""
    small = c.insufficient is not None or c.detail.startswith("insufficient n:")
    return small and c.status in ("warn", "pass", "fail") and "shown to exceed" not in c.detail


def open_checks(report: GateReport, candidate: str) -> list[Check]:
    """A candidate's checks that failed or could not be decided, failures first (most telling first)."""
    undecided = [c for c in report.checks if c.candidate == candidate and
                 (c.status in ("warn", "uninformative") or (c.status == "pass" and too_few(c)))]
    return sorted(report.failing(candidate), key=too_few) + sorted(undecided, key=lambda c: c.status == "uninformative")


def verdict_line(report: GateReport, candidate: str) -> tuple[str, str]:
    """(verdict word, the check that decided it) for one candidate."""
    rules, control = report.rules, candidate in report.controls
    word = "control" if control else report.verdict(candidate)
    mine = [c for c in report.checks if c.candidate == candidate]
    opened = open_checks(report, candidate)
    if control:
        shares = report.changed_shares(candidate)
        metric = next((m for m in shares if m.count("/") == 1), None)
        changed = f": answers changed on {metric} {shares[metric][0] / shares[metric][1]:.1%}" if metric else ""
        return word, f"a noise reference, never a verdict{changed}"
    if word == "passed":
        worst = _closest([c for c in mine if not too_few(c)], rules)
        through = sum(c.status == "pass" and too_few(c) for c in mine)
        within = f"no check failed, {through} let through with too few items" if through else "every check within its limit"
        later = f"; {len(opened)} undecided, below" if opened else ""
        return word, within + (f"; worst: {says(worst, rules)}" if worst else "") + later
    if word == "skipped":
        return word, says(mine[0], rules)
    if word == "inconclusive" and not any(c.status == "warn" and c.unit == "pt" for c in mine):
        first = next((c for c in opened if c.unit == "pt"), None)
        return word, "no accuracy check passed on evidence" + (f": {says(first, rules)}" if first else "")
    decided = next((c for c in opened if word != "inconclusive" or (c.status == "warn" and c.unit == "pt")))
    same = sum(c.status == decided.status for c in opened) - 1
    more = f"; {same} more {'failed' if decided.status == 'fail' else 'undecided'}" if same else ""
    return word, says(decided, rules) + more


def _closest(checks: list[Check], rules) -> Check | None:
    """The passed check nearest its limit: the accuracy bound, else the relative change, over the limit."""
    def share(c: Check) -> float:
        b = bound(c, rules)
        figure = c.high if b and rules.decision == "upper_bound" else c.change
        return -math.inf if figure is None or not c.limit else figure / c.limit

    passed = [c for c in checks if c.status == "pass" and c.limit]
    accuracy = [c for c in passed if c.unit == "pt"]
    return max(accuracy or passed, key=share, default=None)


def _why(c: Check) -> str:
    """The table's reason, in fewer words than the candidate's line."""
    if c.status == "uninformative":
        return "baseline at chance"
    if too_few(c):
        return f"too few items: {_undecided(c)}"
    kind = failure_kind(c)
    if c.rule == "status":
        return _not_run(c)
    if kind == "not measured":
        return kind if c.detail == MISSING else f"{kind}: {c.detail.removeprefix(MISSING + ' ')}"
    return {"beyond the limit": "shown beyond the limit", "not shown within": "not shown within the limit"}.get(kind, kind)


def _cells(c: Check, rules) -> list[str]:
    """check, change, bound, limit, why: a row of the open checks' table."""
    b = bound(c, rules)
    drop = "-" if c.change is None or math.isnan(c.change) else _moved(c, rules)
    return [c.metric, drop, b[0].removesuffix(" pt") if b else "-", _limit(c), _why(c)]


HEADERS = ["check", "change", "bound", "limit", "why"]


def _rows(report: GateReport) -> dict[str, list[list[str]]]:
    """Each candidate's open checks as cells, at most MOST of them and a line for the rest."""
    out = {}
    for cand in report.candidates():
        found = open_checks(report, cand)
        rows = [_cells(c, report.rules) for c in found[:MOST]]
        if len(found) > MOST:
            rows.append([f"+ {len(found) - MOST} more", "", "", "", ""])
        if rows:
            out[cand] = rows
    return out


def open_table(report: GateReport, width: int) -> RenderableType | None:
    """The checks that failed or could not be decided: a table where it fits `width`, else a block per
    candidate (its name on a line of its own, never cut)."""
    rows = _rows(report)
    if not rows:
        return None
    conf = f"{report.rules.confidence:.0%}"
    title = f"Checks that failed or could not be decided (bound: the one-sided {conf} bound the gate decides with)"
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("candidate", no_wrap=True)
    for h in HEADERS:
        table.add_column(h, no_wrap=h != "why", overflow="fold")
    for cand, cells in rows.items():
        for row in cells:
            table.add_row(cand, *row)
    if not fits(table, width):
        table.columns[-1].max_width = WHY_WIDTH  # the reason wraps under itself before the table gives way
    if fits(table, width):
        return Group(Text(title), table)
    blocks = [Block(Text(cand, style="bold"), cells) for cand, cells in rows.items()]
    return Group(Text(title), Blocks(HEADERS, blocks).render(width))


def terminal_view(report: GateReport, width: int, markdown: Path | None = None) -> list[RenderableType]:
    """A line per candidate, the open checks, and where the method and the full report are."""
    lines = []
    for cand in report.candidates():
        word, why = verdict_line(report, cand)
        text, style = WORDS[word]
        lines.append([Text(cand, style="bold"), Text(text, style=style), why])
    full = f"{markdown} (Markdown)" if markdown else "--format markdown (or --markdown FILE)"
    parts: list[RenderableType] = [aligned(lines)]
    table = open_table(report, width)
    if table is not None:
        parts += [Text(""), table]
    if (note := redefined_note(report.redefined)) is not None:
        parts += [Text(""), Text(note + ".", style="yellow")]
    parts += [Text(""), Text(f"Baseline {report.baseline}, rules: {report.rules_path}. Method: {METHOD}. "
                             f"Every check: {full}.", style="dim")]
    return parts
