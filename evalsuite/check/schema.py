"""The claims file: what a claim says, where it comes from, and how to measure it.

A claim has an id, its text and where it was made, and checks: each names a metric, the variants
(`run:variant`) or source that measure it, and the effect the claim states (docs/config.md, "Checking
claims", has a whole file).

Metric addresses (source `run`): a metric key of a variant's result (`mmlu/acc`,
`latency/itl_ms_p50/ctx130000`); `engine/<field>` (or the bare field) for an EngineStats field;
`<key>@<tokens>` for a per-prompt-length metric, which reads `<key>/ctx<tokens>`, or `<key>`
itself when the run measured that one length only. Source `planner`: a field of the planner's
Plan, or kv_bytes_per_request / kv_gib_per_request / kv_gib_all_seqs (one request at
max_model_len, and max_num_seqs of them). Source `vllm_default`: an engine argument's default.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from evalsuite.core.configfile import load_model
from evalsuite.core.types import EngineStats
from evalsuite.memory.planner import Plan, PlanSettings
from evalsuite.stats import CONFIDENCE

Kind = Literal["ratio", "change_pct", "difference", "points", "value"]
ENGINE_FIELDS = tuple(k for k, f in EngineStats.model_fields.items() if f.annotation in (int | None, float | None))
DERIVED_PLANNER = ("kv_bytes_per_request", "kv_gib_per_request", "kv_gib_all_seqs")
PLANNER_METRICS = tuple(k for k, f in Plan.model_fields.items() if f.annotation in (int, float)) + DERIVED_PLANNER
_AT = re.compile(r"^(?P<key>[^@]+)@(?P<tokens>[1-9][0-9]*)$")
_KEY = re.compile(r"^[A-Za-z0-9_.\-/ ]+$")  # what MLflow accepts in a metric name


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Effect(_Strict):
    """What the claim says about the measured quantity: one of equals (+ tolerance), between, above, below.

    kind: ratio = candidate / baseline; change_pct = (candidate - baseline) / |baseline| x 100;
    difference = candidate - baseline in the metric's unit; points = the same x 100 (scores 0..1);
    value = one variant's number."""

    kind: Kind
    equals: float | None = None
    tolerance: float | None = Field(default=None, ge=0)  # absolute, in the kind's unit
    tolerance_pct: float | None = Field(default=None, ge=0)  # relative to `equals`
    between: tuple[float, float] | None = None
    above: float | None = None
    below: float | None = None

    @model_validator(mode="after")
    def _one_form(self):
        given = [k for k in ("equals", "between", "above", "below") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of equals, between, above, below (got {', '.join(given) or 'none'})")
        if (self.tolerance is not None or self.tolerance_pct is not None) and self.equals is None:
            raise ValueError("tolerance and tolerance_pct go with equals")
        if self.tolerance is not None and self.tolerance_pct is not None:
            raise ValueError("give tolerance or tolerance_pct, not both")
        if self.between is not None and self.between[0] > self.between[1]:
            raise ValueError(f"between: low {self.between[0]} is above high {self.between[1]}")
        return self

    def region(self) -> tuple[float, float]:
        """The claimed values' ends; above / below are strict (open at that end), the others closed."""
        if self.between is not None:
            return self.between
        if self.above is not None:
            return self.above, math.inf
        if self.below is not None:
            return -math.inf, self.below
        tol = self.tolerance if self.tolerance is not None else abs(self.equals) * (self.tolerance_pct or 0) / 100
        return self.equals - tol, self.equals + tol

    def holds(self, v: float) -> bool:
        lo, hi = self.region()
        if self.above is not None:
            return v > lo
        if self.below is not None:
            return v < hi
        return lo <= v <= hi

    def excludes(self, low: float, high: float) -> bool:
        """True when every value from low to high is outside the claim."""
        lo, hi = self.region()
        if self.above is not None:
            return high <= lo
        if self.below is not None:
            return low >= hi
        return high < lo or low > hi

    def describe(self) -> str:
        unit = {"ratio": "x", "change_pct": "%", "points": " pt"}.get(self.kind, "")
        if self.equals is not None:
            tol = (f" ± {_g(self.tolerance)}{unit}" if self.tolerance is not None
                   else f" ± {_g(self.tolerance_pct)}%" if self.tolerance_pct is not None else "")
            return f"{self.kind} = {_g(self.equals)}{unit}{tol}"
        if self.between is not None:
            return f"{self.kind} in [{_g(self.between[0])}, {_g(self.between[1])}]{unit}"
        if self.above is not None:
            return f"{self.kind} > {_g(self.above)}{unit}"
        return f"{self.kind} < {_g(self.below)}{unit}"


def _g(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 1000 and float(x).is_integer() else f"{x:g}"


class Side(_Strict):
    """One side of a comparison: a variant (`run:variant` or `variant`) and/or its own metric,
    or (source planner) settings that override the check's."""

    variant: str | None = None
    metric: str | None = None
    settings: PlanSettings | None = None  # the planner's inputs, as `evalsuite plan`'s options

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, v: Any) -> Any:
        return {"variant": v} if isinstance(v, str) else v


class Check(_Strict):
    what: str
    source: Literal["run", "planner", "vllm_default"] = "run"
    metric: str | None = None
    variant: Side | None = None  # kind value: the one variant measured
    baseline: Side | None = None
    candidate: Side | None = None
    model: str | None = None  # planner: a config.json, relative to the claims file
    settings: PlanSettings = Field(default_factory=PlanSettings)  # source planner: what it is given
    effect: Effect
    requires: dict[str, Any] = Field(default_factory=dict)  # engine settings the claim needs (Variant fields)
    given: list[Check] = Field(default_factory=list)  # preconditions; unmet -> not measurable
    measurable: bool = True
    why: str | None = None
    informational: bool = False  # reported, but left out of the claim's verdict and the exit code
    note: str | None = None

    @field_validator("requires")
    @classmethod
    def _known_settings(cls, v: dict[str, Any]) -> dict[str, Any]:
        from evalsuite.run.config import Variant

        unknown = sorted(set(v) - set(Variant.model_fields))
        if unknown:
            raise ValueError(f"unknown engine setting {', '.join(unknown)}; allowed: {', '.join(Variant.model_fields)}")
        return v

    @model_validator(mode="after")
    def _consistent(self):
        if not self.measurable:
            if not self.why:
                raise ValueError("measurable: false needs `why`")
            return self
        single = self.effect.kind == "value"
        if single and (self.baseline or self.candidate):
            raise ValueError("kind value measures one variant: give `variant`, not baseline/candidate")
        if not single and (self.baseline is None or self.candidate is None):
            raise ValueError(f"kind {self.effect.kind} compares two sides: give baseline and candidate")
        if self.source == "planner" and not self.model:
            raise ValueError("source planner needs `model` (a config.json)")
        if self.source == "run" and single and (self.variant is None or not self.variant.variant):
            raise ValueError("source run with kind value needs `variant`")
        for side in self.sides():
            _check_metric(self.source, side.metric or self.metric)
            if self.source == "run" and not side.variant:
                raise ValueError("source run: every side names a variant")
        return self

    def sides(self) -> list[Side]:
        if self.effect.kind == "value":
            return [self.variant or Side()]
        return [self.baseline, self.candidate]


def _check_metric(source: str, metric: str | None) -> None:
    if not metric:
        raise ValueError("metric is missing (give `metric`, or one per side)")
    if source == "planner":
        if metric not in PLANNER_METRICS:
            raise ValueError(f"planner metric {metric!r} unknown; allowed: {', '.join(PLANNER_METRICS)}")
        return
    if source == "vllm_default":
        if not metric.isidentifier():
            raise ValueError(f"vllm_default metric {metric!r} must be an engine argument name")
        return
    key = m.group("key") if (m := _AT.match(metric)) else metric
    if "@" in key or not _KEY.match(key):
        raise ValueError(f"metric {metric!r}: use task/metric[/group], engine/<field> or <key>@<tokens>")
    field = key.removeprefix("engine/")
    if (key.startswith("engine/") or "/" not in key) and field not in ENGINE_FIELDS:
        raise ValueError(f"metric {metric!r}: {field!r} is not an engine stat; allowed: {', '.join(ENGINE_FIELDS)}")


def engine_field(metric: str) -> str | None:
    """The EngineStats field a run metric names, or None for a task metric."""
    if metric.startswith("engine/"):
        return metric.removeprefix("engine/")
    return metric if "/" not in metric and metric in ENGINE_FIELDS else None


def split_at(metric: str) -> tuple[str, int | None]:
    m = _AT.match(metric)
    return (m.group("key"), int(m.group("tokens"))) if m else (metric, None)


class Claim(_Strict):
    id: str
    text: str  # the claim, quoted or paraphrased from its source
    where: str  # where it comes from
    note: str | None = None
    measurable: bool = True
    why: str | None = None
    checks: list[Check] = Field(default_factory=list)

    @field_validator("id", mode="before")
    @classmethod
    def _id_text(cls, v: Any) -> Any:
        return str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v

    @model_validator(mode="after")
    def _something_to_say(self):
        if not self.measurable and not self.why:
            raise ValueError("measurable: false needs `why`")
        if self.measurable and not self.checks:
            raise ValueError("give at least one check, or measurable: false with `why`")
        return self


class ClaimsFile(_Strict):
    title: str | None = None
    confidence: float = Field(default=CONFIDENCE, gt=0.5, lt=1)  # two-sided, for accuracy intervals
    decide_on: Literal["interval", "estimate"] = "interval"  # interval: a straddling interval is "insufficient n"
    min_n: int = Field(default=30, ge=1)  # fewer scored items than this: not measurable
    claims: list[Claim] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_ids(self):
        ids = [c.id for c in self.claims]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"claim ids must be unique, repeated: {', '.join(dup)}")
        return self


def load_claims(path: str | Path) -> ClaimsFile:
    return load_model(path, ClaimsFile)
