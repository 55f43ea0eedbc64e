"""The Python task types a run config's `tasks:` may name, and the union that validates them.

A task type is a config model with a `type` literal that declares what the run asks of it before and
while it runs (TaskType); it registers with `@register_task_type`, which refuses a class that lacks one
of them, and its module is imported by evalsuite/tasks/__init__.py. Any other `type` names a definition
file (evalsuite.tasks.spec: ChoiceConfig). docs/architecture.md, "How to add a task type", has the steps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Protocol, Union

from pydantic import Discriminator, Tag

from evalsuite.core.configfile import HIDDEN_TAGS
from evalsuite.core.errors import UnknownName
from evalsuite.tasks import spec
from evalsuite.tasks.base import Task, TaskContext
from evalsuite.tasks.planning import Planned
from evalsuite.tasks.spec import ChoiceConfig


class TaskType(Protocol):
    """What each task config declares (ChoiceConfig too)."""

    type: str
    name: str

    def build(self, ctx: TaskContext) -> Task:
        """The task, its items made from the config."""

    def planned(self, limit: int | None) -> list[Planned]:
        """The gated metrics it will make and the items behind each, at most `limit` items (`run --limit`);
        [] where it says nothing before it runs (it picks its own items, or makes no accuracy)."""

    def narrow(self, limit: int) -> None:
        """Narrow the config itself for `run --limit` where the runner's thinning of its items (an even
        spread of at most `limit`) is not enough: a harness that picks its own items, or items dear to build."""


DECLARED = ("build", "planned", "narrow")
PYTHON_TASKS: dict[str, type] = {}
DEFINED = "defined"  # the tag of a type defined after import (another $EVALSUITE_TASKS folder)
HIDDEN_TAGS.add(DEFINED)
SHIPPED = spec.task_types()  # the definitions' types, each a tag of its own
_on_register: list[Callable[[Any], None]] = []


def register_task_type(cls: type) -> type:
    """Register a task config class under its `type` default; a decorator."""
    kind = cls.model_fields["type"].default if "type" in getattr(cls, "model_fields", {}) else None
    if not isinstance(kind, str):
        raise TypeError(f"{cls.__name__}: a task type is a pydantic model with a `type` literal and its default")
    missing = [m for m in DECLARED if not callable(getattr(cls, m, None))]
    if missing:
        raise TypeError(f"task type {kind!r}: {cls.__name__} does not declare {', '.join(missing)} "
                        "(evalsuite.tasks.registry.TaskType)")
    if kind in PYTHON_TASKS or spec.definition_path(kind) is not None:
        raise ValueError(f"task type {kind!r} is registered already")
    PYTHON_TASKS[kind] = cls
    spec.PYTHON_TYPES.add(kind)
    if _on_register:  # a type registered after the config models were built (a plugin's, a test's)
        union = task_config()
        for fn in _on_register:
            fn(union)
    return cls


def on_register(fn: Callable[[Any], None]) -> None:
    """Call `fn(task_config())` whenever a task type registers from now on: a model whose field holds
    task configs rebuilds itself with the new union."""
    _on_register.append(fn)


def task_type_names() -> list[str]:
    return sorted({*PYTHON_TASKS, *spec.task_types()})


def task_type(kind: str) -> type:
    """The config class of `type: kind`: a registered Python type's, or ChoiceConfig for a definition file."""
    if kind in PYTHON_TASKS:
        return PYTHON_TASKS[kind]
    if spec.definition_path(kind) is not None:
        return ChoiceConfig
    raise UnknownName("task type", kind, task_type_names())


def task_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if kind in PYTHON_TASKS or kind in SHIPPED else DEFINED


def config_class(tag: str) -> type:
    return PYTHON_TASKS.get(tag, ChoiceConfig)


def task_config() -> Any:
    """The type of one entry of `tasks:`: each Python type and each shipped definition under its own tag,
    so that an error's key names it (tasks.0.mmlu.limit)."""
    return Annotated[Union[tuple(Annotated[c, Tag(k)] for k, c in PYTHON_TASKS.items())
                           + tuple(Annotated[ChoiceConfig, Tag(k)] for k in (*SHIPPED, DEFINED))],
                     Discriminator(task_kind)]
