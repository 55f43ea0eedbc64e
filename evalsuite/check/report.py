"""The `evalsuite check` report: one Markdown table row per check, claims quoted below; the same as JSON."""

from __future__ import annotations

import json
import math
from typing import Any

from evalsuite.check.evaluate import CheckResult, ClaimResult
from evalsuite.check.evaluate import number as fmt
from evalsuite.check.runs import Run, dump
from evalsuite.check.schema import ClaimsFile

ICON = {"held": "✅", "not held": "❌", "not measurable": "➖"}


def counts(results: list[ClaimResult]) -> dict[str, int]:
    return {k: sum(r.verdict == k for r in results) for k in ICON}


def _how(c: CheckResult) -> str:
    if not c.sides:
        return ""
    return " → ".join(f"{s.label} `{s.metric}` = {fmt(s.value)}" for s in c.sides)


def _row(claim_id: str, c: CheckResult) -> str:
    verdict = f"{ICON[c.verdict]} {c.verdict}" + (" (info)" if c.informational else "")
    iv = f"{fmt(c.interval.low, c.unit)} .. {fmt(c.interval.high, c.unit)}" if c.interval else "-"
    detail = "; ".join(x for x in (_how(c), c.interval.method if c.interval else "", c.detail) if x)
    return (f"| {claim_id} | {verdict} | {c.what} | {fmt(c.measured, c.unit)} | {c.claimed} | {iv} | "
            f"{detail.replace('|', '/')} |")


def to_markdown(results: list[ClaimResult], spec: ClaimsFile, claims_path: str, runs: list[Run]) -> str:
    n = counts(results)
    head = " · ".join(f"{v} {k}" for k, v in n.items())
    how = (f"accuracy decided on its {spec.confidence:.0%} interval" if spec.decide_on == "interval"
           else "decided on the point estimate")
    given = ", ".join(f"`{r.run_id}`" for r in runs) or "none"
    lines = [f"## evalsuite check: {head}", "", f"{spec.title or 'Claims'} (`{claims_path}`) · runs: {given} · {how}", "",
             "| claim | verdict | check | measured | claimed | interval | how / why |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        if not r.checks:
            lines.append(f"| {r.claim.id} | {ICON[r.verdict]} {r.verdict} | - | - | - | - | {r.claim.why} |")
        lines += [_row(r.claim.id, c) for c in r.checks]
    lines += ["", "### The claims", ""]
    for r in results:
        lines.append(f"- **{r.claim.id}** {ICON[r.verdict]} {r.verdict} — “{r.claim.text}” ({r.claim.where})")
        notes = [r.claim.note] + [f"{c.what}: {c.note}" for c in r.checks if c.note]
        lines += [f"  - {x.strip()}" for x in notes if x]
    return "\n".join(lines) + "\n"


def _check_json(c: CheckResult) -> dict[str, Any]:
    return {"what": c.what, "verdict": c.verdict, "informational": c.informational, "source": c.source,
            "claimed": c.claimed, "measured": c.measured, "unit": c.unit,
            "interval": None if c.interval is None else {"low": c.interval.low, "high": c.interval.high,
                                                         "method": c.interval.method, "n": c.interval.n,
                                                         "p_value": c.interval.p_value},
            "sides": [{"label": s.label, "metric": s.metric, "value": s.value} for s in c.sides],
            "detail": c.detail, "note": c.note}


def to_json(results: list[ClaimResult], spec: ClaimsFile, claims_path: str, runs: list[Run]) -> str:
    payload = {"claims_file": claims_path, "title": spec.title, "confidence": spec.confidence,
               "decide_on": spec.decide_on, "runs": dump(runs), "summary": counts(results),
               "claims": [{"id": r.claim.id, "text": r.claim.text, "where": r.claim.where, "note": r.claim.note,
                           "verdict": r.verdict, "why": r.claim.why,
                           "checks": [_check_json(c) for c in r.checks]} for r in results]}
    return json.dumps(_finite(payload), indent=2, allow_nan=False) + "\n"


def _finite(o: Any) -> Any:
    """JSON has no NaN or infinity: they become null."""
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, list):
        return [_finite(v) for v in o]
    return o
