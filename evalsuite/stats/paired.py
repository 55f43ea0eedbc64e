"""Per-item scores of two variants on the items both answered, read from run folders: the one item
reader, strata rule and paired test that gate, compare, check and scripts share.

A metric `task/metric[/group]` is paired on the task's samples/<task>.jsonl in both runs,
matched by sample id (only ids present in both count), restricted to the group's items (those of
its prompt length, for one length's figure), and
stratified as the metric weighs items (its `strata`, set by the task that made it: macro by group;
balanced by group, then by target).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Set
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evalsuite.core.rundir import RunDir
from evalsuite.core.types import Metric, MetricKind
from evalsuite.stats.significance import (PairedTest, keyed_resolution, paired_test, score_interval, smallest_cell,
                                          stratum_weights, two_sided, unpaired_test)


def item_labels(sample: dict, score: dict) -> set[str]:
    """Every name a `task/metric/<group>` metric may use for this item's cell.

    Tasks name groups differently: the score's group (a subject, `len1024_depth50`), a prefix
    of it (`len1024`), or a field of the sample's meta / the score's extra (a category, a clause).
    """
    group = str(score.get("group"))
    parts = group.split("_")
    labels = {group, *("_".join(parts[:i]) for i in range(1, len(parts)))}
    for d in (sample.get("meta") or {}, score.get("extra") or {}):
        labels |= {str(v) for v in d.values() if isinstance(v, str)}
    return labels


def item_length(sample: dict, score: dict) -> int | None:
    """The item's prompt length as its task recorded it (the sample's meta or the score's extra)."""
    return next((d["length"] for d in (sample.get("meta") or {}, score.get("extra") or {})
                 if isinstance(d.get("length"), int)), None)


def covers(metric: Metric, labels: Set[str], length: int | None) -> bool:
    """Whether an item (its `item_labels` and `item_length`) is one of those behind `metric`."""
    if metric.group is None:
        return True
    per_length = metric.length is not None and metric.depth is None
    return (per_length and length == metric.length) or metric.group in labels


@functools.lru_cache(maxsize=16)
def _items(path: str, _mtime_ns: int, _size: int) -> tuple[tuple[str, float, object, object, object, frozenset,
                                                                 int | None], ...]:
    """(id, value, group, target, prediction, labels, length) per scored line; cached per file version,
    because one task's file serves many metrics (per length, per group) and many candidates."""
    variant_dir, task = Path(path).parent.parent, Path(path).stem
    return scored_items(RunDir(variant_dir.parent).load_samples(variant_dir.name, task))


Item = tuple[str, float, object, object, object, frozenset, int | None]


def scored_items(rows: list[dict]) -> tuple[Item, ...]:
    """(id, value, group, target, prediction, labels, length) of each scored samples row."""
    out = []
    for row in rows:
        sample, score = row.get("sample") or {}, row.get("score") or {}
        sid = sample.get("id") or score.get("sample_id")
        if sid is not None and isinstance(score.get("value"), (int, float)):
            out.append((sid, float(score["value"]), score.get("group"), score.get("target"), score.get("pred"),
                        frozenset(item_labels(sample, score)), item_length(sample, score)))
    return tuple(out)


def scores_of(items: Iterable[Item], metric: Metric) -> dict[str, dict]:
    """sample id -> {value, group, target, pred} for the items behind `metric`."""
    return {sid: {"value": v, "group": g, "target": t, "pred": pred}
            for sid, v, g, t, pred, labels, length in items if covers(metric, labels, length)}


def read_scores(rd: RunDir, variant: str, metric: Metric) -> dict[str, dict]:
    """scores_of the items behind `metric` (a sample id counts once, as RunDir.load_samples reads it)."""
    path = rd.samples_file(variant, metric.task)
    if not path.exists():
        return {}
    st = path.stat()
    return scores_of(_items(str(path), st.st_mtime_ns, st.st_size), metric)


@dataclass
class Pairing:
    """What two variants share for one metric, before any test."""

    base: list[float]
    cand: list[float]
    keys: list[tuple]
    n_base: int
    n_cand: int
    changed: int = 0  # paired items whose answer differs (the prediction where both recorded one, else the score)
    # groups (a subject, a RULER task at one length) that either side scored but no paired item is
    # in: the paired mean then stands for another population than the metric's
    missing_groups: tuple[str, ...] = ()
    groups: int = 0  # groups behind the metric in either side
    # (the missing groups' share of the metric's weight, the least drop they can add): what the
    # paired items cannot speak for, bounded by the candidate being right on all of it
    unmeasured: tuple[float, float] = (0.0, 0.0)

    @property
    def n(self) -> int:
        return len(self.base)

    @property
    def smallest_cell(self) -> int:
        return smallest_cell(self.keys)

    @property
    def partial(self) -> bool:
        """Either side holds items the other lacks: the pair is a subset of what each measured."""
        return self.n < max(self.n_base, self.n_cand)

    @property
    def changed_share(self) -> float:
        """The share of paired items that changed answer: a rerun's share is the engine's own noise floor."""
        return self.changed / self.n if self.n else float("nan")

    def means(self) -> tuple[float, float]:
        """(baseline, candidate) over the paired items, weighted as the metric weighs them (the
        paired test's drop is their difference)."""
        w = stratum_weights(self.keys)
        return float(w @ np.asarray(self.base, float)), float(w @ np.asarray(self.cand, float))


def _differs(b: dict, c: dict) -> bool:
    # a prediction names the answer: two wrong answers that differ are a changed answer too
    preds = b.get("pred") is not None and c.get("pred") is not None
    return b["value"] != c["value"] or (preds and str(b["pred"]) != str(c["pred"]))


def pair(base: dict[str, dict], cand: dict[str, dict], strata: list[str]) -> Pairing:
    shared = [sid for sid in base if sid in cand]
    groups = {str(r.get("group")) for r in (*base.values(), *cand.values())}
    missing = groups - {str(base[s].get("group")) for s in shared}
    return Pairing([base[s]["value"] for s in shared], [cand[s]["value"] for s in shared],
                   item_keys((base[s] for s in shared), strata), len(base), len(cand),
                   sum(_differs(base[s], cand[s]) for s in shared), tuple(sorted(missing)), len(groups),
                   _unmeasured(base, cand, strata, missing))


def _unmeasured(base: dict[str, dict], cand: dict[str, dict], strata: list[str], missing: set[str]) -> tuple[float, float]:
    """The `missing` groups' share of the whole metric's weight (every item either side scored, weighed
    by `strata`) and the least drop they can add to it: the candidate right on each of their items the
    baseline scored, the baseline wrong on those only the candidate scored (scores lie in [0, 1])."""
    if not missing:
        return 0.0, 0.0
    items = [(r, r["value"] - 1.0) for r in base.values()] + [(r, -r["value"]) for s, r in cand.items() if s not in base]
    w = stratum_weights(item_keys((r for r, _ in items), strata))
    out = [i for i, (r, _) in enumerate(items) if str(r.get("group")) in missing]
    return float(w[out].sum()), float(sum(w[i] * items[i][1] for i in out))


def p_exceeds_whole(test: PairedTest, unmeasured: tuple[float, float], drop: float) -> float:
    """p for H0: the whole metric's drop <= `drop`, where the paired items miss groups (`unmeasured`,
    as Pairing holds it): their drop must then exceed what keeps the whole within `drop` even with the
    candidate right on every missing item. A drop of scores in [0, 1] never exceeds 1: p is 1 there."""
    share, least = unmeasured
    at = drop if share <= 0 else (drop - least) / (1 - share) if share < 1 else math.inf
    return test.p_exceeds(at) if at < 1 else 1.0


def pairing(base_rd: RunDir, base_variant: str, cand_rd: RunDir, cand_variant: str, metric: Metric,
            strata: list[str] | None = None) -> Pairing:
    """`metric`'s items in both variants, weighed by `strata` where given, else as the metric weighs them."""
    strata = (metric.strata or []) if strata is None else strata
    return pair(read_scores(base_rd, base_variant, metric), read_scores(cand_rd, cand_variant, metric), strata)


def unpaired(b: Metric | None, c: Metric | None, confidence: float) -> PairedTest | None:
    """Two proportions from their metrics alone, when they count whole items (0/1 scores)."""
    if b is None or c is None or not b.n or not c.n or b.kind != MetricKind.proportion:
        return None
    counts = [m.value * m.n for m in (b, c)]
    if any(abs(x - round(x)) > 1e-6 for x in counts):
        return None  # fractional scores: not a count of successes
    return unpaired_test((round(counts[0]), b.n), (round(counts[1]), c.n), confidence)


def paired_result(p: Pairing, confidence: float) -> PairedTest:
    """The one paired test: one-sided bounds of the drop (baseline - candidate) at `confidence`."""
    return paired_test(p.base, p.cand, p.keys, confidence)


def difference_interval(p: Pairing, confidence: float) -> tuple[float, float, PairedTest]:
    """Two-sided interval at `confidence` of candidate - baseline (score units), from the same test the
    gate decides on: its one-sided bounds at (1 + confidence) / 2, negated."""
    test = paired_result(p, two_sided(confidence))
    return -test.high, -test.low, test


def item_keys(rows: Iterable[dict], strata: list[str]) -> list[tuple]:
    """Each item's stratum: its values of the `strata` fields, as text."""
    return [tuple(str(r.get(k)) for k in strata) for r in rows]


def item_mean(items: dict[str, dict], strata: list[str]) -> float:
    """One variant's score over its items, weighted by `strata` as the metric weighs them."""
    rows = list(items.values())
    return float(stratum_weights(item_keys(rows, strata)) @ np.array([r["value"] for r in rows]))


def item_interval(items: dict[str, dict], strata: list[str], confidence: float) -> tuple[float, float, str]:
    """Two-sided interval of one variant's score over its items, weighted by `strata`."""
    rows = list(items.values())
    return score_interval([r["value"] for r in rows], item_keys(rows, strata), confidence)


def planned_resolution(items: dict[str, dict], strata: list[str], confidence: float, power: float,
                       discordance: float) -> float:
    """The smallest drop a paired gate on these items could certify had `discordance` of them changed
    answer, weighed by `strata` as the gate weighs them: a balanced accuracy's few minority-label
    items set its floor and effective n, which its item count overstates (1,000 items with 3% "No":
    effective n 116, 5.2 points where n = 1,000 unweighted gives 1.8)."""
    return keyed_resolution(item_keys(list(items.values()), strata), confidence, power, discordance)
