"""legal_long_multi: answers from two clauses of one contract, or from a clause found by meaning."""

from __future__ import annotations

import re

import pytest

from evalsuite.core.types import Completion
from evalsuite.models.tiny import train_tokenizer
from evalsuite.run.config import RunConfig
from evalsuite.tasks.base import TaskContext
from evalsuite.tasks.longlegal_multi import QUESTIONS, TEMPLATES, LongLegalMultiConfig, plant_terms
from tests.test_longlegal import write_licenses

STOP = {"what", "the", "to", "of", "a", "an", "answer", "with", "only", "number", "in", "is", "for"}


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer()


@pytest.fixture(scope="module")
def task(tokenizer, tmp_path_factory):
    folder = write_licenses(tmp_path_factory.mktemp("legal") / "licenses")
    ctx = TaskContext(base_dir=folder.parent, cache_dir=folder.parent / "cache", tokenizer=tokenizer,
                      max_model_len=4096)
    return LongLegalMultiConfig(haystack=folder.name, lengths=[1024, 2048], depths=[0.0, 0.5, 1.0]).build(ctx)


def test_two_clauses_at_two_depths_and_the_answer_in_neither(task, tokenizer):
    samples = task.samples()
    assert len(samples) == 2 * 3 * len(QUESTIONS)
    for s in samples:
        assert len(s.request.prompt_token_ids) + s.request.max_tokens == s.meta["length"]
        text = tokenizer.decode(s.request.prompt_token_ids)
        terms = plant_terms(s.meta["seed"], s.meta["length"], s.meta["depth"])
        first, second, _ = TEMPLATES[s.meta["clause"]]
        at = [text.find(c.format(**terms)) for c in (first, second) if c]
        assert all(p >= 0 for p in at), s.id
        if second:  # half a document apart, and the answer is stated by neither clause
            assert abs(at[0] - at[1]) > len(text) / 4, s.id
            assert not re.search(rf"(?<![\d,]){s.target}(?!\d)", text.replace(",", "")), s.id
    notice = next(s for s in samples if s.meta["clause"] == "notice_extended")
    terms = plant_terms(notice.meta["seed"], notice.meta["length"], notice.meta["depth"])
    assert notice.target == str(int(terms["notice"]) + int(terms["extra"]))
    cap = next(s for s in samples if s.meta["clause"] == "liability_cap")
    terms = plant_terms(cap.meta["seed"], cap.meta["length"], cap.meta["depth"])
    assert cap.target == str(int(terms["fee"].replace(",", "")) * int(terms["multiple"]))


def test_late_charge_shares_no_content_word_with_its_question():
    clause, second, question = TEMPLATES["late_charge"]
    words = lambda t: {w for w in re.findall(r"[a-z]+", t.lower()) if w not in STOP}  # noqa: E731
    assert second is None and not words(question) & words(clause.format(rate="2.5"))


def test_scoring_reads_the_number_and_metrics_break_down_by_question(task):
    samples = [s for s in task.samples() if s.meta["length"] == 1024]
    cap = next(s for s in samples if s.meta["clause"] == "liability_cap")
    assert task.score(cap, Completion(text=f" ${int(cap.target):,}.")).value == 1.0
    scores = [task.score(s, Completion(text=s.target if s.meta["clause"] == "late_charge" else "12"))
              for s in samples]
    metrics = {m.name: m for m in task.metrics(scores)}
    assert metrics["legal_long_multi/acc/late_charge"].value == 1.0
    assert metrics["legal_long_multi/acc/notice_extended"].value == 0.0
    assert metrics["legal_long_multi/acc/len1024"].n == len(samples)


def test_config_takes_the_task_type():
    cfg = RunConfig.model_validate({"model": {"path": "m"}, "variants": {"bf16": {}},
                                    "tasks": [{"type": "legal_long_multi", "lengths": [4096],
                                               "questions": ["late_charge"]}]})
    assert cfg.tasks[0].name == "legal_long_multi" and cfg.tasks[0].clauses == ["late_charge"]
    with pytest.raises(ValueError, match="questions"):
        RunConfig.model_validate({"model": {"path": "m"}, "variants": {"bf16": {}},
                                  "tasks": [{"type": "legal_long_multi", "questions": ["late_charge"] * 2}]})
