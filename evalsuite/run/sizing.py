"""Before any engine starts: can a config's runs decide its gate rules' accuracy limits?

Each task's config says how many items each of its gated metrics will hold (a choice task's groups
times its limit, a grid's lengths x depths x seeds, RULER's tasks x n per length), and how the metric
weighs them (a macro accuracy per group, a balanced accuracy per group and label). The resolution is
`gate --plan`'s computation (evalsuite.stats.significance.resolvable_drop at the rules' discordance,
floored by the exact bound with no answer changed), weighed as the gate weighs the items. `validate`
and `run` print a line per metric whose limit the run cannot resolve:

    needle/acc: 24 items resolve 12.5 pt, the limit is 5 pt, about 124 needed

A choice task without a limit runs its whole set, and a task that picks its own items (lm-eval)
says nothing before it runs: neither is planned here. A balanced accuracy is planned with its labels
split evenly, the best case (the data's own split is known only once its items are drawn).
"""

from __future__ import annotations

from dataclasses import dataclass

from evalsuite.verdict.rules import Rules, resolution
from evalsuite.stats.significance import needed_items, resolves


@dataclass
class Planned:
    metric: str
    keys: list[tuple]  # one per item: the strata the metric weighs it by (() where all weigh alike)
    # a balanced accuracy, planned with its labels split evenly (the best case) but the strata's MOVER
    # floor, as the gate takes for labels whose counts differ
    even_labels: bool = False

    @property
    def n(self) -> int:
        return len(self.keys)


def _grid(name: str, head: str, lengths: list[int], per_length: int) -> list[Planned]:
    whole = Planned(f"{name}/{head}", [()] * per_length * len(lengths))
    return [whole] + [Planned(f"{name}/{head}/len{n}", [()] * per_length) for n in lengths]


def _choice(task, limit: int | None) -> list[Planned]:
    spec = task.definition()
    groups = task.groups or spec.groups or []
    per = task.limit if limit is None else min(task.limit or limit, limit)
    if per is None or not groups:
        return []
    name = task.name
    if spec.metric == "balanced":
        keys = [(g, "ab"[i % 2]) for g in groups for i in range(per)]
        return [Planned(f"{name}/balanced_acc", keys, even_labels=True), Planned(f"{name}/acc", [()] * len(keys))]
    out = [Planned(f"{name}/acc", [()] * per * len(groups))]
    if spec.metric == "macro":
        out.append(Planned(f"{name}/acc_macro", [(g,) for g in groups for _ in range(per)]))
    return out


def planned(task, limit: int | None = None) -> list[Planned]:
    """The gated metrics a task config will make and the items behind each; [] where unknown."""
    from evalsuite.tasks import ChoiceConfig, LongLegalConfig, LongLegalMultiConfig, NeedleConfig, RulerConfig

    if isinstance(task, ChoiceConfig):
        return _choice(task, limit)
    if isinstance(task, RulerConfig):
        return _capped(_grid(task.name, "score", task.lengths, len(task.tasks) * task.n), limit)
    per_cell = {NeedleConfig: 1, LongLegalConfig: len(getattr(task, "clauses", [])),
                LongLegalMultiConfig: len(getattr(task, "questions", []))}.get(type(task))
    if per_cell:
        return _capped(_grid(task.name, "acc", task.lengths, len(task.depths) * task.seeds * per_cell), limit)
    return []


def _capped(out: list[Planned], limit: int | None) -> list[Planned]:
    """`run --limit` spreads at most `limit` items over the task: each metric keeps its share."""
    if not out or limit is None or limit >= out[0].n:
        return out
    share = limit / out[0].n
    return [Planned(p.metric, p.keys[:max(1, int(p.n * share))]) for p in out]


def sizing_warnings(cfg, rules: Rules) -> list[str]:
    """One line per planned metric whose rule's limit its n cannot resolve."""
    out = []
    for task in cfg.tasks:
        for p in planned(task, cfg.limit):
            rule = rules.rule_for(p.metric)
            if rule is None or rule.kind != "max_drop_points" or not p.n:
                continue
            limit = rule.limit_for(p.metric) / 100
            res = resolution(rules, p.keys, stratified=p.even_labels)
            if res <= limit:
                continue
            need = _needed(p, limit, rules)
            best = " (labels split evenly: at best)" if p.even_labels else ""
            out.append(f"{p.metric}: {resolves(p.n, res)}{best}, the limit is {limit * 100:g} pt, about {need:,} needed")
    return out


def rules_warnings(cfg) -> list[str]:
    """sizing_warnings under the config's own gate rules (`gate_rules`), and what they mean."""
    from evalsuite.verdict.rules import load_rules, named_rules_path

    rules = load_rules(named_rules_path(cfg.gate_rules))
    found = sizing_warnings(cfg, rules)
    if not found:
        return []
    how = f"{named_rules_path(cfg.gate_rules).name}; {rules.discordance:.0%} of answers changing, {rules.power:.0%} power"
    return [*found, f"({how}): these runs cannot show such drops within their limits, so the gate leaves those "
                    "checks inconclusive (a drop shown beyond a limit still fails); raise the items, or name rules "
                    "they resolve in `gate_rules`. `evalsuite gate --plan --n N` plans other sizes."]


def _needed(p: Planned, limit: float, rules: Rules) -> int:
    """Items for `limit` to be resolved: the one figure (stats.significance.needed_items) the gate and
    `gate --plan` give too."""
    return needed_items(p.keys, limit, rules.confidence, rules.power, rules.discordance, p.even_labels)
