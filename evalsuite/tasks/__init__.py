"""Tasks: each module holds a config model (`type` discriminates) whose build() makes a Task.

The one registry: Python task types below; any other `type` names a definition file in the
repository's `tasks/` folder (evalsuite/tasks/defs in the package), or one of its aliases (evalsuite.tasks.spec), so adding such a
task needs no code here.
May import: core, stats, data.
"""

from typing import Annotated, Any, Union

from pydantic import Discriminator, Tag

from evalsuite.core.configfile import HIDDEN_TAGS
from evalsuite.tasks.base import Task, TaskContext
from evalsuite.tasks.lmeval import LMEvalConfig
from evalsuite.tasks.longlegal import LongLegalConfig
from evalsuite.tasks.longlegal_multi import LongLegalMultiConfig
from evalsuite.tasks.needle import NeedleConfig
from evalsuite.tasks.ruler import RulerConfig
from evalsuite.tasks import spec
from evalsuite.tasks.spec import ChoiceConfig
from evalsuite.tasks.workload import WorkloadConfig

PYTHON_TASKS = {c.model_fields["type"].default: c
                for c in (NeedleConfig, LongLegalConfig, WorkloadConfig, LMEvalConfig, RulerConfig, LongLegalMultiConfig)}
DEFINED = "defined"  # the tag of a type defined after import (another $EVALSUITE_TASKS folder)
HIDDEN_TAGS.add(DEFINED)
spec.PYTHON_TYPES.update(PYTHON_TASKS)
# Each shipped definition under its own tag, so that an error's key names it (tasks.0.mmlu.limit)
SHIPPED = spec.task_types()


def task_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if kind in PYTHON_TASKS or kind in SHIPPED else DEFINED


def config_class(tag: str) -> type:
    return PYTHON_TASKS.get(tag, ChoiceConfig)


TaskConfig = Annotated[Union[tuple(Annotated[c, Tag(k)] for k, c in PYTHON_TASKS.items())
                             + tuple(Annotated[ChoiceConfig, Tag(k)] for k in (*SHIPPED, DEFINED))],
                       Discriminator(task_kind)]

__all__ = ["Task", "TaskContext", "TaskConfig", "NeedleConfig", "LongLegalConfig", "WorkloadConfig", "LMEvalConfig",
           "RulerConfig", "LongLegalMultiConfig", "ChoiceConfig", "PYTHON_TASKS", "task_kind", "config_class"]
