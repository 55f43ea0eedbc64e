"""The gate's capacity check: the capacity pass read back (evalsuite.capacity writes it) and judged.

A variant's sweeps (or searches) come from its samples/capacity.jsonl (one Level a row) and the
run's config (the levels it declared, or the grid it searched). The gate's capacity check sets two
brackets side by side, only where both were measured on one device model and a quiet host (else
"not comparable", no verdict either way): each variant's
capacity lies in [the highest level meeting the SLO, the level that broke it), so a drop is shown
beyond the limit only where even the candidate's best case is below (1 - limit) x the baseline's
worst, and within it only where the candidate's worst case reaches (1 - limit) x the baseline's
best. Levels too far apart to tell either say so, as an insufficient n does. Each level's verdict
is a point comparison of the percentile the load generator measured over its requests (as many
as that percentile needs), as the latency checks are.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError

from evalsuite.capacity.config import CapacityConfig
from evalsuite.capacity.search import search_bracket
from evalsuite.capacity.sweep import Bracket, Level, bracket
from evalsuite.capacity.task import CapacityTask
from evalsuite.core.rundir import RunDir
from evalsuite.core.types import VariantResult

TASK = CapacityTask.name
AT_SLO = ("capacity/users_at_slo/ctx", "capacity/rate_at_slo/ctx")  # the gated metrics, by prefix


@dataclass
class Sweeps:
    """One variant's capacity pass: its config, its level records, a bracket per prompt length."""

    cfg: CapacityConfig
    levels: list[Level]
    brackets: dict[int, Bracket]


def sweeps(rd: RunDir, result: VariantResult) -> Sweeps | None:
    """The variant's capacity pass as recorded; None where it has none."""
    rows = rd.load_samples(result.variant, TASK)
    raw = rd.read_config().get("capacity") if rows else None
    if not rows or not isinstance(raw, dict):
        return None
    try:
        cfg = CapacityConfig.model_validate(raw)
        levels = [Level.model_validate(r["score"]["extra"]) for r in rows]
    except (ValidationError, KeyError, TypeError):
        return None
    return Sweeps(cfg, levels, {n: brackets_of(cfg, levels, n) for n in cfg.prompt_tokens})


def brackets_of(cfg: CapacityConfig, levels: list[Level], length: int) -> Bracket:
    """One length's bracket, searched or swept as the config says."""
    return search_bracket(cfg, levels, length) if cfg.searching else bracket(levels, cfg.levels, length, cfg.mode)


NOT_COMPARABLE = "not comparable"


def comparable(base_device: str | None, b: Bracket, cand_device: str | None, c: Bracket) -> str | None:
    """Why two brackets cannot be set side by side (another device model, a loaded host); None where they can."""
    if (base_device or "") != (cand_device or ""):
        return (f"{NOT_COMPARABLE}: measured on another device ({cand_device or 'unknown'}; baseline: "
                f"{base_device or 'unknown'})")
    if b.loaded or c.loaded:
        who = " and the ".join(x for x, y in (("baseline", b), ("candidate", c)) if y.loaded)
        return f"{NOT_COMPARABLE}: the {who}'s levels were timed on a loaded host"
    return None


def is_capacity(metric: str) -> bool:
    return metric.startswith("capacity/")


def is_at_slo(metric: str) -> bool:
    """The load at the SLO of one prompt length: what the gate judges bracket against bracket."""
    return metric.startswith(AT_SLO)


def length_of(metric: str) -> int | None:
    tail = metric.rsplit("/ctx", 1)[-1]
    return int(tail) if tail.isdigit() else None


def bracket_for(rd: RunDir, result: VariantResult, metric: str) -> tuple[Sweeps, Bracket] | None:
    found = sweeps(rd, result)
    n = length_of(metric)
    if found is None or n not in found.brackets:
        return None
    return found, found.brackets[n]


def _sup(b: Bracket) -> float | None:
    """The most the capacity can be: below the level that broke it (a whole number of users below it)."""
    if b.broke_at is None:
        return None
    return b.broke_at - 1 if b.mode == "concurrency" else b.broke_at


def _workload(s: Sweeps) -> tuple:
    c = s.cfg
    return c.output_tokens, c.range_ratio, c.mode, c.burstiness if c.mode == "request_rate" else None, \
        tuple(sorted(c.slo.items()))


@dataclass
class Verdict:
    status: str  # pass | fail | skip | uninformative | insufficient
    detail: str
    change: float | None = None  # drop at the grid points, percent


def judge_brackets(base: Sweeps, b: Bracket, cand: Sweeps, c: Bracket, limit_pct: float) -> Verdict:
    """Candidate bracket against the baseline's at `limit_pct` fewer users (or requests/s) at most."""
    if _workload(base) != _workload(cand):
        return Verdict("fail", "not the same workload (output tokens, lengths' spread, arrivals or SLO differ)")
    if b.loaded or c.loaded:
        who = " and the ".join(x for x, y in (("baseline", b), ("candidate", c)) if y.loaded)
        return Verdict("skip", f"{NOT_COMPARABLE}: the {who}'s levels were timed on a loaded host ({c.text()})")
    keep = 1 - limit_pct / 100
    shown = f"baseline {b.text()}; candidate {c.text()}"
    change = (b.at_slo - c.at_slo) / b.at_slo * 100 if b.at_slo else None
    sup_b, sup_c = _sup(b), _sup(c)
    if sup_b is not None and sup_b <= 0:
        return Verdict("uninformative", f"the baseline met the SLO at no level, so no loss can show; {shown}", change)
    if sup_c is not None and (sup_c < keep * b.at_slo if c.mode == "concurrency" else sup_c <= keep * b.at_slo):
        return Verdict("fail", f"shown beyond the limit: even at its best the candidate holds under "
                               f"{keep:.0%} of the baseline's least; {shown}", change)
    if sup_b is not None and c.at_slo >= keep * sup_b:
        return Verdict("pass", f"shown within the limit: at its least the candidate holds >= {keep:.0%} of the "
                               f"baseline's most; {shown}", change)
    why = "the baseline's capacity lies beyond the sweep" if sup_b is None else "the levels are too far apart"
    return Verdict("insufficient", f"insufficient resolution: {why} to tell a {limit_pct:g}% drop (levels within "
                                   f"{limit_pct:g}% of each other around the capacity would); {shown}", change)
