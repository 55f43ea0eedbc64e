"""Can a task tell variants apart at all? From the baseline's own scores: at chance or at ceiling.

A task whose baseline is at chance (a 1.5B model on CUAD answers "Yes" to nearly every clause) shows
no loss because there is nothing to lose; a task at ceiling (needles at 4K-32K) shows only whether a
variant collapsed, not a subtle loss. Reports say so beside the number, and the gate never counts a
check on an at-chance task as evidence.

  at chance   the baseline's two-sided interval reaches within `margin` (the check's limit) of the
              chance level, so "within the limit" cannot mean "no loss"; margin 0 (reports without a
              limit) is the interval including chance.
  at ceiling  the interval's lower bound is at or above `ceiling` (0.95 by default).

Where no chance level can be found (an older record without targets) the mark is `chance unknown`,
which the gate treats as at chance. How the chance level is read: docs/statistics.md ("Informative
or not").
"""

from __future__ import annotations

import collections
import functools
import math
from pathlib import Path

from evalsuite.core.rundir import RunDir
from evalsuite.core.types import Metric, VariantResult, task_of
from evalsuite.stats import CONFIDENCE
from evalsuite.stats.metrics import accuracy_interval

AT_CHANCE, AT_CEILING, CHANCE_UNKNOWN = "at chance", "at ceiling", "chance unknown"
CEILING = 0.95
UNKNOWN = math.nan  # chance_level where nothing says what an answer that ignores the item scores
_PEEK = 50  # sample lines read to count a task's choices
_LABELS = 26  # at most this many distinct targets, each repeated, make a label set (A-Z, Yes/No)


def chance_level(result: VariantResult, metric: str, rd: RunDir | None = None) -> float | None:
    """The score an answer that ignores the item gets on `metric`; None where guessing scores ~0
    (free-form answers); UNKNOWN (nan) where nothing says. A task's declared level (1/k) stands for
    its own metric; for the others of a choice task, where the run folder has the items, the best
    constant answer's score under the metric's own weighting: the majority label's share for a plain
    accuracy (an all-"No" model scores 0.75 where a quarter of the labels are "Yes"), 1/k for a
    balanced accuracy. Records that declare nothing and kept no log-probabilities fall back on the
    targets: a few labels, each repeated, are a choice task's; distinct targets a free-form one's."""
    task = task_of(metric)
    declared = getattr(result, "chance", None) or {}
    if metric in declared:
        return float(declared[metric])
    level = next((float(v) for name, v in declared.items() if task_of(name) == task), None)
    if rd is None:
        return level if level is not None or declared else UNKNOWN
    if level is None:
        path = rd.samples_file(result.variant, task)
        k = _choices(str(path), path.stat().st_mtime_ns) if path.is_file() else 0
        level = 1 / k if k >= 2 else None
    if level is None and declared:  # a record that declares its choice tasks: this one is free-form
        return None
    targets = _targets(rd, result, metric)
    # free-form or a label set is the task's nature, read on all its items: one length's few items
    # (distinct by chance, or repeating by chance) never mark it otherwise than its neighbours
    whole = _task_targets(rd, result, task) or targets
    if level is None and whole is None:
        return UNKNOWN
    if level is None and not _label_set(whole):
        return None if len(set(whole)) == len(whole) else UNKNOWN
    return _constant_answer(rd, result, metric) if targets else level


def _targeted(rd: RunDir, result: VariantResult, metric: str) -> tuple[list[dict], list[str]] | None:
    """The metric's items and its strata where every item has a target; None otherwise."""
    from evalsuite.stats.paired import read_scores

    m = result.metric(metric)
    if m is None or m.strata is None:
        return None
    items = list(read_scores(rd, result.variant, m).values())
    if not items or any(it["target"] in (None, "") for it in items):
        return None
    return items, m.strata


def _targets(rd: RunDir, result: VariantResult, metric: str) -> list[str] | None:
    found = _targeted(rd, result, metric)
    return None if found is None else [str(it["target"]) for it in found[0]]


def _task_targets(rd: RunDir, result: VariantResult, task: str) -> list[str] | None:
    """The targets of every item of `task` (its headline metric's), or None where some item has none."""
    head = next((n for n in result.primary_metrics or [] if task_of(n) == task), None) or next(
        (m.name for m in result.metrics if task_of(m.name) == task and m.group is None and m.item_score), None)
    return _targets(rd, result, head) if head else None


def _label_set(targets: list[str]) -> bool:
    """A choice task's targets: 2 to _LABELS labels, each of them the answer to more than one item."""
    counts = collections.Counter(targets)
    return 2 <= len(counts) <= _LABELS and min(counts.values()) >= 2


def _constant_answer(rd: RunDir, result: VariantResult, metric: str) -> float | None:
    """max over answers a of the metric's weighted mean of [target == a]; None without targets."""
    from evalsuite.stats.paired import item_keys
    from evalsuite.stats.significance import stratum_weights

    found = _targeted(rd, result, metric)
    if found is None:
        return None
    items, strata = found
    w = stratum_weights(item_keys(items, strata))
    share: dict[str, float] = {}
    for it, wi in zip(items, w, strict=True):
        share[str(it["target"])] = share.get(str(it["target"]), 0.0) + float(wi)
    return max(share.values())


@functools.lru_cache(maxsize=64)
def _choices(path: str, _mtime_ns: int) -> int:
    """The most choices any of a task's first sample lines scored (k of a k-way choice; 0: free-form)."""
    variant_dir, task = Path(path).parent.parent, Path(path).stem
    k = 0
    for row in RunDir(variant_dir.parent).load_samples(variant_dir.name, task, first=_PEEK):
        logprobs = row["score"].get("extra", {}).get("logprobs")
        if isinstance(logprobs, dict):
            k = max(k, len(logprobs))
    return k


def mark(m: Metric | None, chance: float | None, margin: float = 0.0, ceiling: float = CEILING,
         confidence: float = CONFIDENCE) -> str | None:
    """`at chance`, `at ceiling`, `chance unknown` or None (informative) for one baseline score; margin
    and ceiling in score units."""
    if m is None or not m.item_score:
        return None
    ci = accuracy_interval(m, confidence)
    if ci is None:
        return None
    low, _ = ci
    if chance is not None and math.isnan(chance):
        return AT_CEILING if low >= ceiling else CHANCE_UNKNOWN
    if chance is not None and (low - chance < margin or low <= chance):
        return AT_CHANCE
    if low >= ceiling:
        return AT_CEILING
    return None


def task_marks(result: VariantResult, rd: RunDir | None = None, ceiling: float = CEILING,
               margins: dict[str, float] | None = None) -> dict[str, str]:
    """Headline metric -> its mark, for the metrics that are at chance or at ceiling; `margins` by
    metric (the gate's limits, in score units) widen "at chance" as the gate does."""
    out = {}
    for name in result.primary_metrics or [m.name for m in result.metrics if m.group is None]:
        found = mark(result.metric(name), chance_level(result, name, rd), (margins or {}).get(name, 0.0), ceiling)
        if found:
            out[name] = found
    return out
