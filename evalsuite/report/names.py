"""Metric names and values as reports show them: units, headline rows, formatting, each task's primary metric."""

from __future__ import annotations

import math
import re

from evalsuite.core.types import EngineStats, VariantResult
from evalsuite.stats.metrics import is_interval_bound

# Unit suffixes: a change in these reads best in percent; unitless scores read in points.
UNIT_SUFFIXES = ("_s", "_ms", "_gib", "_tokens", "_blocks", "_per_s", "_token", "_bytes", "_pct")
QUANTITY_PREFIXES = ("engine", "latency", "roofline")
ENGINE_HEADLINE = ["engine/weights_gib", "engine/required_gib", "engine/kv_cache_tokens", "engine/max_concurrency"]
LATENCY_HEADLINE = ["latency/ttft_ms_p50", "latency/itl_ms_p50"]
CONTEXT_GROUP = re.compile(r"^(?P<base>.+)/(?:len|ctx|length)(?P<n>\d+)$")


def engine_metrics(engine: EngineStats) -> dict[str, float]:
    out = {}
    for key, value in engine.model_dump().items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[f"engine/{key}"] = float(value)
    return out


def flat_metrics(result: VariantResult) -> dict[str, float]:
    """Every number a variant produced: its metrics, then its engine stats as engine/<field>."""
    out = {m.name: m.value for m in result.metrics}
    out.update(engine_metrics(result.engine))
    return out


STATISTIC = re.compile(r"_(?:p\d+|mean|median|max|min|std)$")  # ttft_ms_p50: the unit comes before the statistic


def is_unitless(name: str) -> bool:
    """Scores like mmlu/acc or needle/acc/len1024, as opposed to engine/, latency/, roofline/ or *_s,
    *_gib, *_pct, *_ms_p50 (a workload task's TTFT)."""
    parts = name.split("/")
    if parts[0] in QUANTITY_PREFIXES:
        return False
    return not STATISTIC.sub("", parts[1] if len(parts) > 1 else parts[0]).endswith(UNIT_SUFFIXES)


def fmt_value(name: str, value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if name.endswith(("_tokens", "_blocks")):
        return f"{value:,.0f}"
    if "_pct" in name.split("/")[1 if "/" in name else 0]:
        return f"{value:.0f}%"
    if is_unitless(name):
        return f"{value:.3f}"
    return f"{value:.3f}" if name.endswith("_gib") else f"{value:.4g}"


def fmt_delta(name: str, delta) -> str:
    if delta is None or (isinstance(delta, float) and math.isnan(delta)):
        return ""
    return f"{delta:+.1f} pt" if is_unitless(name) else f"{delta:+.1f}%"


def prop(v: float) -> str:
    """0.408 -> .408: three digits of a proportion, narrow enough for an 80-column table."""
    return f"{v:.3f}".lstrip("0") if v < 1 else "1.00"


def primary_metrics(results: list[VariantResult]) -> list[str]:
    """Per task, the metric that answers 'how accurate', in task order.

    Each result names them (`primary_metrics`, saved by the runner from the tasks' own choice); a
    record written before that field existed falls back to the first score each task logged.
    """
    names: list[str] = []
    for v in results:
        saved = v.primary_metrics or _first_scores(v)
        names += [n for n in saved if n not in names and is_unitless(n)]
    return names


def _first_scores(v: VariantResult) -> list[str]:
    seen: dict[str, str] = {}
    for m in v.metrics:
        if m.name.count("/") == 1 and is_unitless(m.name) and not is_interval_bound(m.name):
            seen.setdefault(m.name.split("/")[0], m.name)
    return list(seen.values())
