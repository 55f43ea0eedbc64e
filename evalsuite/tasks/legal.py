"""LegalBench CUAD clause classification: few-shot Yes/No, balanced accuracy per task."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from evalsuite.tasks.base import Task, TaskContext


class LegalConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["legal"] = "legal"
    name: str = "legal"
    data_dir: str | None = None  # folder of <task>/{train,test}.tsv; else HF nguha/legalbench
    tasks: list[str] | None = None
    num_fewshot: int | None = None  # None: every train.tsv example, as LegalBench does
    limit_per_task: int | None = None
    chat: bool = False

    def build(self, ctx: TaskContext) -> Task:
        raise NotImplementedError
