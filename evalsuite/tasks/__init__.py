"""Tasks: each module holds a config model (`type` discriminates) whose build() makes a Task.

The one registry: Python task types below; any other `type` names a definition file in the
`evalsuite/tasks/defs/` folder (evalsuite.tasks.spec), so adding such a task needs no code here.
May import: core, stats, data.
"""

from typing import Annotated, Any, Union

from pydantic import Discriminator, Tag

from evalsuite.tasks.base import Task, TaskContext
from evalsuite.tasks.legal import LegalConfig
from evalsuite.tasks.lmeval import LMEvalConfig
from evalsuite.tasks.longlegal import LongLegalConfig
from evalsuite.tasks.longlegal_multi import LongLegalMultiConfig
from evalsuite.tasks.mmlu import MMLUConfig
from evalsuite.tasks.needle import NeedleConfig
from evalsuite.tasks.ruler import RulerConfig
from evalsuite.tasks import spec
from evalsuite.tasks.spec import ChoiceConfig
from evalsuite.tasks.workload import WorkloadConfig

PYTHON_TASKS = {c.model_fields["type"].default: c
                for c in (MMLUConfig, LegalConfig, NeedleConfig, LongLegalConfig, WorkloadConfig, LMEvalConfig,
                          RulerConfig, LongLegalMultiConfig)}
DEFINED = "defined"  # the tag of tasks defined in evalsuite/tasks/defs/*.yaml
spec.PYTHON_TYPES.update(PYTHON_TASKS)


def task_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if kind in PYTHON_TASKS else DEFINED


def config_class(tag: str) -> type:
    return PYTHON_TASKS.get(tag, ChoiceConfig)


TaskConfig = Annotated[Union[tuple(Annotated[c, Tag(k)] for k, c in PYTHON_TASKS.items())
                             + (Annotated[ChoiceConfig, Tag(DEFINED)],)], Discriminator(task_kind)]

__all__ = ["Task", "TaskContext", "TaskConfig", "MMLUConfig", "LegalConfig", "NeedleConfig", "LongLegalConfig",
           "WorkloadConfig", "LMEvalConfig", "RulerConfig", "LongLegalMultiConfig", "ChoiceConfig", "PYTHON_TASKS", "task_kind", "config_class"]
