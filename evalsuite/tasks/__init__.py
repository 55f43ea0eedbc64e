"""Tasks: each module holds a config model (`type` discriminates) whose build() makes a Task."""

from typing import Annotated, Union

from pydantic import Field

from evalsuite.tasks.base import Task, TaskContext
from evalsuite.tasks.legal import LegalConfig
from evalsuite.tasks.lmeval import LMEvalConfig
from evalsuite.tasks.longlegal import LongLegalConfig
from evalsuite.tasks.mmlu import MMLUConfig
from evalsuite.tasks.needle import NeedleConfig
from evalsuite.tasks.workload import WorkloadConfig

TaskConfig = Annotated[Union[MMLUConfig, LegalConfig, NeedleConfig, LongLegalConfig, WorkloadConfig, LMEvalConfig], Field(discriminator="type")]

__all__ = ["Task", "TaskContext", "TaskConfig", "MMLUConfig", "LegalConfig", "NeedleConfig", "LongLegalConfig", "WorkloadConfig", "LMEvalConfig"]
