"""CUAD balanced accuracy of kept per-item scores, by argmax and by per-task thresholds, with intervals.

The thresholds come from a run's calibration lines (samples/legal.calibration.jsonl: each CUAD
train item asked without its own example, evalsuite.tasks.threshold) and are applied to the
kept test-item log-probabilities of every variant (`evalsuite export`). Prints Markdown:
per variant the headline (mean over tasks of balanced accuracy) under both scorings with 95%
intervals (normal, from the per-task balanced-accuracy standard errors, as the run's own metrics)
and the paired difference from the baseline (paired bootstrap within task x label strata, as
`evalsuite compare`); per task, the baseline's numbers and its threshold; and how far the
calibration run's margins are from the baseline's on test items both answered.

    python scripts/analysis/cuad_calibrated.py CALIBRATION_RUN KEPT_SCORES_DIR [--baseline bf16]

CALIBRATION_RUN is the run folder, or its scores as ``evalsuite export`` keeps them.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from evalsuite.core.rundir import RunDir
from evalsuite.core.types import Metric, Score
from evalsuite.results.scores import read_rows
from evalsuite.stats.metrics import accuracy_interval, by_group
from evalsuite.stats.significance import paired_test
from evalsuite.tasks.balanced import balanced_metrics
from evalsuite.tasks.threshold import apply_threshold, calibration_name, fit_thresholds, margin

TASK = "legal"
CONFIDENCE = 0.95


def kept_scores(path: Path) -> list[Score]:
    return [Score.model_validate(r) for r in read_rows(path)]


def calibration(source: Path, variant: str) -> tuple[list[Score], list[Score]]:
    """(the calibration run's train-item scores, its test-item scores), from its run folder or from
    its scores kept as `evalsuite export` keeps them (<source>/<variant>/*.scores.jsonl.gz)."""
    kept = source / variant
    if (kept / f"{calibration_name(TASK)}.scores.jsonl.gz").is_file():
        return [kept_scores(kept / f"{name}.scores.jsonl.gz") for name in (calibration_name(TASK), TASK)]
    rd = RunDir(source)
    load = lambda name: [Score.model_validate(r["score"]) for r in rd.load_samples(variant, name)]  # noqa: E731
    return load(calibration_name(TASK)), load(TASK)


def headline(scores: list[Score]) -> dict[str, Metric]:
    return {m.name: m for m in balanced_metrics(scores, TASK)}


def interval(m: Metric) -> str:
    low, high = accuracy_interval(m, CONFIDENCE)
    return f"{m.value:.3f} [{low:.3f}, {high:.3f}]"


def paired(base: list[Score], cand: list[Score]) -> str:
    """Candidate minus baseline in points, two-sided 95%, on the items both answered."""
    b = {s.sample_id: s for s in base}
    shared = [s for s in cand if s.sample_id in b]
    one_sided = 1 - (1 - CONFIDENCE) / 2
    t = paired_test([b[s.sample_id].value for s in shared], [s.value for s in shared],
                    [(s.group, s.target) for s in shared], one_sided)
    return f"{-t.drop * 100:+.1f} [{-t.high * 100:+.1f}, {-t.low * 100:+.1f}]"


def variant_table(kept: Path, thresholds: dict[str, float], baseline: str) -> None:
    variants = sorted((p.name for p in kept.iterdir() if (p / f"{TASK}.scores.jsonl.gz").is_file()),
                      key=lambda v: (v != baseline, v))
    scored = {}
    for v in variants:
        raw = kept_scores(kept / v / f"{TASK}.scores.jsonl.gz")
        scored[v] = (raw, [apply_threshold(s, thresholds.get(str(s.group), 0.0)) for s in raw])
    print("| variant | n | says Yes (argmax) | argmax bal. acc. [95%] | diff pt [95%] | says Yes (threshold) "
          "| threshold bal. acc. [95%] | diff pt [95%] |")
    print("|---|---:|---:|---|---|---:|---|---|")
    for v in variants:
        raw, thr = scored[v]
        cells = [v, f"{len(raw):,}"]
        for i, scores in enumerate((raw, thr)):
            yes = sum(s.pred == "Yes" for s in scores) / len(scores)
            diff = "" if v == baseline else paired(scored[baseline][i], scores)
            cells += [f"{yes:.0%}", interval(headline(scores)[f"{TASK}/balanced_acc"]), diff]
        print("| " + " | ".join(cells) + " |")


def task_table(kept: Path, thresholds: dict[str, float], train: list[Score], baseline: str) -> None:
    raw = kept_scores(kept / baseline / f"{TASK}.scores.jsonl.gz")
    thr = [apply_threshold(s, thresholds.get(str(s.group), 0.0)) for s in raw]
    arg, cal = headline(raw), headline(thr)
    trained = headline([apply_threshold(s, thresholds.get(str(s.group), 0.0)) for s in train])
    print(f"| task ({baseline}) | n | threshold | train bal. acc. | argmax bal. acc. [95%] | threshold bal. acc. [95%] |")
    print("|---|---:|---:|---:|---|---|")
    for group, items in by_group(raw).items():
        name = f"{TASK}/balanced_acc/{group}"
        print(f"| {group} | {len(items)} | {thresholds.get(group, 0.0):+.3f} | {trained[name].value:.2f} "
              f"| {interval(arg[name])} | {interval(cal[name])} |")


def numerics(kept: Path, test: list[Score], thresholds: dict[str, float], baseline: str) -> None:
    """How the calibration run's margins differ from the kept ones on the same test items, and how
    much the baseline's headline moves with every threshold shifted by the largest such difference."""
    base = {s.sample_id: s for s in kept_scores(kept / baseline / f"{TASK}.scores.jsonl.gz")}
    pairs = [(margin(s.extra["logprobs"]), margin(base[s.sample_id].extra["logprobs"])) for s in test
             if s.sample_id in base]
    diffs = np.array([a - b for a, b in pairs if a is not None and b is not None and math.isfinite(a - b)])
    if not len(diffs):
        return
    flips = sum((a >= 0) != (b >= 0) for a, b in pairs if a is not None and b is not None)
    print(f"Calibration run vs kept {baseline} on the {len(diffs)} test items both answered: margin difference "
          f"median {np.median(diffs):+.3f}, mean {diffs.mean():+.3f}, mean |diff| {np.abs(diffs).mean():.3f}, "
          f"max |diff| {np.abs(diffs).max():.3f} (nats); argmax answer differs on {flips}.")
    shift = float(np.abs(diffs).max())
    moved = [headline([apply_threshold(s, thresholds.get(str(s.group), 0.0) + d) for s in base.values()])
             [f"{TASK}/balanced_acc"].value for d in (-shift, shift)]
    print(f"Every threshold shifted by -{shift:.3f} / +{shift:.3f}: {baseline}'s threshold balanced accuracy "
          f"{moved[0]:.3f} / {moved[1]:.3f}.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="run folder with samples/legal.calibration.jsonl, or its exported scores")
    ap.add_argument("kept", type=Path, help="kept scores: <variant>/legal.scores.jsonl.gz")
    ap.add_argument("--baseline", default="bf16")
    ap.add_argument("--run-variant", default="bf16", help="the calibration run's variant")
    args = ap.parse_args()
    train, test = calibration(args.run, args.run_variant)
    if not train:
        raise SystemExit(f"{args.run}: no {calibration_name(TASK)} samples for {args.run_variant}")
    thresholds = fit_thresholds(train)
    variant_table(args.kept, thresholds, args.baseline)
    print()
    task_table(args.kept, thresholds, train, args.baseline)
    print()
    numerics(args.kept, test, thresholds, args.baseline)


if __name__ == "__main__":
    main()
