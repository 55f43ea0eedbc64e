"""What the gate says: a Markdown report (PR comment), JUnit XML (CI), and the power plan."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections import defaultdict

from evalsuite.core.shared import shared_text
from evalsuite.core.types import task_of
from evalsuite.verdict.checks import Check
from evalsuite.verdict.gate import GateReport, failure_kind
from evalsuite.verdict.rules import Rules, decision_rule, resolution
from evalsuite.report.compare import SEQUENCE_NOTE
from evalsuite.report.names import REDEFINED, fmt_value, loaded_note, redefined_note
from evalsuite.verdict.compare import is_latency
from evalsuite.stats.significance import needed_items, resolves

METHOD = "docs/statistics.md"  # the method in full, one link away from every report
ICON = {"pass": "✅", "fail": "❌", "warn": "⚠️", "uninformative": "❔"}
VERDICT_ICON = {"passed": "✅", "failed": "❌", "inconclusive": "❔", "skipped": "⏭️"}


def _change(v: float | None, unit: str) -> str:
    if v is None or math.isnan(v):
        return "-"
    return f"{v:+.2f} pt" if unit == "pt" else f"{v:+.1f}%"


def _p(v: float | None) -> str:
    if v is None or math.isnan(v):
        return "-"
    return f"{v:.2g}" if v >= 1e-4 else "<1e-4"


def _header(report: GateReport) -> list[str]:
    r = report.rules
    verdicts = report.judged()
    counts = {v: sum(x == v for x in verdicts.values()) for v in ("passed", "failed", "inconclusive")}
    word = {0: "passed", 1: "failed", 3: "inconclusive"}[report.exit_code]
    title = f"## {VERDICT_ICON[word]} evalsuite gate {word}: " + ", ".join(f"{n} {v}" for v, n in counts.items() if n)
    if report.controls:
        title += f" ({len(report.controls)} control(s): noise references, not counted)"
    return [title, "",
            f"Baseline `{report.baseline}` · rules `{report.rules_path}` · decision `{r.decision}` at "
            f"{r.confidence:.0%} one-sided confidence (how to read this: the end of this report, and {METHOD}).", ""]


def _method(report: GateReport) -> list[str]:
    """How to read the tables: the decision, its adjustments and the columns; said last, so that the
    verdict opens the report."""
    r = report.rules
    adjust = {"none": "each check's own p-value (intersection-union test: a candidate passes only if every check "
                      "passes, so no multiplicity adjustment is needed to keep its false-pass rate at alpha)",
              "holm": "Holm-adjusted p-values over each candidate's checks (more conservative than the "
                      "intersection-union test needs)",
              "bh": "Benjamini-Hochberg-adjusted p-values over each candidate's checks"}[r.adjust]
    findings = {"holm": "Holm-adjusted (family-wise error)", "bh": "Benjamini-Hochberg-adjusted (false discovery rate)",
                "none": "unadjusted"}[r.findings]
    return ["", "### How to read this", "",
            f"**Verdict**: {adjust}. **Significant drop** flags (claims "
            f"that a metric got worse) are {findings} over each candidate's checks. Column `worse by`: the change "
            f"in the direction the rule limits, negative when the candidate is better: for accuracy the drop in "
            f"points (baseline - candidate) on items paired by sample id, each row naming its method; for memory "
            f"and latency the growth in %, for KV capacity the drop in %. Column `{r.confidence:.0%} bounds`: the "
            f"one-sided lower and upper bounds of the drop, each at {r.confidence:.0%} (`compare` shows a two-sided "
            f"95% interval of the same change). Checks with fewer than {r.min_n} pairs "
            f"(or a stratum under {r.min_stratum_n}), or whose limit this n cannot resolve, say `insufficient n` "
            f"and count as `{r.insufficient_n}`; a check whose baseline is within its limit of chance is "
            f"`uninformative` (❔); a baseline whose 95% lower bound is ≥ {r.ceiling:g} is `at ceiling` (a pass "
            f"there shows no collapse, not no loss). A candidate with no failure is `inconclusive` (exit 3) while "
            f"an accuracy check warns of too few items, or when none passed on evidence. Column p: p(drop ≥ limit) for an `upper_bound` check (small: "
            f"shown within the limit); p(drop ≤ limit) for `lower_bound`, `point` and insufficient-n checks "
            f"(small: shown to exceed the limit). The method, with its references: {METHOD}."]


def _row(c: Check, redefined: bool = False) -> str:
    limit = "-" if c.limit is None else f"{c.limit:g}{'%' if c.unit == '%' else ' pt'}"
    bounds = "-" if c.low is None else f"{c.low:+.2f}..{c.high:+.2f}" + (" (confidence sequence§)" if c.outside else "")
    metric = f"`{c.metric}`" + (REDEFINED if redefined else "") + (f" ({c.mark})" if c.mark else "")
    return (f"| {ICON[c.status]} | `{c.candidate}` | {c.rule} | {metric} | {fmt_value(c.value_unit, c.baseline)} | "
            f"{fmt_value(c.value_unit, c.value)} | {_change(c.change, c.unit)} | {bounds} | {limit} | {_p(c.p)} | "
            f"{_p(c.p_adj)} | {c.detail.replace('|', '/')} |")


def _resolution(report: GateReport) -> list[str]:
    """Checks whose limit is finer than the run's n resolves (at its observed spread)."""
    r = report.rules
    coarse = [c for c in report.checks if c.resolvable is not None and c.limit is not None and c.limit < c.resolvable]
    if not coarse:
        return []
    lines = ["", f"### ⚠️ Limits finer than these runs resolve ({r.power:.0%} power, {r.confidence:.0%} one-sided, "
                 f"at {r.discordance:.0%} of answers changing, as `validate` and `gate --plan` plan them)", "",
             "| candidate | metric | n | limit | resolvable | needs about | answers changed |", "|---|---|---|---|---|---|---|"]
    for c in coarse:
        need = "-" if c.needed is None else f"{c.needed:,} items"
        res = f"{c.resolvable:.1f} pt" if c.resolvable < 100 else "none at this n"
        changed = "-" if c.changed is None or not c.n else f"{c.changed:,} of {c.n:,}"
        lines.append(f"| `{c.candidate}` | `{c.metric}` | {c.n} | {c.limit:g} pt | {res} | {need} | {changed} |")
    return lines + ["", f"Answers changed: this candidate's paired items whose answer differs from the baseline's; "
                        f"where that share is above {r.discordance:.0%}, more items than planned are needed."]


def _by_candidate(checks: list[Check]) -> dict[str, list[Check]]:
    out: dict[str, list[Check]] = defaultdict(list)
    for c in checks:
        out[c.candidate].append(c)
    return out


def _summary(report: GateReport) -> list[str]:
    """One row per candidate, so that a verdict over many checks reads at a glance: a failure because
    a drop is shown differs from one because a task has not run yet."""
    kinds = ["beyond the limit", "not shown within", "not measured"]
    if any(c.rule == "status" and c.status == "fail" for c in report.checks):
        kinds.append("variant not usable")
    lines = ["| candidate | verdict | passed | failed: " + " | failed: ".join(kinds) +
             " | insufficient n | uninformative | at ceiling |", "|---|---|---|" + "---|" * len(kinds) + "---|---|---|"]
    for cand, checks in _by_candidate(report.checks).items():
        failed = [failure_kind(c) for c in checks if c.status == "fail"]
        verdict = report.verdict(cand)
        control = cand in report.controls
        shown = "ℹ️ noise reference" if control else f"{VERDICT_ICON[verdict]} {verdict}"
        counts = " | ".join(str(failed.count(k)) for k in kinds)
        lines.append(f"| `{cand}`{' (control)' if control else ''} | {shown} | {sum(c.status == 'pass' for c in checks)} | "
                     f"{counts} | {sum(c.insufficient is not None and c.status != 'fail' for c in checks)} | "
                     f"{sum(c.status == 'uninformative' for c in checks)} | {sum(c.mark == 'at ceiling' for c in checks)} |")
    return lines + [""] + _noise(report)


def _noise(report: GateReport) -> list[str]:
    """Changed answers per task headline, each candidate beside the controls: the engine's noise floor."""
    if not report.controls:
        return []
    shares = {cand: report.changed_shares(cand) for cand in report.candidates()}
    by_task: dict[str, str] = {}  # one column a task: its metrics share the same items and answers
    for m in dict.fromkeys(m for s in shares.values() for m in s):
        if m.count("/") == 1:
            by_task.setdefault(task_of(m), m)
    metrics = list(by_task.values())
    if not metrics:
        return []
    lines = [f"Noise floor: answers changed against the baseline (controls: {', '.join(f'`{c}`' for c in report.controls)})",
             "", "| candidate | " + " | ".join(f"`{m}`" for m in metrics) + " |", "|---|" + "---|" * len(metrics)]
    for cand, found in shares.items():
        cells = [f"{found[m][0]:,}/{found[m][1]:,} ({found[m][0] / found[m][1]:.2%})" if m in found else "-" for m in metrics]
        lines.append(f"| `{cand}`{' (control)' if cand in report.controls else ''} | " + " | ".join(cells) + " |")
    return lines + [""]


def _loaded(report: GateReport) -> list[str]:
    """The note on latency checks whose baseline or candidate was timed on a loaded host."""
    timed = {c.candidate for c in report.checks if is_latency(c.metric) and c.baseline is not None}
    if not timed:
        return []
    note = loaded_note({label: report.loads.get(label) for label in [report.baseline, *timed]})
    return ["", note] if note else []


def to_markdown(report: GateReport) -> str:
    """A PR comment: verdict, a row per candidate, failures first, then warnings and passes; skipped
    checks folded into one list."""
    conf = f"{report.rules.confidence:.0%}"
    adj = {"holm": "p Holm", "bh": "p BH"}.get(report.rules.adjust, "p used")
    lines = _header(report) + _summary(report) + [
        f"| | candidate | rule | metric | baseline | candidate value | worse by | {conf} bounds | limit | p | {adj} "
        "| detail |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    order = {"fail": 0, "warn": 1, "uninformative": 2, "pass": 3}
    for c in sorted((c for c in report.checks if c.status != "skip"), key=lambda c: order[c.status]):
        lines.append(_row(c, task_of(c.metric) in report.redefined.get(c.candidate, {})))
    if any(c.outside for c in report.checks):
        lines += ["", SEQUENCE_NOTE + "."]
    lines += _resolution(report) + _loaded(report)
    if (note := redefined_note(report.redefined)) is not None:
        lines += ["", note + "."]
    skipped = [c for c in report.checks if c.status == "skip"]
    if skipped:
        lines += ["", "Not checked: " + "; ".join(_skipped(skipped, len(_by_candidate(report.checks))))]
    return shared_text("\n".join(lines + _method(report)) + "\n")  # a reason may name a file


def _skipped(checks: list[Check], n_candidates: int) -> list[str]:
    """One entry per metric and reason, naming the candidates it applies to (or "every candidate"):
    a rule naming latency figures that a run without a latency pass lacks would otherwise repeat
    them for each candidate."""
    who: dict[tuple[str, str], list[str]] = {}
    for c in checks:
        who.setdefault((c.metric, c.detail), []).append(c.candidate)
    metrics: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for (metric, why), cands in who.items():
        metrics.setdefault((why, tuple(cands)), []).append(metric)
    out = []
    for (why, cands), names in metrics.items():
        whom = "every candidate" if len(cands) == n_candidates > 1 else ", ".join(f"`{c}`" for c in cands)
        out.append(f"{', '.join(names)} for {whom} ({why})")
    return out


def to_junit(report: GateReport) -> str:
    """One testsuite per candidate variant, one testcase per rule check; a check too small to judge
    (warn) is reported as skipped with its reason, so CI dashboards show it."""
    root = ET.Element("testsuites", name="evalsuite gate", tests=str(len(report.checks)),
                      failures=str(len(report.failures())))
    for cand, checks in _by_candidate(report.checks).items():
        suite = ET.SubElement(root, "testsuite", name=f"{cand} vs {report.baseline}", tests=str(len(checks)),
                              failures=str(sum(c.status == "fail" for c in checks)),
                              skipped=str(sum(c.status in ("skip", "warn", "uninformative") for c in checks)))
        for c in checks:
            case = ET.SubElement(suite, "testcase", classname=f"evalsuite.report.gate.{cand}", name=f"{c.rule}: {c.metric}")
            if c.status == "fail":
                ET.SubElement(case, "failure", message=f"{c.metric}: {c.detail}").text = c.detail
            elif c.status in ("skip", "warn", "uninformative"):
                ET.SubElement(case, "skipped", message=c.detail)
            else:
                ET.SubElement(case, "system-out").text = c.detail
    ET.indent(root)
    return shared_text(ET.tostring(root, encoding="unicode", xml_declaration=True)) + "\n"


# ---------------------------------------------------------------- planning


def plan_text(rules: Rules, rules_path: str, n: int, discordance: float | None = None) -> str:
    """Per accuracy rule (and per-task limit): the smallest limit N paired items resolve, and the N a limit needs."""
    d = rules.discordance if discordance is None else discordance
    keys = [()] * n
    res = resolution(rules, keys, d) * 100  # `validate`'s and the gate's figure
    shown = f"{res:.2f} pt" if res < 100 else "none at this n"
    if res < 100:
        smallest = (f"the smallest drop limit a candidate with no true drop passes with {rules.power:.0%} probability "
                    f"is **{res:.2f} pt** (decision `{rules.decision}`, {rules.confidence:.0%} one-sided). "
                    f"`lower_bound` detects, with the same power, a true drop {res:.2f} pt above its limit")
    else:
        why = f"fewer than `min_n` {rules.min_n}: the gate trusts no test" if n < rules.min_n else "its bound is 100 pt or more"
        smallest = f"the gate **{resolves(n, 1.0)}** ({why})"
    lines = [f"## evalsuite gate plan: {rules_path}, n = {n:,} paired items per check", "",
             f"With {n:,} paired items, {smallest}; `point` moves by {100 / n:.2f} pt per changed item. "
             f"{decision_rule(rules)}", "",
             "| rule | metrics | limit | resolvable at n | items needed | |", "|---|---|---|---|---|---|"]
    for rule in rules.rules:
        if not rule.spec.per_item:
            continue
        limits = [("", rule.limit)] + [(f" ({t})", v) for t, v in rule.tasks.items()]
        for suffix, limit in limits:
            need = needed_items(keys, limit / 100, rules.confidence, rules.power, d) if limit > 0 else math.inf
            ok = "ok" if limit >= res else "⚠️ limit below resolution"
            lines.append(f"| {rule.label}{suffix} | `{', '.join(rule.metrics)}` | {limit:g} pt | {shown} | "
                         f"{need:,} | {ok} |")
    lines += ["", f"Assumptions: {d:.0%} of items change answer between the variants (discordance; set "
                  f"`discordance` in the rules or --discordance), half each way (no true drop); scores are 0/1 "
                  f"(for macro and balanced scores read n as the effective n, 1/sum(w_i^2), which is n for equal strata); "
                  f"normal approximation to the paired difference (Connor 1987), (z_conf + z_power) x sqrt(discordance "
                  f"/ n), floored by the exact test's upper bound with no item changed (12.5 pt at 24 items at 95%). "
                  f"`evalsuite validate` and the gate's reports give these same figures. Rules over groups (e.g. per "
                  f"context length) need n per group. Checks with fewer than {rules.min_n} pairs are `insufficient n`."]
    return "\n".join(lines) + "\n"
