"""`type: mmlu` and `type: legal` keep their items, prompts, scores and metric keys byte for byte.

Kept results (the results pages' scores) pair variants by sample id, so a run today must ask the
same items under the same ids, with the same prompts, as the runs on record. The digests below
were taken from the runs' own task code; every config is given as a run config writes it, so
old keys (`subjects`, `limit_per_subject`, `tasks`, `limit_per_task`) are checked to keep working.
The metric digests hold the values and the standard errors evalsuite.stats gives them today (macro and
balanced accuracy: over items, the strata fixed); a change of method moves those, never the scores.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest
import yaml
from pydantic import TypeAdapter

from evalsuite.core.types import Completion
from evalsuite.data.assets import default_cache_dir
from evalsuite.results.scores import read_rows
from evalsuite.tasks import TaskConfig, TaskContext

REPO = Path(__file__).resolve().parents[1]
# the kept CPU run of thresholded CUAD (h200-2026-12-01-qwen2.5-coder-1.5b's data), as the tests keep it
KEPT = REPO / "tests/data/results/qwen-1.5b-sample/cuad-calibration-cpu/bf16"


def build(cfg: dict, seed: int = 0, tokenizer=None):
    ctx = TaskContext(base_dir=REPO, cache_dir=default_cache_dir(), seed=seed, tokenizer=tokenizer)
    return TypeAdapter(TaskConfig).validate_python(cfg).build(ctx)


def digest(rows) -> str:
    h = hashlib.sha256()
    n = 0
    for row in rows:
        h.update(json.dumps(row, sort_keys=True).encode())
        n += 1
    return f"{n}:{h.hexdigest()[:16]}"


def sample_digest(samples) -> str:
    return digest([s.id, s.task, s.request.prompt, s.request.prompt_token_ids, s.target, s.choices, s.group, s.meta,
                   s.request.max_tokens, s.request.logprobs] for s in samples)


def answers(n: int, keys: list[str], seed: int = 0) -> list[Completion]:
    rng = random.Random(seed)
    return [Completion(text="", top_logprobs=[{k: round(rng.uniform(-4, 0), 3) for k in keys if rng.random() < 0.9}])
            for _ in range(n)]


def metric_digest(metrics) -> str:
    """Names, values, errors and counts; the order of the per-category lines is not part of a result."""
    return digest(sorted([m.name, round(m.value, 12), None if m.stderr is None else round(m.stderr, 12), m.n]
                         for m in metrics))


SAMPLES = [
    ({"type": "mmlu", "limit_per_subject": 2}, 0, "114:d9e3a894a243b65d"),
    ({"type": "mmlu", "limit_per_subject": 3, "num_fewshot": 0, "subjects": ["marketing", "anatomy"]}, 1,
     "6:5c19dfbf3a79d75f"),
    ({"type": "mmlu"}, 0, "14042:220bfdd11c710cfb"),
    ({"type": "legal"}, 0, "13028:239d2881df69af9b"),
    ({"type": "legal", "limit_per_task": 2}, 0, "60:f3ef8cc4e338cf11"),
    ({"type": "legal", "limit_per_task": 10}, 1, "300:9e4dca0046e9c48e"),
    ({"type": "legal", "num_fewshot": 2, "limit_per_task": 3, "tasks": ["governing_law", "anti_assignment"]}, 0,
     "6:3d0b14aff3885c3f"),
]
CALIBRATION = [
    ({"type": "legal", "limit_per_task": 2}, "180:c7367e4c381d6e6b"),
    ({"type": "legal", "num_fewshot": 2, "limit_per_task": 3, "tasks": ["governing_law", "anti_assignment"]},
     "12:082e75e914c91489"),
]


@pytest.mark.parametrize("cfg,seed,want", SAMPLES, ids=[json.dumps(c[0]) + f" seed {c[1]}" for c in SAMPLES])
def test_items_and_prompts_are_the_recorded_ones(cfg, seed, want):
    assert sample_digest(build(cfg, seed).samples()) == want


@pytest.mark.parametrize("cfg,want", CALIBRATION, ids=[json.dumps(c[0]) for c in CALIBRATION])
def test_calibration_items_are_the_recorded_ones(cfg, want):
    assert sample_digest(build(cfg).calibration_samples()) == want


class _Tok:
    """Token ids that spell the chat messages, so a digest of them sees every message byte."""

    chat_template = "x"

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        return list(json.dumps([messages, add_generation_prompt]).encode())


def test_mmlu_chat_messages_are_the_recorded_ones():
    samples = build({"type": "mmlu", "limit_per_subject": 1, "chat": True}, tokenizer=_Tok()).samples()
    assert sample_digest(samples) == "57:a992aef2fafaeeb4"


def test_mmlu_scores_and_metrics_are_the_recorded_ones():
    task = build({"type": "mmlu", "limit_per_subject": 2})
    samples = task.samples()
    scores = [task.score(s, c) for s, c in zip(samples, answers(len(samples), [" A", " B", " C", " D", "A"]))]
    assert digest(s.model_dump() for s in scores) == "114:2118f8f9118f0954"
    assert metric_digest(task.metrics(scores)) == "65:92b6084aa1503c9e"
    assert task.primary_metric == "mmlu/acc" and task.chance == 0.25


@pytest.mark.parametrize("scoring,want", [
    ("threshold", ("60:c0b6b14ef633f89c", "35:1d42a29f5ff0e661")),
    ("argmax", ("60:adc1b1063c64db19", "34:b9e2e46be2e04b13")),
])
def test_legal_scores_and_metrics_are_the_recorded_ones(scoring, want):
    task = build({"type": "legal", "limit_per_task": 2, "scoring": scoring})
    keys = [" Yes", " No", " yes", "No"]
    calibration = task.calibration_samples()
    task.calibrate([task.score(s, c) for s, c in zip(calibration, answers(len(calibration), keys, seed=1))])
    samples = task.samples()
    scores = [task.score(s, c) for s, c in zip(samples, answers(len(samples), keys))]
    assert (digest(s.model_dump() for s in scores), metric_digest(task.metrics(scores))) == want
    assert task.primary_metric == "legal/balanced_acc" and task.chance == 0.5


def test_a_kept_run_asks_its_recorded_items():
    """The kept CUAD calibration run's config, read as a run reads it, asks the items its scores name."""
    raw = yaml.safe_load((KEPT / "config.yaml").read_text())
    (cfg,) = [dict(t, data_dir=None) for t in raw["tasks"]]  # its data_dir named a folder of the machine it ran on
    task = build(cfg, seed=raw["seed"])
    kept = [r["sample_id"] for r in read_rows(KEPT / "legal.scores.jsonl.gz")]
    kept_calibration = [r["sample_id"] for r in read_rows(KEPT / "legal.calibration.scores.jsonl.gz")]
    assert [s.id for s in task.samples()] == kept
    assert [s.id for s in task.calibration_samples()] == kept_calibration
