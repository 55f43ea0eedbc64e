"""The gate as JSON (`gate --format json`, `--json FILE`): every check with its figures, each
candidate's verdict and the exit code with its reason, for CI scripts. The schema is documented in
docs/statistics.md ("The gate's JSON"); `schema_version` changes where a field changes meaning."""

from __future__ import annotations

import json
import math

from evalsuite.core.shared import shared_text
from evalsuite.verdict.checks import Check
from evalsuite.verdict.gate import GateReport
from evalsuite.report.gate_view import verdict_line

SCHEMA_VERSION = 1
FIELDS = ("candidate", "rule", "metric", "status", "baseline", "value", "value_unit", "change", "unit", "limit", "low",
          "high", "n", "p", "p_adj", "p_worse", "p_worse_adj", "significant", "method", "pairs", "mark", "evidence",
          "insufficient", "resolvable", "needed", "changed", "noise", "detail")


def _clean(v):
    """JSON has no NaN: a figure that is not a number is null."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


def check_dict(c: Check) -> dict:
    raw = {k: getattr(c, k) for k in FIELDS}
    out = {k: _clean(v) for k, v in raw.items()}
    out["sequential"] = "confidence sequence" in (c.method or "")
    return out


def exit_reason(report: GateReport) -> str:
    """The exit code in one line: which candidates set it, and why."""
    judged = report.judged()
    if not judged:
        return "nothing judged"
    code = report.exit_code
    if code == 0:
        return f"every candidate passed ({', '.join(judged)})"
    word = {1: "failed", 3: "inconclusive"}[code]
    named = [f"{cand}: {verdict_line(report, cand)[1]}" for cand, v in judged.items() if v == word]
    return f"{word}: " + "; ".join(named)


def to_json(report: GateReport) -> str:
    r = report.rules
    body = {
        "schema_version": SCHEMA_VERSION,
        "baseline": report.baseline,
        "rules": report.rules_path,
        "decision": r.decision,
        "confidence": r.confidence,
        "alpha": round(r.alpha, 12),
        "exit_code": report.exit_code,
        "exit_reason": exit_reason(report),
        "candidates": [{"name": cand, "verdict": "control" if cand in report.controls else report.verdict(cand),
                        "control": cand in report.controls, "why": verdict_line(report, cand)[1],
                        "redefined": report.redefined.get(cand, {})}
                       for cand in report.candidates()],
        "checks": [check_dict(c) for c in report.checks],
    }
    return shared_text(json.dumps(body, indent=2)) + "\n"  # a reason may name a file: never this machine's path
