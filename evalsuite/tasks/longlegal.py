"""Legal clauses at long context: find a planted clause's terms in a long contract.

Each prompt is a contract-like document of exactly L tokens (with the answer budget): an agreement
preamble, real legal prose (licensedcode's full license texts, attached as schedules), and at the
cell's depth an article of general provisions whose terms are drawn from a seed (governing law,
notice period, liability cap, renewal term, payment term). One question per clause kind; haystack
documents that state a governing law, a number of days/months/years or a dollar amount are left out,
so every answer appears only in the planted article. Scoring is exact match after extraction and
normalization (the first U.S. state named; the first number, with "$", commas and "million").

The grid, its schedule, refusal beyond max_model_len and the metric names are the needle task's
(evalsuite.tasks.needle), plus `legal_long/acc/{clause}`. The questions of one cell share the whole
document, so with prefix caching they cost little more than one. docs/tasks.md has the details.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from evalsuite.core.errors import ConfigError
from evalsuite.data.haystack import Document, encode, english_prose, load_documents, prompt_frame, splice
from evalsuite.stats.metrics import accuracy
from evalsuite.tasks.base import Task, TaskContext
from evalsuite.tasks.registry import register_task_type
from evalsuite.tasks.needle import (GridConfig, GridTask, cell_extra, cell_group, check_distinct, depth_pct,
                                    grid_metrics, haystack_budget, schedule_cells)
from evalsuite.core.types import Completion, Metric, Request, Sample, Score

ClauseKind = Literal["governing_law", "notice_period", "liability_cap", "renewal_term", "payment_terms"]
CLAUSE_KINDS: tuple[str, ...] = ("governing_law", "notice_period", "liability_cap", "renewal_term", "payment_terms")

STATES = ("Alabama Alaska Arizona Arkansas California Colorado Connecticut Delaware Florida Georgia Hawaii Idaho "
          "Illinois Indiana Iowa Kansas Kentucky Louisiana Maine Maryland Massachusetts Michigan Minnesota "
          "Mississippi Missouri Montana Nebraska Nevada New_Hampshire New_Jersey New_Mexico New_York "
          "North_Carolina North_Dakota Ohio Oklahoma Oregon Pennsylvania Rhode_Island South_Carolina "
          "South_Dakota Tennessee Texas Utah Vermont Virginia Washington West_Virginia Wisconsin Wyoming")
STATES_LIST = [s.replace("_", " ") for s in STATES.split()]

# (clause text, question); {v} is the planted value as written in the contract
CLAUSES: dict[str, tuple[str, str]] = {
    "governing_law": (
        "Governing Law. This Agreement shall be governed by and construed in accordance with the laws of the "
        "State of {v}, without regard to its conflict of laws principles.",
        "Under this Agreement, the laws of which U.S. state govern the Agreement? "
        "Answer with the name of the state only."),
    "notice_period": (
        "Termination for Convenience. Either party may terminate this Agreement for convenience upon {v} days' "
        "prior written notice to the other party.",
        "How many days of prior written notice must a party give to terminate this Agreement for convenience? "
        "Answer with a number only."),
    "liability_cap": (
        "Limitation of Liability. In no event shall either party's aggregate liability arising out of or related "
        'to this Agreement exceed ${v} (the "Liability Cap").',
        "What is the maximum aggregate liability of either party under this Agreement, in U.S. dollars? "
        "Answer with the amount only."),
    "renewal_term": (
        "Renewal. Upon expiration of the Initial Term, this Agreement shall automatically renew for successive "
        "renewal terms of {v} months each, unless either party gives written notice of non-renewal.",
        "How many months does each automatic renewal term of this Agreement last? Answer with a number only."),
    "payment_terms": (
        "Payment. The Customer shall pay each undisputed invoice within {v} days after its receipt.",
        "Within how many days after receipt must the Customer pay an undisputed invoice? Answer with a number only."),
}

INTRO = ("The following is a long services agreement with its attached schedules. Read it carefully; you will be "
         "asked about one of its terms.\n\nMASTER SERVICES AGREEMENT\n\nThis Master Services Agreement (the "
         '"Agreement") is entered into by and between the Customer and the Provider.\n\n')

# Texts that state their own governing law, periods or amounts would give a second answer.
# Lowercased substrings first: one case-insensitive alternation over 14 MB takes ~3 s.
CONFLICT_WORDS = ("governed by", "governing law", "laws of the state", "laws of the commonwealth", "dollars")
CONFLICT_NUMBERS = re.compile(r"(?:\d|\b(?:five|ten|twelve|fifteen|thirty|sixty|ninety))\s*(?:\(\d+\)\s*)?"
                              r"(?:calendar |business )?(?:day|month|year)s?\b|\$\s?\d")


def conflicts(text: str) -> bool:
    low = text.lower()
    return any(w in low for w in CONFLICT_WORDS) or CONFLICT_NUMBERS.search(low) is not None


@register_task_type
class LongLegalConfig(GridConfig):
    type: Literal["legal_long"] = "legal_long"
    name: str = "legal_long"
    haystack: str = "licensedcode"  # licensedcode | paul_graham | a folder of .txt files
    clauses: list[ClauseKind] = Field(default_factory=lambda: list(CLAUSE_KINDS))  # one question each
    answer_tokens: int = Field(default=16, gt=0)

    @field_validator("clauses")
    @classmethod
    def _check_clauses(cls, v: list[str]) -> list[str]:
        return check_distinct(v, "clauses")

    @property
    def per_cell(self) -> int:  # one question a clause
        return len(self.clauses)

    def build(self, ctx: TaskContext) -> Task:
        return LongLegalTask(self, ctx)


def plant_values(seed: int, length: int, pct: int) -> dict[str, str]:
    """The terms of one cell's contract as written in it; numbers are distinct across clauses
    so that quoting the wrong clause is never right."""
    rng = random.Random(f"legal_long:{seed}:{length}:{pct}")
    days = rng.sample(range(10, 181), 2)
    months = rng.choice([m for m in range(6, 61) if m not in days])
    return {"governing_law": rng.choice(STATES_LIST), "notice_period": str(days[0]),
            "liability_cap": f"{rng.randrange(50, 5000) * 1000:,}", "renewal_term": str(months),
            "payment_terms": str(days[1])}


def normalize_answer(kind: str, text: str) -> str:
    """The answer in `text` in canonical form: a state name lowercased, or a plain integer."""
    if kind == "governing_law":
        names = sorted(STATES_LIST, key=len, reverse=True)  # "West Virginia" before "Virginia"
        m = re.search(r"\b(" + "|".join(map(re.escape, names)) + r")\b", text, re.I)
        return m.group(1).lower() if m else ""
    m = re.search(r"(\d[\d,]*(?:\.\d+)?)\s*(million|thousand)?", text, re.I)
    if not m:
        return ""
    num = float(m.group(1).replace(",", ""))
    num *= {"million": 1e6, "thousand": 1e3}.get((m.group(2) or "").lower(), 1)
    return str(int(num)) if num == int(num) else str(num)


def contract_documents(source: Path) -> list[Document]:
    docs = [d for d in load_documents(source, min_chars=400) if english_prose(d) and not conflicts(d.text)]
    if not docs:
        raise ConfigError(f"haystack: no document in {source} is free of governing-law clauses, periods and "
                          "amounts, which would compete with the planted clauses")
    return docs


class LongLegalTask(GridTask):
    heading = "SCHEDULE {n}"

    def documents(self, src):
        return contract_documents(src)

    def samples(self) -> list[Sample]:
        cells = schedule_cells(self.cfg.lengths, self.cfg.depths, self.seeds, self.cfg.schedule)
        return [self.sample(s, n, d, kind) for s, n, d in cells for kind in self.cfg.clauses]

    def article(self, seed: int, length: int, pct: int) -> tuple[str, dict[str, str]]:
        values = plant_values(seed, length, pct)
        kinds = list(self.cfg.clauses)
        random.Random(f"legal_long:order:{seed}:{length}:{pct}").shuffle(kinds)
        lines = [f"{i}. {CLAUSES[k][0].format(v=values[k])}" for i, k in enumerate(kinds, 1)]
        return "\n\nARTICLE 12. GENERAL PROVISIONS\n\n" + "\n\n".join(lines) + "\n\n", values

    def sample(self, seed: int, length: int, depth: float, kind: str) -> Sample:
        tok, pct = self.ctx.tokenizer, depth_pct(depth)
        text, values = self.article(seed, length, pct)
        prefix, suffix = prompt_frame(tok, INTRO, "\n\nQuestion: " + CLAUSES[kind][1], "Answer:", self.cfg.chat)
        block = encode(tok, text)
        n = haystack_budget(self.name, length, self.cfg.answer_tokens, len(prefix) + len(suffix) + len(block))
        hay = self.haystack(seed)
        pos = hay.position(n, depth)
        ids = prefix + splice(hay.ids[:n], [(pos, block)]) + suffix
        target = normalize_answer(kind, values[kind])
        meta = {"seed": seed, "length": length, "depth": pct, "clause": kind, "planted": values[kind],
                "article_token": len(prefix) + pos, "prompt_tokens": len(ids)}
        req = Request(prompt_token_ids=ids, max_tokens=self.cfg.answer_tokens)
        return Sample(id=f"{self.name}-s{seed}-len{length}-d{pct}-{kind}", task=self.name, request=req,
                      target=target, group=cell_group(length, pct), meta=meta)

    def score(self, sample: Sample, completion: Completion) -> Score:
        pred = normalize_answer(sample.meta["clause"], completion.text)
        extra = cell_extra(sample, completion)
        extra.update(clause=sample.meta["clause"], completion=completion.text.strip()[:200])
        return Score(sample_id=sample.id, task=self.name, value=float(pred == sample.target), pred=pred,
                     target=sample.target, group=sample.group, extra=extra)

    def metrics(self, scores: list[Score]) -> list[Metric]:
        out = grid_metrics(self.name, scores)
        for kind in self.cfg.clauses:
            sub = [s for s in scores if s.extra.get("clause") == kind]
            if sub:
                out.append(accuracy(sub, f"{self.name}/acc/{kind}"))
        return out
