"""Legal clauses at long context: sizing, planted clauses, extraction, filtering, metrics."""

from __future__ import annotations

import random

import pytest
from pydantic import TypeAdapter

from evalsuite.core.errors import ConfigError
from evalsuite.core.types import Completion
from evalsuite.models.tiny import train_tokenizer
from evalsuite.tasks import TaskConfig
from evalsuite.tasks.base import TaskContext
from evalsuite.tasks.longlegal import (
    CLAUSE_KINDS,
    CLAUSES,
    LongLegalConfig,
    conflicts,
    contract_documents,
    normalize_answer,
    plant_values,
)

PHRASES = ["Permission is hereby granted, free of charge, to any person obtaining a copy of this software",
           "the above copyright notice and this permission notice shall be included in all copies",
           "THE SOFTWARE IS PROVIDED AS IS, WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED",
           "in no event shall the authors or copyright holders be liable for any claim",
           "redistribution and use in source and binary forms, with or without modification, are permitted",
           "the licensee shall not sublicense the rights granted under this license",
           "neither the name of the copyright holder nor the names of its contributors may be used"]


def write_licenses(folder, files=12, paragraphs=30, seed=0):
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        body = "\n\n".join(". ".join(rng.sample(PHRASES, 3)).capitalize() + "." for _ in range(paragraphs))
        (folder / f"lic{f}.LICENSE").write_text(f"---\nkey: lic{f}\ncategory: Permissive\n---\n\n{body}\n")
    return folder


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer()


@pytest.fixture(scope="module")
def lic_dir(tmp_path_factory):
    folder = write_licenses(tmp_path_factory.mktemp("legal") / "licenses")
    # documents that carry their own answers must never reach a haystack
    (folder / "gov.LICENSE").write_text("This license is governed by the laws of the State of Texas. " * 30)
    (folder / "days.txt").write_text("Payment is due within 45 days of the invoice date. " * 30)
    return folder


def make_ctx(tokenizer, folder, max_model_len=4096):
    return TaskContext(base_dir=folder.parent, cache_dir=folder.parent / "cache", tokenizer=tokenizer,
                       max_model_len=max_model_len)


def build(tokenizer, folder, **kw):
    kw.setdefault("haystack", folder.name)
    return LongLegalConfig(**kw).build(make_ctx(tokenizer, folder))


@pytest.mark.parametrize("chat", [True, False])
def test_prompt_plus_answer_budget_is_the_cell_length(tokenizer, lic_dir, chat):
    samples = build(tokenizer, lic_dir, lengths=[900, 1500, 2048], depths=[0, 0.5, 1.0], chat=chat).samples()
    assert len(samples) == 3 * 3 * len(CLAUSE_KINDS)
    for s in samples:
        assert len(s.request.prompt_token_ids) + s.request.max_tokens == s.meta["length"]


def test_each_question_is_answered_by_the_planted_article(tokenizer, lic_dir):
    samples = build(tokenizer, lic_dir, lengths=[1024], depths=[0.5]).samples()
    assert [s.meta["clause"] for s in samples] == list(CLAUSE_KINDS)  # a cell's questions run together
    for s in samples:
        text = tokenizer.decode(s.request.prompt_token_ids)
        clause_text, question = CLAUSES[s.meta["clause"]]
        assert clause_text.format(v=s.meta["planted"]) in text
        assert text.count("ARTICLE 12. GENERAL PROVISIONS") == 1
        assert question in text and text.rstrip().endswith("Answer:")
        assert "Texas" not in text and "45 days" not in text
        assert normalize_answer(s.meta["clause"], s.meta["planted"]) == s.target
        article = tokenizer.decode(s.request.prompt_token_ids[s.meta["article_token"]:][:20])
        assert "ARTICLE 12" in article


def test_questions_of_a_cell_share_the_document(tokenizer, lic_dir):
    samples = build(tokenizer, lic_dir, lengths=[1024], depths=[0.5]).samples()
    first = samples[0].request.prompt_token_ids
    for s in samples[1:]:
        ids = s.request.prompt_token_ids
        shared = next((i for i, (a, b) in enumerate(zip(first, ids)) if a != b), len(ids))
        assert shared > s.meta["article_token"] + 100


def test_planted_numbers_differ_across_clauses():
    for seed in range(50):
        v = plant_values(seed, 1024, 50)
        nums = [v[k] for k in ("notice_period", "renewal_term", "payment_terms")]
        assert len(set(nums)) == 3
        assert v == plant_values(seed, 1024, 50)


@pytest.mark.parametrize("kind,text,want", [
    ("governing_law", " the State of New York.", "new york"),
    ("governing_law", "West Virginia", "west virginia"),
    ("governing_law", " I do not know", ""),
    ("notice_period", " 30 days", "30"),
    ("liability_cap", " $1,250,000.", "1250000"),
    ("liability_cap", " $1.25 million", "1250000"),
    ("liability_cap", "2,416,000", "2416000"),
    ("renewal_term", " twelve", ""),
])
def test_normalize_answer(kind, text, want):
    assert normalize_answer(kind, text) == want


def test_scoring_exact_match_after_normalization(tokenizer, lic_dir):
    task = build(tokenizer, lic_dir, lengths=[1024], depths=[0.5])
    by_kind = {s.meta["clause"]: s for s in task.samples()}
    s = by_kind["liability_cap"]
    assert task.score(s, Completion(text=f" ${s.meta['planted']} (the cap)")).value == 1.0
    assert task.score(s, Completion(text=" $1")).value == 0.0
    g = by_kind["governing_law"]
    assert task.score(g, Completion(text=f" {g.meta['planted'].upper()}.")).value == 1.0
    n = by_kind["notice_period"]
    wrong = by_kind["payment_terms"].meta["planted"]
    assert task.score(n, Completion(text=f" {wrong} days")).value == 0.0


def test_conflicting_documents_are_left_out(lic_dir, tmp_path):
    assert conflicts("governed by the laws of the State of Texas") and conflicts("within thirty (30) days")
    assert conflicts("a fee of $5") and not conflicts("Permission is hereby granted.")
    names = {d.name for d in contract_documents(lic_dir)}
    assert "gov.LICENSE" not in names and "days.txt" not in names and len(names) == 12
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "a.txt").write_text("Notice must be given 10 days ahead. " * 40)
    with pytest.raises(ConfigError, match="free of"):
        contract_documents(bad)


def test_refusal_beyond_max_model_len(tokenizer, lic_dir):
    cfg = LongLegalConfig(haystack=lic_dir.name, lengths=[2048, 32768])
    with pytest.raises(ConfigError, match="max_model_len"):
        cfg.build(make_ctx(tokenizer, lic_dir, max_model_len=8192))


def test_metrics(tokenizer, lic_dir):
    task = build(tokenizer, lic_dir, lengths=[1024, 2048], depths=[0.0, 1.0],
                 clauses=["governing_law", "notice_period"])
    samples = task.samples()
    assert samples[0].id == "legal_long-s0-len2048-d100-governing_law"
    scores = [task.score(s, Completion(text=s.meta["planted"] if s.meta["clause"] == "governing_law" else "x",
                                       prompt_tokens=s.meta["prompt_tokens"], cached_prompt_tokens=0)) for s in samples]
    m = {x.name: x.value for x in task.metrics(scores)}
    assert task.primary_metric == "legal_long/acc" and m["legal_long/acc"] == 0.5
    assert m["legal_long/acc/governing_law"] == 1.0 and m["legal_long/acc/notice_period"] == 0.0
    assert m["legal_long/acc/len1024_depth100"] == 0.5 and "legal_long/acc/len2048" in m
    assert m["legal_long/uncached_prompt_tokens_total"] == m["legal_long/prompt_tokens_total"] == \
        sum(s.meta["prompt_tokens"] for s in samples)


def test_config_union():
    raw = {"type": "legal_long", "lengths": [4096], "clauses": ["renewal_term"]}
    cfg = TypeAdapter(TaskConfig).validate_python(raw)
    assert isinstance(cfg, LongLegalConfig) and cfg.name == "legal_long"
    with pytest.raises(Exception):
        TypeAdapter(TaskConfig).validate_python({"type": "legal_long", "clauses": ["arbitration"]})
