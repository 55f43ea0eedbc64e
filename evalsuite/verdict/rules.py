"""Gate rules: which metric is judged against which limit, at what confidence, and how the pass
decision and the findings are adjusted. The shipped default is package data (gate_rules.yaml, which
explains every setting); a rule's kind is one of verdict/kinds.py's; verdict/gate.py applies them."""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from evalsuite.core.configfile import load_model, not_allowed
from evalsuite.core.errors import ConfigError
from evalsuite.core.types import task_of
from evalsuite.stats.significance import keyed_resolution
from evalsuite.verdict.informative import CEILING
from evalsuite.verdict.kinds import RULE_KINDS, RuleKind, rule_kind, unknown_rule_kind


class Rule(BaseModel):
    """A rule: its metrics, and one limit given under its kind's name (verdict/kinds.py), e.g.
    `max_drop_points: 2`; the kind says the direction, the unit and how a metric is checked."""

    model_config = ConfigDict(extra="allow")  # the extra key is the kind, its value the limit

    __pydantic_extra__: dict[str, Annotated[float, Field(ge=0)]] = Field(init=False)
    name: str | None = None
    metrics: list[str] = Field(min_length=1)  # glob patterns over metric names (engine stats: engine/<field>)
    exclude: list[str] = Field(default_factory=list)  # globs taken out again, e.g. "*_depth*" grid cells
    # how the score weighs items; empty: as the metric does (acc_macro: group; balanced_acc: group, target)
    strata: list[Literal["group", "target"]] = Field(default_factory=list)
    tasks: dict[str, float] = Field(default_factory=dict)  # task name -> limit, same unit as the rule's

    @model_validator(mode="before")
    @classmethod
    def _known_kinds(cls, data):
        if isinstance(data, dict):
            unknown = [k for k in data if k not in cls.model_fields and k not in RULE_KINDS]
            if unknown:
                own = ", ".join(sorted(cls.model_fields))
                raise not_allowed(f"{unknown_rule_kind(unknown[0])} (a rule's other keys: {own})",
                                  f"an unknown rule kind (its name is not shown); allowed: {', '.join(RULE_KINDS)}")
        return data

    @field_validator("metrics", "exclude", "strata", mode="before")
    @classmethod
    def _one_or_many(cls, v):
        return [v] if isinstance(v, str) else v

    @model_validator(mode="after")
    def _one_limit(self):
        given = [k for k in RULE_KINDS if k in self.model_extra]
        if len(given) != 1:
            raise ValueError(f"give exactly one of {', '.join(RULE_KINDS)} (got {', '.join(given) or 'none'})")
        if any(v < 0 for v in self.tasks.values()):
            raise ValueError("tasks: limits must be >= 0")
        return self

    @property
    def kind(self) -> str:
        return next(iter(self.model_extra))

    @property
    def spec(self) -> RuleKind:
        """The rule's kind: direction, unit, check."""
        return rule_kind(self.kind)

    @property
    def limit(self) -> float:
        return self.model_extra[self.kind]

    @property
    def label(self) -> str:
        return self.name or ",".join(self.metrics)

    def matches(self, metric: str) -> bool:
        hit = any(fnmatch.fnmatchcase(metric, p) for p in self.metrics)
        return hit and not any(fnmatch.fnmatchcase(metric, p) for p in self.exclude)

    def limit_for(self, metric: str) -> float:
        return self.tasks.get(task_of(metric), self.limit)


class Rules(BaseModel):
    model_config = ConfigDict(extra="forbid")

    confidence: float = Field(default=0.95, gt=0.5, lt=1)  # one-sided
    decision: Literal["upper_bound", "point", "lower_bound"] = "upper_bound"
    # the pass decision is an intersection-union test: each check at alpha, unadjusted (see above)
    adjust: Literal["none", "holm", "bh"] = "none"
    findings: Literal["holm", "bh", "none"] = "holm"  # adjusts "significantly worse" over a candidate's checks
    ceiling: float = Field(default=CEILING, gt=0, le=1)  # a baseline whose lower bound reaches it is at ceiling
    min_n: int = Field(default=10, ge=2)  # paired items below which no test is trusted
    min_stratum_n: int = Field(default=5, ge=2)  # items per stratum (a 1-item stratum has no variance)
    insufficient_n: Literal["pass", "fail", "warn"] = "warn"  # what a check too small to judge becomes
    power: float = Field(default=0.8, gt=0, lt=1)  # for "the smallest limit this n resolves"
    discordance: float = Field(default=0.05, gt=0, le=1)  # planning: fraction of items that change answer
    # run --stop decided: the share of alpha its confidence sequence spends; a fixed-n look on all the
    # items of a task that runs to its end spends the rest (1: the sequence alone)
    sequence_share: float = Field(default=0.5, gt=0, le=1)
    rules: list[Rule] = Field(min_length=1)

    @property
    def alpha(self) -> float:
        return 1 - self.confidence

    @property
    def sequence_alpha(self) -> float:
        """The confidence sequence's level under `run --stop decided`."""
        return self.alpha * self.sequence_share

    @property
    def final_alpha(self) -> float | None:
        """The fixed-n look's level at the last item of a watched task; None where the sequence has it all."""
        return self.alpha * (1 - self.sequence_share) if self.sequence_share < 1 else None

    def rule_for(self, metric: str) -> Rule | None:
        """The first rule that names the metric, so specific rules go above broad ones."""
        return next((r for r in self.rules if r.matches(metric)), None)


def load_rules(path: str | Path) -> Rules:
    return load_model(path, Rules)


def resolution(rules: Rules, keys: list[tuple], discordance: float | None = None, stratified: bool = False) -> float:
    """The smallest limit a paired check on items weighed by `keys` resolves at the planning
    discordance (stats.significance.keyed_resolution), in score units; 1 (no drop a score can have)
    below `min_n`, where the gate trusts no test: `validate`, `gate --plan` and the gate share it."""
    if len(keys) < rules.min_n:
        return 1.0
    d = rules.discordance if discordance is None else discordance
    return keyed_resolution(keys, rules.confidence, rules.power, d, stratified)


def decision_rule(rules: Rules) -> str:
    """The pass rule in one sentence, as gate, `gate --plan` and the run summary state it."""
    if rules.adjust == "none":
        return (f"A candidate passes only if every check passes, each tested at alpha {rules.alpha:g} with no "
                f"multiplicity adjustment (an intersection-union test); these resolutions are per check.")
    return (f"A candidate passes only if every check passes, with p-values {rules.adjust}-adjusted over its checks: "
            f"with m checks the most significant must reach alpha/m, so each needs more items than shown here.")


def default_rules_path() -> Path:
    """The shipped rules (package data), for `gate` without --rules and the run summary."""
    return Path(__file__).with_name("gate_rules.yaml")


# The rule sets shipped as package data, by the name a config's `gate_rules` may give
SHIPPED_RULES = {"default": "gate_rules.yaml", "smoke": "gate_rules_smoke.yaml"}


def named_rules_path(value: str, base: Path | None = None, key: str = "gate_rules") -> Path:
    """A config's `gate_rules`: a shipped set by name, else a rules file (relative to `base`, the
    config's folder); one line naming the key, the value and what is allowed where it is neither."""
    if value in SHIPPED_RULES:
        return Path(__file__).with_name(SHIPPED_RULES[value])
    path = Path(value).expanduser()
    path = path if path.is_absolute() or base is None else base / path
    if not path.is_file():
        raise ConfigError(f"{key}: {value!r} is neither a shipped rule set nor a file here (allowed: "
                          f"{', '.join(SHIPPED_RULES)}, or a rules YAML beside the config)")
    return path.resolve()


def run_rules_path(config: dict) -> Path:
    """The rules a run was made to be judged by (its recorded config's `gate_rules`), else the shipped
    default: what `gate`, `report` and the run summary use where no --rules is given."""
    value = config.get("gate_rules")
    if not isinstance(value, str) or not value:
        return default_rules_path()
    try:
        return named_rules_path(value)
    except ConfigError:
        raise ConfigError(f"the run's config names gate_rules {value!r}, which is not here; give --rules FILE") from None


def chance_margins(rules: Rules, metrics: list[str]) -> dict[str, float]:
    """Per accuracy metric, its drop limit in score units: a baseline within it of chance is `at chance`
    (verdict/informative.py), so reports mark what the gate will call uninformative."""
    out = {}
    for m in metrics:
        rule = rules.rule_for(m)
        if rule is not None and rule.spec.per_item:
            out[m] = rule.limit_for(m) / 100
    return out
