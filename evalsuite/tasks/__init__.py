"""Tasks: each module holds a config model (`type` discriminates) whose build() makes a Task.

Python task types register themselves (evalsuite.tasks.registry) as their modules are imported below;
any other `type` names a definition file in the repository's `tasks/` folder (evalsuite/tasks/defs in
the package), or one of its aliases (evalsuite.tasks.spec), so adding such a task needs no code here.
May import: core, stats, data.
"""

from evalsuite.tasks.base import Task, TaskContext
from evalsuite.tasks.lmeval import LMEvalConfig
from evalsuite.tasks.longlegal import LongLegalConfig
from evalsuite.tasks.longlegal_multi import LongLegalMultiConfig
from evalsuite.tasks.needle import NeedleConfig
from evalsuite.tasks.registry import (PYTHON_TASKS, config_class, register_task_type, task_config, task_kind,
                                      task_type)
from evalsuite.tasks.ruler import RulerConfig
from evalsuite.tasks.spec import ChoiceConfig
from evalsuite.tasks.workload import WorkloadConfig

# The union as the built-in types make it; a model that holds task configs follows later registrations
# through registry.on_register.
TaskConfig = task_config()

__all__ = ["Task", "TaskContext", "TaskConfig", "NeedleConfig", "LongLegalConfig", "WorkloadConfig", "LMEvalConfig",
           "RulerConfig", "LongLegalMultiConfig", "ChoiceConfig", "PYTHON_TASKS", "task_kind", "config_class",
           "register_task_type", "task_config", "task_type"]
