"""Before any engine starts: can a config's runs decide its gate rules' accuracy limits?

Each task's config says how many items each of its gated metrics will hold (a choice task's groups
times its limit, a grid's lengths x depths x seeds, RULER's tasks x n per length), and how the metric
weighs them (a macro accuracy per group, a balanced accuracy per group and label). The resolution is
`gate --plan`'s computation (evalsuite.stats.significance.resolvable_drop at the rules' discordance,
floored by the exact bound with no answer changed), weighed as the gate weighs the items. `validate`
and `run` print a line per metric whose limit the run cannot resolve:

    needle/acc: 24 items resolve 12.5 pt, the limit is 5 pt, about 124 needed

and one where a rerun identical but for one lost item would fail (stats.significance.one_loss_bound).
Each registered task type declares its plan (evalsuite.tasks.planning). A choice task without a limit,
and a task that picks its own items (lm-eval), are not planned. A balanced accuracy is planned with
its labels split evenly, the best case.
"""

from __future__ import annotations

from evalsuite.stats.significance import needed_items, one_loss_bound, one_loss_items, resolves
from evalsuite.tasks.planning import Planned
from evalsuite.tasks.registry import task_type
from evalsuite.verdict.rules import Rules, resolution


def planned(task, limit: int | None = None) -> list[Planned]:
    """The gated metrics a task config will make and the items behind each, as its registered type
    declares them; an unregistered type is refused (evalsuite.core.errors.UnknownName)."""
    return task_type(task.type).planned(task, limit)


def sizing_warnings(cfg, rules: Rules) -> list[str]:
    """One line per planned metric whose rule's limit its n cannot resolve."""
    out = []
    for task in cfg.tasks:
        for p in planned(task, cfg.limit):
            rule = rules.rule_for(p.metric)
            if rule is None or not rule.spec.per_item or not p.n:
                continue
            limit = rule.limit_for(p.metric) / 100
            res = resolution(rules, p.keys, stratified=p.even_labels)
            if res <= limit:
                out += _one_loss(p, limit, rules)
                continue
            need = _needed(p, limit, rules)
            best = " (labels split evenly: at best)" if p.even_labels else ""
            out.append(f"{p.metric}: {resolves(p.n, res)}{best}, the limit is {limit * 100:g} pt, about {need:,} needed")
    return out


LOST = "a rerun identical but for"


def _one_loss(p: Planned, limit: float, rules: Rules) -> list[str]:
    """The line for a metric whose identical rerun, one item lost, would fail its limit; [] where it passes."""
    bound = one_loss_bound(p.keys, rules.confidence, p.even_labels)
    if bound <= limit:
        return []
    need = one_loss_items(p.keys, limit, rules.confidence, p.even_labels)
    return [f"{p.metric}: {LOST} 1 of its {p.n:,} items lost fails (bound {bound * 100:.1f} pt, "
            f"the limit is {limit * 100:g} pt), about {need:,} needed"]


def rules_warnings(cfg) -> list[str]:
    """sizing_warnings under the config's own gate rules (`gate_rules`), and what they mean."""
    from evalsuite.verdict.rules import load_rules, named_rules_path

    rules = load_rules(named_rules_path(cfg.gate_rules))
    found = sizing_warnings(cfg, rules)
    if not found:
        return []
    how = f"{named_rules_path(cfg.gate_rules).name}; {rules.discordance:.0%} of answers changing, {rules.power:.0%} power"
    said = []
    if any(LOST not in line for line in found):
        said.append("these runs cannot show such drops within their limits, so the gate leaves those checks "
                    "inconclusive (a drop shown beyond a limit still fails)")
    if any(LOST in line for line in found):
        said.append("one item lost fails those checks, so an identical rerun fails on a single unlucky answer")
    return [*found, f"({how}): {'; '.join(said)}; raise the items, or name rules they resolve in `gate_rules`. "
                    "`evalsuite gate --plan --n N` plans other sizes."]


def _needed(p: Planned, limit: float, rules: Rules) -> int:
    """Items for `limit` to be resolved: the one figure (stats.significance.needed_items) the gate and
    `gate --plan` give too."""
    return needed_items(p.keys, limit, rules.confidence, rules.power, rules.discordance, p.even_labels)
