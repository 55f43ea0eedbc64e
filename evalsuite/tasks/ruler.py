"""RULER's eleven synthetic tasks (NVIDIA, arXiv 2404.06654) at chosen lengths, offline.

    - {type: ruler, lengths: [4096, 8192], n: 12}     # every task; or tasks: [niah_single_1, vt, ...]

Items are lm-eval 0.4.13's, from its own generators made offline at their seams
(evalsuite.tasks.ruler_data); prompt, answer budget and score (string_match_all: the share of the
expected strings the answer contains) are lm-eval's too. Why not the `lm_eval` task type running
lm-eval's RULER tasks: its task functions hard-wire 500 items per length and `limit` keeps the first
documents of all lengths together, i.e. of the first length only; building 500 items per task and
length costs far more than the n a verdict needs; and their items depend on the process-wide random
state left by the tasks built before them. Here each (task, length) gets its own seed and n items.
Every item is a sample `{name}-{task}-len{L}-{i}`, the same ids under every variant (paired tests),
its group `{task}_len{L}`; its meta has the task and `length`, which the paired tests read for the
`len{L}` and `{task}` metrics. Metrics and how to read them: docs/tasks-ruler.md.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator

from evalsuite.core.errors import ConfigError
from evalsuite.core.types import Completion, Metric, MetricKind, Request, Sample, Score
from evalsuite.data.haystack import encode, resolve_source
from evalsuite.stats.metrics import accuracy
from evalsuite.tasks.base import Task, TaskContext
from evalsuite.tasks.planning import Planned, capped, grid
from evalsuite.tasks.registry import register_task_type
from evalsuite.tasks.needle import check_distinct, check_fits, check_lengths

RulerTask = Literal["niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multikey_2",
                    "niah_multikey_3", "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe"]
ALL_TASKS: list[str] = list(get_args(RulerTask))
MIN_ANSWER_TOKENS = 16  # room an answer needs at least once the prompt is in the window
# Below this, lm-eval's generators make items without a haystack (the needle tasks), none (vt), none
# with a word to count (cwe) or, where not even fwe's template fits, never finish one (it retries);
# at 1024 every task makes real items for common tokenizers. RULER's own lengths start at 4096.
MIN_LENGTH = 1024


@register_task_type
class RulerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["ruler"] = "ruler"
    name: str = "ruler"
    lengths: list[int] = Field(default_factory=lambda: [4096])  # RULER's sequence lengths, in tokens
    tasks: list[RulerTask] = Field(default_factory=lambda: list(ALL_TASKS))
    n: int = Field(default=12, ge=1)  # items per task and length
    chat: bool = True  # the item through the model's chat template (instruct models)
    haystack: str = "paul_graham"  # the essays of the essay haystack: paul_graham or a folder of .txt

    @field_validator("lengths")
    @classmethod
    def _check_lengths(cls, v: list[int]) -> list[int]:
        if any(x < MIN_LENGTH for x in check_lengths(v)):
            raise ValueError(f"RULER's tasks need lengths of at least {MIN_LENGTH} tokens (its own tables "
                             "start at 4096)")
        return v

    @field_validator("tasks")
    @classmethod
    def _check_tasks(cls, v: list[str]) -> list[str]:
        return check_distinct(v, "tasks")

    def build(self, ctx: TaskContext) -> Task:
        return RulerTaskRunner(self, ctx)

    def planned(self, limit: int | None) -> list[Planned]:
        return capped(grid(self.name, "score", self.lengths, len(self.tasks) * self.n), limit)

    def narrow(self, limit: int) -> None:
        # a 128K item takes CPU seconds to build: build no more per (task, length) than the limit can
        # keep (the first items do not depend on n, so they are those of a full run)
        self.n = min(self.n, -(-limit // (len(self.tasks) * len(self.lengths))))


# Text of the kinds the generators size besides the essays: lm-eval's noise haystack (niah_single_1,
# vt), needle sentences with words, numbers and uuids (the multi-key haystack is made of them), vt's
# assignments, cwe/fwe's numbered word lists
PROBE = ("The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.\n"
         "One of the special magic numbers for long-context is: 4817329. "
         "One of the special magic uuids for 3f2a9c1e-8b7d-4e6f-a5c4-1d2e3f4a5b6c is: "
         "0b9d7e21-64fa-4c3b-9e58-a7d2c1f04e93.\nVAR ABCDE = 12345\nVAR QWERT = VAR ABCDE\n"
         "1. wonderful 2. jacket 3. ostrich 4. eel 5. 0123456789 \n\n Question: What are the 10 most common words")


def tokenizer_fingerprint(tok, essays: list[str]) -> str:
    """What decides the items: how the tokenizer splits the essays and the generators' other text, and
    its size. By behaviour, not by the tokenizer's serialized definition, which differs between
    tokenizers/transformers versions for one and the same tokenizer (items built on a CPU machine would
    then never serve the GPU machine); the essays take ~1 s to tokenize, the items minutes to build."""
    digest = hashlib.sha256(f"{len(tok)}".encode())
    for text in (" ".join(essays[: len(essays) // 2]), PROBE):  # essay_words holds two copies
        digest.update(" ".join(map(str, encode(tok, text))).encode())
    return digest.hexdigest()[:16]


def hash_words(words: list[str]) -> str:
    return hashlib.sha256(" ".join(words).encode()).hexdigest()[:16]


def read_kept(path: Path) -> list[dict[str, Any]]:
    return json.loads(path.read_text()) if path.is_file() else []


def write_kept(path: Path, items: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")  # several runs may build the same items at once
    tmp.write_text(json.dumps(items))
    tmp.replace(path)


def run_all(fn, calls: list[tuple]) -> list:
    """fn(*args) for each, in order; in spawned processes when more than two cores can share them."""
    workers = min(len(calls), os.cpu_count() or 1)
    if workers <= 2:
        return [fn(*args) for args in calls]
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    # spawn: the parent may hold threads (a tokenizer's, an engine's) that a fork would copy mid-state
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        return list(pool.map(fn, *zip(*calls)))


def group_of(task: str, length: int) -> str:
    return f"{task}_len{length}"


class RulerTaskRunner(Task):
    """Builds the items once per run (the same for every variant), scores answers as lm-eval does."""

    def __init__(self, cfg: RulerConfig, ctx: TaskContext):
        self.cfg, self.ctx, self.name = cfg, ctx, cfg.name
        self.primary_metric = f"{cfg.name}/score"
        self._samples: list[Sample] | None = None

    def samples(self) -> list[Sample]:
        if self._samples is None:
            check_fits(self.name, self.cfg.lengths, self.ctx)
            self._samples = self._build()
        return self._samples

    def _build(self) -> list[Sample]:
        from evalsuite.tasks import ruler_data as rd

        if not all(importlib.util.find_spec(m) for m in ("lm_eval", "wonderwords", "nltk")):
            raise ConfigError(f"tasks: {self.name}: type ruler needs lm-eval's RULER code "
                              "(pip install 'lm-eval[ruler]==0.4.13')") from None
        essays = rd.essay_words(resolve_source(self.cfg.haystack, self.ctx.base_dir, self.ctx.cache_dir))
        pairs = [(task, length) for length in sorted(self.cfg.lengths, reverse=True)  # longest first: the
                 for task in self.cfg.tasks]                                          # KV pool's peak early
        items = self._items(rd, pairs, essays)
        out = []
        for task, length in pairs:
            got = items[(task, length)]
            if len(got) < self.cfg.n or not all(i["outputs"] for i in got):  # cwe: no word fitted
                raise ConfigError(f"tasks: {self.name}: {task} does not fit {self.cfg.n} items in {length} "
                                  "tokens of this tokenizer; drop this length or this task")
            out += [self.sample(task, length, i, item, rd) for i, item in enumerate(got[: self.cfg.n])]
        return out

    def _items(self, rd, pairs: list[tuple[str, int]], essays: list[str]) -> dict[tuple[str, int], list]:
        """lm-eval's items per (task, length), kept in the cache folder: sizing a 128K haystack
        tokenizes it hundreds of times (minutes a task on one core), and every run with the same
        tokenizer, essays and seed has the same items. A kept file with at least n items serves n
        (the first n items do not depend on n). Missing ones are built in parallel where there are
        more than two cores (lm-eval's generators are single-threaded Python)."""
        fingerprint = f"{tokenizer_fingerprint(self.ctx.tokenizer, essays)}:{hash_words(essays)}:{rd.VERSION}"
        jobs = {}
        for task, length in pairs:
            seed = rd.item_seed(self.ctx.seed, task, length)
            key = hashlib.sha256(f"{fingerprint}:{task}:{length}:{seed}".encode()).hexdigest()[:24]
            jobs[(task, length)] = (seed, Path(self.ctx.cache_dir) / "ruler" / f"{task}-len{length}-{key}.json")
        out = {pair: kept for pair, (_, path) in jobs.items() if len(kept := read_kept(path)) >= self.cfg.n}
        todo = [(task, length, self.cfg.n, self.ctx.tokenizer, essays, seed)
                for (task, length), (seed, _) in jobs.items() if (task, length) not in out]
        for args, items in zip(todo, run_all(rd.generate, todo), strict=True):
            out[args[:2]] = items
            write_kept(jobs[args[:2]][1], items)
        return out

    def prompt_ids(self, task: str, item: dict[str, Any], delimiter: str) -> list[int]:
        tok = self.ctx.tokenizer
        if not self.cfg.chat:
            return list(tok(item["input"] + delimiter + item["gen_prefix"])["input_ids"])
        if not getattr(tok, "chat_template", None):
            raise ConfigError(f"tasks: {self.name}: chat: true but the tokenizer has no chat template; "
                              "set chat: false for a base model")
        text = tok.apply_chat_template([{"role": "user", "content": item["input"]}], tokenize=False,
                                       add_generation_prompt=True)
        return list(tok(text + item["gen_prefix"], add_special_tokens=False)["input_ids"])  # the template wrote BOS

    def sample(self, task: str, length: int, index: int, item: dict[str, Any], rd) -> Sample:
        ids = self.prompt_ids(task, item, rd.DELIMITER[task])
        answers = [str(a) for a in item["outputs"]]
        # lm-eval sizes the input alone to length - max_gen_toks; the chat frame and the gen_prefix
        # come on top, so at a length equal to max_model_len the answer budget gives way to them
        room = (self.ctx.max_model_len or length + rd.MAX_GEN_TOKS[task]) - len(ids)
        max_tokens = min(rd.MAX_GEN_TOKS[task], room)
        if max_tokens < MIN_ANSWER_TOKENS:
            raise ConfigError(f"tasks: {self.name}: {task} at {length} tokens leaves {room} tokens for the answer "
                              f"in max_model_len {self.ctx.max_model_len}; raise max_model_len")
        first = item["input"].find(answers[0])
        meta = {"ruler_task": task, "length": length, "index": index, "answers": answers,
                "depth": round(first / max(len(item["input"]), 1), 3), "prompt_tokens": len(ids)}
        return Sample(id=f"{self.name}-{task}-len{length}-{index}", task=self.name,
                      request=Request(prompt_token_ids=ids, max_tokens=max_tokens), target=", ".join(answers),
                      group=group_of(task, length), meta=meta)

    def score(self, sample: Sample, completion: Completion) -> Score:
        from evalsuite.tasks.ruler_data import string_match_all

        m = sample.meta
        value = string_match_all(completion.text, m["answers"])
        return Score(sample_id=sample.id, task=self.name, value=value, pred=completion.text.strip()[:200],
                     target=sample.target, group=sample.group,
                     extra={"ruler_task": m["ruler_task"], "length": m["length"]})

    def metrics(self, scores: list[Score]) -> list[Metric]:
        from evalsuite.tasks.ruler_data import ONE_ANSWER

        if not scores:
            return []
        by_len: dict[int, list[Score]] = defaultdict(list)
        by_task: dict[str, list[Score]] = defaultdict(list)
        by_cell: dict[tuple[str, int], list[Score]] = defaultdict(list)
        for s in scores:
            task, length = s.extra["ruler_task"], s.extra["length"]
            by_len[length].append(s)
            by_task[task].append(s)
            by_cell[(task, length)].append(s)
        head = f"{self.name}/score"
        partial = MetricKind.mean  # partial credit: a multi-value item scores the share of values found
        kind = {t: MetricKind.proportion if t in ONE_ANSWER else partial for t in ALL_TASKS}
        out = [accuracy(scores, head, partial)]
        out += [accuracy(g, f"{head}/len{n}", partial, length=n) for n, g in sorted(by_len.items())]
        out += [accuracy(by_task[t], f"{head}/{t}", kind[t]) for t in ALL_TASKS if t in by_task]
        out += [accuracy(by_cell[(t, n)], f"{head}/{group_of(t, n)}", kind[t])
                for n in sorted(by_len) for t in ALL_TASKS if (t, n) in by_cell]
        return out
