"""Needle in a haystack over a length x depth grid, single and multi-key/value needles."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from evalsuite.tasks.base import Task, TaskContext


class NeedleConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["needle"] = "needle"
    name: str = "needle"
    haystack: str = "paul_graham"  # paul_graham | licensedcode | a folder of .txt files
    lengths: list[int] = Field(default_factory=lambda: [1024, 2048])
    depths: list[float] = Field(default_factory=lambda: [0.0, 0.5, 1.0])
    seeds: int = 1
    needle: Literal["single", "multikey", "multivalue"] = "single"
    answer_tokens: int = 16
    chat: bool = True

    def build(self, ctx: TaskContext) -> Task:
        raise NotImplementedError
