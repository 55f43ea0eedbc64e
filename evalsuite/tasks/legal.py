"""LegalBench CUAD clause classification: few-shot Yes/No, balanced accuracy per task.

Prompts are LegalBench's own: `base_prompt.txt` (an instruction, then every train.tsv example
as "Clause: ...\\nLabel: Yes|No") with `{{text}}` replaced by the test clause. The base prompts
are exactly instruction + train.tsv examples, so a prompt with fewer shots (`num_fewshot`) or
without a base prompt (the hub copy has none) is built the same way from train.tsv. The answer
is read from the next token's log-probabilities of " Yes" and " No" (case-insensitive, as
LegalBench normalizes generations; "Yes" and "No" in chat mode, as lm-eval), one request per
clause; `choice_tokens: fold` also counts them with or without the space (see
evalsuite.tasks.choice, also for ties and items with neither label in the top-k, reported as
`legal/tie_rate` and `legal/no_choice_rate`).

`scoring: threshold` (the default) judges each clause by the Yes-minus-No log-probability margin
against a threshold fitted per clause type on its train.tsv items (evalsuite.tasks.threshold):
argmax over Yes/No measures a small model's bias to "Yes" (Qwen2.5-Coder-1.5B says Yes to 98% of
clauses, balanced accuracy 0.52 whatever the variant), the margin what it knows. The headline
`legal/balanced_acc` follows the items' scoring; `legal/argmax_balanced_acc` beside it is
LegalBench's own rule (its numbers compare with published LegalBench results); `scoring: argmax`
makes that the headline and sends no train items.

`limit_per_task` draws a label-stratified sample, seeded per task and label, with equal counts
of Yes and No where both have enough items (the rest from the larger label). Equal, not
proportional: balanced accuracy is the mean of the two labels' recalls, so its standard error
is smallest with the same n behind each recall, and a subset of two or more items never loses
a label (CUAD's test sets are near 50/50 anyway, so the two allocations differ by a few
items). Plain `acc` on such a subset weights the labels equally, not as the full test set does.
"""

from __future__ import annotations

import math
import random
import re
from collections import defaultdict
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from evalsuite.data.tables import check_names, hub_reachable, read_records, resolve_dir
from evalsuite.core.errors import ConfigError
from evalsuite.stats.metrics import accuracy, balanced_accuracy, by_group, score_meaning
from evalsuite.tasks.base import DatasetTask, Task, TaskContext
from evalsuite.tasks.choice import (ChoiceTokens, chat_prompt_ids, choice_rates, choice_request, fit_request,
                                    score_choice, target_delimiter)
from evalsuite.tasks.threshold import CALIBRATION_META, Scoring, ThresholdScoring, argmax_value, thresholded
from evalsuite.core.types import Completion, Metric, MetricKind, Sample, Score

HUB_ID = "nguha/legalbench"
LABELS = ["Yes", "No"]


def bundled_dir() -> Path:
    """The 30 CUAD tasks shipped as package data (evalsuite/tasks/defs/data/legalbench-cuad, CC BY 4.0)."""
    return Path(__file__).resolve().parent / "defs" / "data" / "legalbench-cuad"


class LegalConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["legal"] = "legal"
    name: str = "legal"
    data_dir: str | None = None  # folder of <task>/{train,test}.tsv; else the bundled copy, else the hub
    tasks: list[str] | None = None
    num_fewshot: int | None = Field(default=None, ge=0)  # None: every train.tsv example, as LegalBench does
    limit_per_task: int | None = Field(default=None, ge=1)  # a label-stratified sample per task, equal Yes and No
    chat: bool = False
    choice_tokens: ChoiceTokens = "lm_eval"  # " Yes"/" No" only; fold: with or without the space
    scoring: Scoring = "threshold"  # argmax: LegalBench's rule, the likelier of Yes/No (module doc)

    def build(self, ctx: TaskContext) -> Task:
        key = f"tasks.{self.name}"
        if self.num_fewshot is not None and self.num_fewshot < 0:
            raise ConfigError(f"{key}.num_fewshot: must be >= 0, got {self.num_fewshot}")
        if self.limit_per_task is not None and self.limit_per_task < 1:
            raise ConfigError(f"{key}.limit_per_task: must be >= 1, got {self.limit_per_task}")
        if self.chat and (ctx.tokenizer is None or not getattr(ctx.tokenizer, "chat_template", None)):
            raise ConfigError(f"{key}.chat: needs the model's tokenizer with a chat template")
        return LegalTask(self, ctx)


def label_of(row: dict[str, Any]) -> str:
    """'Yes'/'No' from a `label` or `answer` column, whatever its case or padding."""
    raw = str(row["label"] if "label" in row else row["answer"]).strip()
    for label in LABELS:
        if raw.lower() == label.lower():
            return label
    raise ValueError(f"label {raw!r} is neither Yes nor No")


def fill_template(template: str, row: dict[str, Any]) -> str:
    """LegalBench's generate_prompts: each column `k` replaces `{{k}}`."""
    unfilled = set(re.findall(r"\{\{(\w+)\}\}", template)) - {str(k) for k in row}
    if unfilled:  # checked before filling: a clause may itself contain "{{"
        raise ValueError(f"prompt template placeholders {sorted(unfilled)} have no column")
    prompt = template
    for k, v in row.items():
        prompt = prompt.replace("{{" + str(k) + "}}", str(v))
    return prompt


def instruction_of(base_prompt: str | None, task: str) -> str:
    """The base prompt's instruction (its first paragraph), or a generic one without it."""
    if base_prompt:
        return base_prompt.split("\n\nClause: ")[0]
    return f"Does the clause below contain a {task.replace('_', ' ')} provision? Answer Yes or No."


def build_template(instruction: str, shots: list[dict[str, Any]]) -> str:
    examples = "".join(f"Clause: {s['text']}\nLabel: {label_of(s)}\n\n" for s in shots)
    return f"{instruction}\n\n{examples}Clause: {{{{text}}}}\nLabel:"


def task_template(base_prompt: str | None, train: list[dict[str, Any]], num_fewshot: int | None, task: str) -> str:
    if base_prompt is not None and num_fewshot is None:
        return base_prompt
    shots = train if num_fewshot is None else train[:num_fewshot]
    return build_template(instruction_of(base_prompt, task), shots)


class TaskData:
    """One clause type's files: base prompt (if any), train rows (shots), test rows."""

    def __init__(self, base_prompt: str | None, train: list[dict[str, Any]], test: list[dict[str, Any]]):
        self.base_prompt, self.train, self.test = base_prompt, train, test


def dir_source(root: Path, key: str) -> tuple[list[str], Any]:
    if not root.is_dir():
        raise ConfigError(f"{key}: {root} is not a folder")
    names = sorted(p.name for p in root.iterdir() if (p / "test.tsv").is_file())
    if not names:
        raise ConfigError(f"{key}: {root} has no <task>/test.tsv folders")

    def load(task: str) -> TaskData:
        folder = root / task
        base = folder / "base_prompt.txt"
        train = read_records(folder / "train.tsv") if (folder / "train.tsv").is_file() else []
        return TaskData(base.read_text() if base.is_file() else None, train, read_records(folder / "test.tsv"))

    return names, load


def hub_source() -> tuple[list[str], Any]:
    """nguha/legalbench's `cuad_*` configs, named as the local folders (hyphens as underscores)."""
    from datasets import get_dataset_config_names, load_dataset

    configs = {c[len("cuad_"):].replace("-", "_"): c for c in get_dataset_config_names(HUB_ID) if c.startswith("cuad_")}

    def load(task: str) -> TaskData:
        train = load_dataset(HUB_ID, configs[task], split="train").to_list()
        return TaskData(None, train, load_dataset(HUB_ID, configs[task], split="test").to_list())

    return sorted(configs), load


def open_source(cfg: LegalConfig, ctx: TaskContext) -> tuple[str, list[str], Any]:
    if cfg.data_dir:
        root = resolve_dir(cfg.data_dir, ctx.base_dir)
        return str(root), *dir_source(root, f"tasks.{cfg.name}.data_dir")
    bundled = bundled_dir()
    if bundled.is_dir():
        return str(bundled), *dir_source(bundled, f"tasks.{cfg.name}.data_dir")
    if hub_reachable():
        return f"hub:{HUB_ID}", *hub_source()
    raise ConfigError(f"tasks.{cfg.name}.data_dir: not set, no bundled copy at {bundled} and the Hugging Face hub "
                      "is not reachable; "
                      "point it at a folder of LegalBench task folders (<task>/train.tsv, test.tsv, base_prompt.txt)")


class LegalTask(ThresholdScoring, DatasetTask):
    metric = "balanced_acc"
    chance = 0.5  # balanced accuracy of any answer that ignores the clause

    def __init__(self, cfg: LegalConfig, ctx: TaskContext):
        super().__init__(cfg, ctx)
        self.scoring = cfg.scoring

    def _build(self) -> list[Sample]:
        self.source, available, load = open_source(self.cfg, self.ctx)
        # LegalBench's own spelling (cuad_anti-assignment) names the same task as the folder
        given = [t.removeprefix("cuad_").replace("-", "_") for t in self.cfg.tasks or []]
        names = list(dict.fromkeys(given or available))
        check_names(names, available, f"tasks.{self.name}.tasks", "task")
        data = {task: load(task) for task in names}
        self._calibration = ([s for task in names for s in self._calibration_samples(task, data[task])]
                             if self.scoring == "threshold" else [])
        return [s for task in names for s in self._task_samples(task, data[task])]

    def _request(self, prompt: str):
        if self.cfg.chat:
            req = choice_request(prompt_token_ids=chat_prompt_ids(self.ctx.tokenizer, [
                {"role": "user", "content": prompt}], f"tasks.{self.name}.chat"))
        else:
            req = choice_request(prompt=prompt)
        return fit_request(req, self.ctx.tokenizer, self.ctx.max_model_len)

    def _labels(self, task: str, rows: list[dict[str, Any]], split: str) -> list[str]:
        try:
            return [label_of(r) for r in rows]
        except ValueError as e:
            raise ConfigError(f"tasks.{self.name}.data_dir: {task}/{split}: {e}") from None

    def _task_samples(self, task: str, data: TaskData) -> list[Sample]:
        cfg, key = self.cfg, f"tasks.{self.name}"
        if cfg.num_fewshot is not None and cfg.num_fewshot > len(data.train):
            raise ConfigError(f"{key}.num_fewshot: {task} has only {len(data.train)} train examples, asked {cfg.num_fewshot}")
        template = task_template(data.base_prompt, data.train, cfg.num_fewshot, task)
        labels = self._labels(task, data.test, "test")
        out = []
        for i in stratified_subset(labels, cfg.limit_per_task, self.ctx.seed, task):
            req, truncated = self._request(fill_template(template, data.test[i]))
            out.append(Sample(id=f"{task}/test/{i}", task=self.name, request=req, target=labels[i],
                              choices=list(LABELS), group=task, meta={"truncated": True} if truncated else {}))
        return out

    def _calibration_samples(self, task: str, data: TaskData) -> list[Sample]:
        """Every train item, asked with the other train items as its shots (leave one out: see
        evalsuite.tasks.threshold for why its own example must not be in its prompt)."""
        labels = self._labels(task, data.train, "train")
        instruction = instruction_of(data.base_prompt, task)
        out = []
        for i, row in enumerate(data.train):
            others = [r for j, r in enumerate(data.train) if j != i]
            shots = others if self.cfg.num_fewshot is None else others[:self.cfg.num_fewshot]
            req, truncated = self._request(fill_template(build_template(instruction, shots), row))
            out.append(Sample(id=f"{task}/train/{i}", task=self.name, request=req, target=labels[i],
                              choices=list(LABELS), group=task,
                              meta={CALIBRATION_META: True, **({"truncated": True} if truncated else {})}))
        return out

    def score(self, sample: Sample, completion: Completion) -> Score:
        # LegalBench lower-cases generations before comparing, so " yes" counts as " Yes"
        return self.judge(sample, score_choice(self.name, sample, completion, self.cfg.choice_tokens, casefold=True,
                                               delimiter=target_delimiter(self.cfg.chat)))

    def metrics(self, scores: list[Score]) -> list[Metric]:
        return balanced_metrics(scores, self.name)


OVER_GROUPS = ("group", "target")  # a balanced accuracy over the task's groups: per group, then per label


def balanced_metrics(scores: list[Score], p: str, grouped: bool = True) -> list[Metric]:
    """`{p}/balanced_acc` (the mean over groups of balanced accuracy, from the items' recorded
    values, so it follows the scoring they were judged by), `{p}/acc`, one balanced accuracy per
    group, the choice rates, and beside a thresholded headline `{p}/argmax_balanced_acc` from the
    recorded log-probabilities. The argmax headline is no mean of the items' recorded values (those
    are the thresholded ones), so it has no strata: no paired test or interval over items is drawn for it."""
    head, per = _headline(scores, f"{p}/balanced_acc", grouped)
    out = [head, accuracy(scores, f"{p}/acc"), *per]
    if thresholded(scores, p):
        argmax = [argmax_value(s) for s in scores if s.extra.get("logprobs")]
        out.append(_headline(argmax, f"{p}/argmax_balanced_acc", grouped)[0].model_copy(update={"strata": None}))
    return out + choice_rates(scores, p)


def _headline(scores: list[Score], name: str, grouped: bool) -> tuple[Metric, list[Metric]]:
    """(the mean over groups of balanced accuracy, or one balanced accuracy without groups; the
    groups' own)."""
    per = [balanced_accuracy(g, f"{name}/{t}") for t, g in by_group(scores).items()] if grouped else []
    return (mean_over_tasks(per, name) if per else balanced_accuracy(scores, name, OVER_GROUPS)), per


def label_quotas(counts: dict[str, int], limit: int) -> dict[str, int]:
    """Items to draw per label: equal shares of `limit`, a label short of its share giving the
    rest to the others; an odd item goes to the larger label (then the later name)."""
    quotas, left = {}, limit
    order = sorted(counts, key=lambda label: (counts[label], label))
    for i, label in enumerate(order):
        quotas[label] = min(counts[label], left // (len(order) - i))
        left -= quotas[label]
    return quotas


def stratified_subset(labels: list[str], limit: int | None, seed: int, stratum: str) -> list[int]:
    """Indices of `limit` items with the labels as even as they allow, in their original order.

    Seeded per stratum and label, so a task's pick does not change when other tasks are
    added or filtered out.
    """
    if limit is None or limit >= len(labels):
        return list(range(len(labels)))
    by_label: dict[str, list[int]] = defaultdict(list)
    for i, label in enumerate(labels):
        by_label[label].append(i)
    quotas = label_quotas({k: len(v) for k, v in by_label.items()}, limit)
    picked = [i for label, idx in sorted(by_label.items())
              for i in random.Random(f"{seed}:{stratum}:{label}").sample(idx, quotas[label])]
    return sorted(picked)


def mean_over_tasks(per_task: list[Metric], name: str) -> Metric:
    """LegalBench's headline: the unweighted mean of per-task balanced accuracies.

    Its stderr is the sampling error of that mean for this fixed set of tasks (per-task
    errors combined), which is what matters when two variants run the same tasks.
    """
    meaning = score_meaning(MetricKind.mean, list(OVER_GROUPS))
    if not per_task:
        return Metric(name=name, value=float("nan"), n=0, **meaning)
    k = len(per_task)
    value = sum(m.value for m in per_task) / k
    ses = [m.stderr for m in per_task]
    se = math.sqrt(sum(s * s for s in ses)) / k if all(s is not None for s in ses) else None
    return Metric(name=name, value=value, stderr=se, n=sum(m.n or 0 for m in per_task), **meaning)
