"""Two-choice scoring by a threshold on the log-probability margin, fitted per group on train items.

A small model is often biased towards one answer, and argmax then measures the bias: balanced
accuracy sits at 0.5 whatever the model knows. `scoring: threshold` predicts the first choice iff
d = logp(first) - logp(second) >= t, with t fitted per group (a CUAD clause type) to maximize its
train items' balanced accuracy: the classic fix for a label bias (contextual calibration, Zhao et
al. 2021, "Calibrate before use"); t = 0 is the argmax rule. The train items are the few-shot
examples, each asked without its own example in its shots: with its answer in front of it the model
would copy the label, and the threshold would fit margins the test items never show.
Margins are compared to 1e-4 nats: recorded log-probabilities are float32 roundings of bf16 logits,
so two items the model scores alike can differ by 1e-7, and a threshold between them would split a
tie by rounding noise. The train items are recorded in samples/<task>.calibration.jsonl and every
test score keeps its margin and threshold, so the headline recomputes from the records alone.
The rule and the figures that motivate it: tasks/README.md ("Scoring rules").
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from fractions import Fraction
from typing import Literal

from evalsuite.core.errors import EvalsuiteError
from evalsuite.core.types import Sample, Score
from evalsuite.stats.metrics import by_group
from evalsuite.tasks.choice import argmax_first

Scoring = Literal["argmax", "threshold"]
CALIBRATION_SUFFIX = ".calibration"  # samples/<task>.calibration.jsonl: the train items' lines
CALIBRATION_META = "calibration"  # a calibration sample's meta flag
MARGIN_DECIMALS = 4  # margins closer than this are one margin (module doc)


def calibration_name(task: str) -> str:
    """The samples file stem of a task's calibration items."""
    return task + CALIBRATION_SUFFIX


def margin(logprobs: dict[str, float | None]) -> float | None:
    """logp(first) - logp(second) from a score's recorded log-probabilities (None: outside the
    top-k, so -inf); None when neither choice was seen."""
    a, b = (logprobs.get(c) for c in list(logprobs)[:2])
    if a is None and b is None:
        return None
    return (-math.inf if a is None else a) - (-math.inf if b is None else b)


def decide(d: float | None, threshold: float, choices: Sequence[str]) -> str:
    """The first choice iff d >= threshold; "" (no answer, wrong) when neither choice was seen."""
    if d is None:
        return ""
    return choices[0] if d >= threshold else choices[1]


def _balanced(tp: int, n_pos: int, tn: int, n_neg: int) -> Fraction:
    return (Fraction(tp, n_pos) + Fraction(tn, n_neg)) / 2  # exact: ties compare equal


def fit_threshold(margins: Sequence[float], positive: Sequence[bool]) -> float:
    """The threshold maximizing balanced accuracy of "positive iff margin >= t".

    Of t = 0 (the argmax rule) and the midpoints between adjacent distinct margins, the one with the
    highest balanced accuracy; among equals the one closest to 0, then the lower. So the argmax rule
    stands unless a threshold does strictly better, a group without both labels keeps t = 0, and the
    same margins always give the same threshold.
    """
    margins = [round(d, MARGIN_DECIMALS) if math.isfinite(d) else d for d in margins]
    pos = sorted(d for d, y in zip(margins, positive, strict=True) if y)
    neg = sorted(d for d, y in zip(margins, positive, strict=True) if not y)
    if not pos or not neg:
        return 0.0
    values = sorted({d for d in margins if math.isfinite(d)})
    best = None
    for t in [0.0, *((lo + hi) / 2 for lo, hi in zip(values, values[1:]))]:
        # counts by bisection in the sorted margins: O(n log n) in all
        tp, tn = len(pos) - bisect_left(pos, t), bisect_left(neg, t)
        key = (-_balanced(tp, len(pos), tn, len(neg)), abs(t), t)
        if best is None or key < best:
            best = key
    return best[2]


def fit_thresholds(calibration: Sequence[Score]) -> dict[str, float]:
    """Per group, the threshold fitted on its calibration scores (their recorded log-probabilities)."""
    out = {}
    for group, scores in by_group(calibration).items():
        margins, positive = [], []
        for s in scores:
            lps = s.extra.get("logprobs") or {}
            d = margin(lps)
            if d is not None:  # neither choice seen: no margin to place
                margins.append(d)
                positive.append(s.target == next(iter(lps)))  # the first choice is "positive"
        out[group] = fit_threshold(margins, positive)
    return out


def with_margin(score: Score) -> Score:
    """The score with its margin recorded (None where infinite or undefined: JSON has no infinity;
    the log-probabilities say which)."""
    d = margin(score.extra.get("logprobs") or {})
    return score.model_copy(update={"extra": {**score.extra, "margin": d if d is not None and math.isfinite(d) else None}})


def apply_threshold(score: Score, threshold: float) -> Score:
    """An argmax score judged again by the threshold: pred and value follow it, the argmax answer
    stays recoverable from the log-probabilities."""
    scored = with_margin(score)
    lps = scored.extra.get("logprobs") or {}
    pred = decide(margin(lps), threshold, list(lps))
    return scored.model_copy(update={"pred": pred, "value": float(bool(pred) and pred == score.target),
                                     "extra": {**scored.extra, "threshold": threshold}})


def argmax_value(score: Score) -> Score:
    """The score as argmax over its recorded log-probabilities would have given it."""
    lps = {c: (-math.inf if v is None else v) for c, v in (score.extra.get("logprobs") or {}).items()}
    choices = list(lps)
    pred = argmax_first(lps, choices) if choices and not all(math.isinf(v) for v in lps.values()) else ""
    return score.model_copy(update={"pred": pred, "value": float(bool(pred) and pred == score.target)})


def thresholded(scores: Sequence[Score], task: str) -> bool:
    """Whether the scores were judged by thresholds; a mix of both scorings has no one headline."""
    marked = sum("threshold" in s.extra for s in scores)
    if 0 < marked < len(scores):
        raise EvalsuiteError(f"{task}: {len(scores) - marked} of {len(scores)} recorded items were scored without a "
                             "threshold (an argmax run resumed under scoring: threshold); rerun the task or set "
                             "scoring: argmax")
    return marked > 0


class ThresholdScoring:
    """What a two-choice task needs for `scoring: threshold`: its calibration items (built with its
    samples, into `_calibration`), the thresholds fitted on their scores, and each score judged
    by its group's threshold. Mixed into a DatasetTask that sets `scoring`."""

    scoring: Scoring = "argmax"
    thresholds: dict[str, float] | None = None
    _calibration: list[Sample]

    def calibration_samples(self) -> list[Sample]:
        """The train items to answer before the test items; none under argmax."""
        self.samples()  # builds both
        return self._calibration

    def calibrate(self, scores: Sequence[Score]) -> None:
        self.thresholds = fit_thresholds(scores)

    def judge(self, sample: Sample, score: Score) -> Score:
        if sample.meta.get(CALIBRATION_META):
            return with_margin(score)
        if self.scoring == "argmax":
            return score
        if self.thresholds is None:
            raise RuntimeError(f"{score.task}: test items scored before calibrate()")
        return apply_threshold(score, self.thresholds.get(str(sample.group), 0.0))
