"""Gate rule kinds: one registry, as lm-eval registers its models (lm_eval/api/registry.py).

A rule in a rules YAML gives its limit under its kind's name (`max_drop_points: 2`); the kind says
which way is better, the unit of the limit, and the function that checks a metric against it. The
shipped kinds register in verdict/checks.py, beside the checks they call; the verdict package
imports that module, so every kind is known before a rules file is read. A name no kind holds is
refused where the rules are read: "Unknown rule kind 'x'. Available: ...".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

# check(rules, rule, metric, pair, label) -> Check: verdict/checks.py's Pair and Check
CheckFn = Callable[..., Any]


@dataclass(frozen=True)
class RuleKind:
    name: str  # the rules YAML key its limit is given under
    direction: Literal["higher", "lower"]  # which way the metric is better
    unit: Literal["pt", "%"]  # of the limit: points of a score in [0, 1], or percent of the baseline's figure
    check: CheckFn
    doc: str = ""

    @property
    def per_item(self) -> bool:
        """A score judged on paired items (in points): what stopping early, run sizing and the
        at-chance marks apply to."""
        return self.unit == "pt"

    @property
    def growth(self) -> bool:
        """Lower is better: a change is a growth, not a drop."""
        return self.direction == "lower"


RULE_KINDS: dict[str, RuleKind] = {}


def register_rule_kind(name: str, *, direction: Literal["higher", "lower"], unit: Literal["pt", "%"]):
    """Decorates a check function as the rule kind `name`."""
    def add(check: CheckFn) -> CheckFn:
        if name in RULE_KINDS:
            raise ValueError(f"rule kind {name!r} is registered already (by {RULE_KINDS[name].check.__qualname__})")
        RULE_KINDS[name] = RuleKind(name, direction, unit, check, (check.__doc__ or "").strip())
        return check
    return add


def unknown_rule_kind(name: str) -> str:
    return f"Unknown rule kind {name!r}. Available: {', '.join(RULE_KINDS)}"


def rule_kind(name: str) -> RuleKind:
    """The kind registered as `name`; a KeyError that says which are, for a name none holds."""
    try:
        return RULE_KINDS[name]
    except KeyError:
        raise KeyError(unknown_rule_kind(name)) from None
