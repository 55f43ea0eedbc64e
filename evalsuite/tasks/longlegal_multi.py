"""Legal long context beyond one clause lookup: answers that need two clauses, or a clause found by meaning.

legal_long asks for a term its planted article states in the question's own words; a model that
finds the sentence has the answer. Here each question needs more:
  notice_extended  a notice period plus an amendment elsewhere that extends it: the answer is the sum
  liability_cap    a cap of "{m} times the Annual Fee" and the fee stated in another article: the product
  late_charge      one clause found by meaning (NoLiMa-style): no content word of the question in it
The two clauses of a question sit at the cell's depth and half a document away from it (wrapped), so
that every depth pair is covered. Haystack, grid, schedule, metrics and scoring are legal_long's, plus
`legal_long_multi/acc/{question}`: the questions differ so much in difficulty (docs/tasks.md has
figures) that the per-question scores, not the pooled `acc`, are the ones to read.
"""

from __future__ import annotations

import random
from typing import Literal

from pydantic import Field, field_validator

from evalsuite.core.types import Request, Sample
from evalsuite.data.haystack import encode, prompt_frame, splice
from evalsuite.tasks.base import Task, TaskContext
from evalsuite.tasks.registry import register_task_type
from evalsuite.tasks.longlegal import INTRO, LongLegalTask, normalize_answer
from evalsuite.tasks.needle import (GridConfig, cell_group, check_distinct, depth_pct, haystack_budget,
                                    schedule_cells)

Question = Literal["notice_extended", "liability_cap", "late_charge"]
QUESTIONS: tuple[str, ...] = ("notice_extended", "liability_cap", "late_charge")

# per question: (the clause at the cell's depth, the clause half a document away or None, question)
TEMPLATES: dict[str, tuple[str, str | None, str]] = {
    "notice_extended": (
        "ARTICLE 12. TERM AND TERMINATION\n\n12.2 Termination for Convenience. Either party may terminate this "
        "Agreement for convenience upon {notice} days' prior written notice to the other party.",
        "AMENDMENT NO. 1\n\nThe parties agree that the notice period set out in Section 12.2 (Termination for "
        "Convenience) is extended by {extra} days. All other terms of the Agreement remain unchanged.",
        "Taking every amendment into account, how many days of prior written notice must a party now give to "
        "terminate this Agreement for convenience? Answer with a number only."),
    "liability_cap": (
        "ARTICLE 14. LIMITATION OF LIABILITY\n\n14.1 Cap. In no event shall either party's aggregate liability "
        "arising out of or related to this Agreement exceed {multiple} times the Annual Fee.",
        'SCHEDULE OF FEES\n\nThe Customer shall pay the Provider an annual fee of ${fee} (the "Annual Fee").',
        "What is the maximum aggregate liability of either party under this Agreement, in U.S. dollars? "
        "Answer with the amount only."),
    "late_charge": (
        "ARTICLE 9. REMITTANCE\n\n9.4 Any sum that is not remitted by the date on which it is owed shall accrue "
        "a surcharge of {rate} percent for each calendar month until settled in full.",
        None,
        "What interest rate applies to overdue invoices? Answer with the number only."),
}


@register_task_type
class LongLegalMultiConfig(GridConfig):
    type: Literal["legal_long_multi"] = "legal_long_multi"
    name: str = "legal_long_multi"
    haystack: str = "licensedcode"  # licensedcode | paul_graham | a folder of .txt files
    questions: list[Question] = Field(default_factory=lambda: list(QUESTIONS))  # one sample each per cell
    answer_tokens: int = Field(default=16, gt=0)

    @field_validator("questions")
    @classmethod
    def _check_questions(cls, v: list[str]) -> list[str]:
        return check_distinct(v, "questions")

    @property
    def clauses(self) -> list[str]:  # legal_long's name for what its metrics break down by
        return self.questions

    @property
    def per_cell(self) -> int:
        return len(self.questions)

    def build(self, ctx: TaskContext) -> Task:
        return LongLegalMultiTask(self, ctx)


def plant_terms(seed: int, length: int, pct: int) -> dict[str, str]:
    """One cell's terms as written; each answer differs from every number the clauses state."""
    rng = random.Random(f"legal_long_multi:{seed}:{length}:{pct}")
    notice, extra = rng.choice(range(15, 91, 5)), rng.choice(range(10, 61, 5))
    fee, multiple = rng.randrange(20, 500) * 1000, rng.choice([2, 3, 4, 5])
    return {"notice": str(notice), "extra": str(extra), "fee": f"{fee:,}", "multiple": str(multiple),
            "rate": rng.choice(["1.5", "2.5", "3.5", "4.5"]),
            "notice_extended": str(notice + extra), "liability_cap": str(fee * multiple)}


class LongLegalMultiTask(LongLegalTask):
    def samples(self) -> list[Sample]:
        cells = schedule_cells(self.cfg.lengths, self.cfg.depths, self.seeds, self.cfg.schedule)
        return [self.sample(s, n, d, q) for s, n, d in cells for q in self.cfg.questions]

    def sample(self, seed: int, length: int, depth: float, kind: str) -> Sample:
        tok, pct = self.ctx.tokenizer, depth_pct(depth)
        terms = plant_terms(seed, length, pct)
        first, second, question = TEMPLATES[kind]
        blocks = [(depth, encode(tok, "\n\n" + first.format(**terms) + "\n\n"))]
        if second:
            blocks.append(((depth + 0.5) % 1.0, encode(tok, "\n\n" + second.format(**terms) + "\n\n")))
        prefix, suffix = prompt_frame(tok, INTRO, "\n\nQuestion: " + question, "Answer:", self.cfg.chat)
        fixed = len(prefix) + len(suffix) + sum(len(b) for _, b in blocks)
        n = haystack_budget(self.name, length, self.cfg.answer_tokens, fixed)
        hay = self.haystack(seed)
        ids = prefix + splice(hay.ids[:n], [(hay.position(n, d), b) for d, b in blocks]) + suffix
        answer = terms.get(kind, terms["rate"])
        meta = {"seed": seed, "length": length, "depth": pct, "clause": kind, "planted": answer,
                "prompt_tokens": len(ids)}
        return Sample(id=f"{self.name}-s{seed}-len{length}-d{pct}-{kind}", task=self.name,
                      request=Request(prompt_token_ids=ids, max_tokens=self.cfg.answer_tokens),
                      target=normalize_answer(kind, answer), group=cell_group(length, pct), meta=meta)

