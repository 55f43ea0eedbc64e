"""Intervals for claims: accuracy from the per-item scores a run recorded, timings from the recorded means.

A paired difference uses the items both variants answered: a percentile bootstrap over items
(scipy, resampling the pairs together) of the same aggregate the metric uses (plain mean, mean of
per-group means, mean over groups of per-label recalls), plus the exact McNemar p-value
(statsmodels) when every score is 0 or 1 and the metric weighs items alike. A single accuracy
gets a Wilson interval (statsmodels) when its items are 0/1 and unstratified, else a one-sample
bootstrap. Where the recomputed aggregate does not reproduce the recorded metric, the item files
do not describe it, so the interval falls back to the recorded standard errors (normal
approximation) and says so.

A timing (TTFT, ITL, e2e) compared between two variants gets a t interval for the change in its
per-request means: paired by request id where both variants recorded the same requests (a workload's
requests differ by their place in the batch far more than between settings), else Welch's from each
mean's recorded standard error and n. The repeats of a latency pass are few (3 by default), where a
bootstrap of a median has a handful of values.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from statistics import NormalDist

import numpy as np

from evalsuite.core.records import RunDir
from evalsuite.core.types import Metric
from evalsuite.stats.metrics import is_item_score
from evalsuite.stats.paired import item_labels

RESAMPLES = 2000


@dataclass
class Interval:
    low: float
    high: float
    method: str
    n: int | None = None
    p_value: float | None = None  # exact McNemar, paired 0/1 scores only


def read_items(run_root: Path, variant: str, task: str) -> dict[str, dict]:
    """sample id -> {value, group, target, labels}; read without creating anything."""
    out: dict[str, dict] = {}
    for row in RunDir(run_root).load_samples(variant, task):
        sample, score = row.get("sample") or {}, row.get("score") or {}
        sid = sample.get("id") or score.get("sample_id")
        if sid is None or sid in out or not isinstance(score.get("value"), (int, float)):
            continue
        out[sid] = {"value": float(score["value"]), "group": str(score.get("group")),
                    "target": str(score.get("target")), "labels": item_labels(sample, score)}
    return out


def strata_for(metric: str) -> tuple[str, ...] | None:
    """How the metric aggregates its items; None when it is not an item average we know."""
    if not is_item_score(metric):
        return None
    parts = metric.split("/")
    name, grouped = parts[1], len(parts) > 2
    if name.startswith("balanced_acc"):
        return ("target",) if grouped else ("group", "target")
    if name.endswith("_macro"):
        return () if grouped else ("group",)
    return ()


def items_for(run_root: Path, variant: str, metric: str) -> dict[str, dict]:
    parts = metric.split("/")
    items = read_items(run_root, variant, parts[0])
    if len(parts) > 2:
        items = {k: v for k, v in items.items() if parts[2] in v["labels"]}
    return items


class _Codes:
    """Integer codes of the finest stratum of each item, and each code's parent group."""

    def __init__(self, rows: list[dict], strata: tuple[str, ...]):
        keys = [tuple(r[s] for s in strata) for r in rows]
        cells = sorted(set(keys))
        index = {c: i for i, c in enumerate(cells)}
        self.codes = np.array([index[k] for k in keys], dtype=float)
        parents = sorted({c[0] for c in cells}) if len(strata) == 2 else []
        self.parent = np.array([parents.index(c[0]) for c in cells]) if parents else None
        self.n_cells, self.depth = len(cells), len(strata)


def nested_mean(x: np.ndarray, codes: np.ndarray, c: _Codes) -> np.ndarray:
    """The metric's aggregate along the last axis: mean, mean of cell means, or mean of group means of cell means."""
    if c.depth == 0:
        return x.mean(axis=-1)
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # a resample may miss a cell: it drops out, as in the metric
        cells = np.stack([np.where(codes == k, x, 0.0).sum(-1) / (codes == k).sum(-1) for k in range(c.n_cells)], -1)
        if c.parent is None:
            return np.nanmean(cells, axis=-1)
        groups = np.stack([np.nanmean(cells[..., c.parent == g], axis=-1) for g in range(int(c.parent.max()) + 1)], -1)
        return np.nanmean(groups, axis=-1)


def _bootstrap(data: tuple[np.ndarray, ...], statistic, confidence: float) -> tuple[float, float]:
    from scipy.stats import bootstrap

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # degenerate resamples (all equal) are handled below
        res = bootstrap(data, statistic, paired=True, vectorized=True, confidence_level=confidence,
                        n_resamples=RESAMPLES, method="percentile", batch=100, rng=np.random.default_rng(0))
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if math.isnan(low) or math.isnan(high):
        point = float(statistic(*data))
        return point, point
    return low, high


def _reproduces(value: float, recorded: float | None) -> bool:
    return recorded is not None and not math.isnan(recorded) and abs(value - recorded) < 1e-6


def paired_interval(base: dict[str, dict], cand: dict[str, dict], metric: str, recorded: tuple[float, float],
                    confidence: float) -> Interval | None:
    """Interval of candidate - baseline (score units) over shared items, or None where the items do not
    reproduce both recorded metrics."""
    strata = strata_for(metric)
    shared = sorted(set(base) & set(cand))
    if strata is None or len(shared) < 2:
        return None
    c = _Codes([base[k] for k in shared], strata)
    b = np.array([base[k]["value"] for k in shared])
    x = np.array([cand[k]["value"] for k in shared])
    if not (_reproduces(float(nested_mean(b, c.codes, c)), recorded[0])
            and _reproduces(float(nested_mean(x, c.codes, c)), recorded[1])):
        return None

    def diff(bb, xx, codes, axis=-1):
        return nested_mean(xx, codes, c) - nested_mean(bb, codes, c)

    low, high = _bootstrap((b, x, c.codes), diff, confidence)
    how = f"paired bootstrap over {len(shared):,} items (percentile, {RESAMPLES} resamples)"
    p = None
    # McNemar counts items alike: a test of the metric only where the metric weighs them alike (not
    # balanced or macro accuracy, whose interval above is the stratified one)
    if not strata and np.isin(b, (0.0, 1.0)).all() and np.isin(x, (0.0, 1.0)).all():
        from statsmodels.stats.contingency_tables import mcnemar

        table = [[int(((b == 1) & (x == 1)).sum()), int(((b == 1) & (x == 0)).sum())],
                 [int(((b == 0) & (x == 1)).sum()), int(((b == 0) & (x == 0)).sum())]]
        p = float(mcnemar(table, exact=True).pvalue)
        how += f"; exact McNemar p={p:.3g}"
    return Interval(low, high, how, len(shared), p)


def single_interval(items: dict[str, dict], metric: str, recorded: float, confidence: float) -> Interval | None:
    """Interval of one variant's score: Wilson for unstratified 0/1 items, else a bootstrap."""
    strata = strata_for(metric)
    if strata is None or len(items) < 2:
        return None
    rows = list(items.values())
    c = _Codes(rows, strata)
    x = np.array([r["value"] for r in rows])
    if not _reproduces(float(nested_mean(x, c.codes, c)), recorded):
        return None
    if not strata and np.isin(x, (0.0, 1.0)).all():
        from statsmodels.stats.proportion import proportion_confint

        low, high = proportion_confint(int(x.sum()), len(x), alpha=1 - confidence, method="wilson")
        return Interval(float(low), float(high), f"Wilson over {len(x):,} items", len(x))
    low, high = _bootstrap((x, c.codes), lambda xx, codes, axis=-1: nested_mean(xx, codes, c), confidence)
    return Interval(low, high, f"bootstrap over {len(x):,} items (percentile, {RESAMPLES} resamples)", len(x))


def normal_interval(value: float, metrics: list[Metric], confidence: float) -> Interval | None:
    """value +- z x (the metrics' standard errors combined); None when any is missing."""
    ses = [m.stderr for m in metrics]
    if any(se is None or math.isnan(se) for se in ses):
        return None
    half = NormalDist().inv_cdf(0.5 + confidence / 2) * math.sqrt(sum(se * se for se in ses))
    n = min((m.n for m in metrics if m.n is not None), default=None)
    how = "normal from the recorded standard errors" + (" (unpaired)" if len(metrics) > 1 else "")
    return Interval(value - half, value + half, how, n)


def welch_interval(kind: str, base: Metric, cand: Metric, confidence: float) -> Interval | None:
    """Interval of cand's mean against base's, in the kind's unit (a ratio, a % change or a
    difference), by Welch's t with Satterthwaite's degrees of freedom; the baseline mean is the
    denominator, taken as known (its own error is in the t interval of the difference). None
    without a standard error and n >= 2 on both sides."""
    # Written out: only the two recorded means and standard errors are at hand, and scipy's
    # ttest_ind_from_stats gives a p-value from them but no interval.
    from scipy.stats import t as student_t

    sides = (base, cand)
    if kind not in SCALED or base.value == 0 or any(
            m.stderr is None or math.isnan(m.stderr) or (m.n or 0) < 2 for m in sides):
        return None
    var = base.stderr ** 2 + cand.stderr ** 2
    tails = sum(m.stderr ** 4 / (m.n - 1) for m in sides)
    df = var * var / tails if tails > 0 else math.inf
    half = float(student_t.ppf(0.5 + confidence / 2, df)) * math.sqrt(var) if var > 0 else 0.0
    d = cand.value - base.value
    how = f"Welch t on the per-request means ({_shown(kind, d, base.value)}; n={base.n} vs {cand.n}, df={df:.3g})"
    return Interval(_scaled(kind, d - half, base.value), _scaled(kind, d + half, base.value), how, min(base.n, cand.n))


SCALED = ("difference", "ratio", "change_pct")  # the kinds a difference of means is stated in


def _scaled(kind: str, d: float, base_mean: float) -> float:
    """A difference of means as the kind states the effect, the baseline mean as the denominator."""
    return {"difference": d, "ratio": 1 + d / base_mean, "change_pct": d / abs(base_mean) * 100}[kind]


def _shown(kind: str, d: float, base_mean: float) -> str:
    """The means' own change, shown beside a median's (the interval is the means')."""
    v = _scaled(kind, d, base_mean)
    return {"ratio": f"{v:.3g}x", "change_pct": f"{v:+.2f}%"}.get(kind, f"{v:+.4g}")


@lru_cache(maxsize=64)
def _timed_rows(run_root: Path, variant: str, task: str) -> tuple[tuple[str, str, dict], ...]:
    """(request id, group, timings) of a timed task's samples, read once however many checks ask."""
    rows = []
    for row in RunDir(run_root).load_samples(variant, task):
        score = row.get("score") or {}
        sid = score.get("sample_id") or (row.get("sample") or {}).get("id")
        rows.append((str(sid), str(score.get("group")), score.get("extra") or {}))
    return tuple(rows)


def request_timings(run_root: Path, variant: str, task: str, field: str, group: str | None) -> dict[str, float]:
    """request id -> one timing (`ttft_ms`, `itl_ms`, `e2e_ms`) of a timed task's samples, one prompt length's if given."""
    return {sid: float(extra[field]) for sid, g, extra in _timed_rows(run_root, variant, task)
            if isinstance(extra.get(field), (int, float)) and (group is None or g == group)}


def paired_timing_interval(kind: str, base: dict[str, float], cand: dict[str, float],
                           confidence: float) -> Interval | None:
    """Paired t interval of the change in mean timing over the requests both variants timed (the same
    ids, all of them); None when the request sets differ or fewer than 2 are shared."""
    from scipy.stats import ttest_rel

    if kind not in SCALED or set(base) != set(cand) or len(base) < 2:
        return None
    ids = sorted(base)
    b, c = np.array([base[i] for i in ids]), np.array([cand[i] for i in ids])
    if b.mean() == 0:
        return None
    d = c - b
    if np.allclose(d, d[0]):
        low = high = float(d[0])  # no spread: t is undefined, the difference is exact
    else:
        ci = ttest_rel(c, b).confidence_interval(confidence)
        low, high = float(ci.low), float(ci.high)
    m = float(b.mean())
    how = f"paired t on the per-request means ({_shown(kind, float(d.mean()), m)}), {len(ids)} requests matched by id"
    return Interval(_scaled(kind, low, m), _scaled(kind, high, m), how, len(ids))
