"""Balanced accuracy of a task's groups (LegalBench's headline): per group, their mean, and the
argmax rule's beside a thresholded headline."""

from __future__ import annotations

from evalsuite.core.types import Metric, MetricKind, Score
from evalsuite.stats.metrics import accuracy, balanced_accuracy, by_group, score_meaning
from evalsuite.stats.strata import combined_stderr
from evalsuite.tasks.choice import choice_rates
from evalsuite.tasks.threshold import argmax_value, thresholded

OVER_GROUPS = ("group", "target")  # a balanced accuracy over the task's groups: per group, then per label


def balanced_metrics(scores: list[Score], p: str, grouped: bool = True) -> list[Metric]:
    """`{p}/balanced_acc` (the mean over groups of balanced accuracy, from the items' recorded
    values, so it follows the scoring they were judged by), `{p}/acc`, one balanced accuracy per
    group, the choice rates, and beside a thresholded headline `{p}/argmax_balanced_acc` from the
    recorded log-probabilities. The argmax headline is no mean of the items' recorded values (those
    are the thresholded ones), so it has no strata: no paired test or interval over items is drawn for it."""
    head, per = _headline(scores, f"{p}/balanced_acc", grouped)
    out = [head, accuracy(scores, f"{p}/acc"), *per]
    if thresholded(scores, p):
        argmax = [argmax_value(s) for s in scores if s.extra.get("logprobs")]
        out.append(_headline(argmax, f"{p}/argmax_balanced_acc", grouped)[0].model_copy(update={"strata": None}))
    return out + choice_rates(scores, p)


def _headline(scores: list[Score], name: str, grouped: bool) -> tuple[Metric, list[Metric]]:
    """(the mean over groups of balanced accuracy, or one balanced accuracy without groups; the
    groups' own)."""
    per = [balanced_accuracy(g, f"{name}/{t}") for t, g in by_group(scores).items()] if grouped else []
    return (mean_over_tasks(per, name) if per else balanced_accuracy(scores, name, OVER_GROUPS)), per


def mean_over_tasks(per_task: list[Metric], name: str) -> Metric:
    """LegalBench's headline: the unweighted mean of per-task balanced accuracies.

    Its stderr is the sampling error of that mean for this fixed set of tasks (per-task
    errors combined), which is what matters when two variants run the same tasks.
    """
    meaning = score_meaning(MetricKind.mean, list(OVER_GROUPS))
    if not per_task:
        return Metric(name=name, value=float("nan"), n=0, **meaning)
    value = sum(m.value for m in per_task) / len(per_task)
    se = combined_stderr([m.stderr for m in per_task])
    return Metric(name=name, value=value, stderr=se, n=sum(m.n or 0 for m in per_task), **meaning)
