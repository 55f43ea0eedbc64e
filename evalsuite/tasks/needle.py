"""Needle in a haystack over a length x depth grid, single and multi-key/value needles.

Each cell (context length L, needle depth D, seed) is one prompt of exactly L tokens of the model
under test: chat frame + haystack + needle(s) + question + answer budget = L. Needles are
generated facts with 7-digit values, scored by string match (no judge model). By default
(`decoys: penalize`) an answer that names any other 7-digit number is wrong, so listing every number
in the text earns nothing; `decoys: ignore` is RULER's string_match_all.

The default schedule (`shared_prefix`) makes shorter contexts prefixes of longer ones and sends all
cells of a seed back to back, longest and deepest first, so the prefix cache still holds a prompt's
haystack when it is needed (bench/niah_schedule.py measures the gain); per-request times of this task
are therefore cache-assisted, and the latency pass times distinct prompts instead.

Metrics, decoy rules, the schedule and rope scaling beyond the model's window: docs/tasks.md
("Needle in a haystack and long legal contracts").
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from evalsuite.core.errors import ConfigError
from evalsuite.data.haystack import (TokenHaystack, encode, english_prose, load_documents, prompt_frame, resolve_source,
                                splice)
from evalsuite.stats.metrics import accuracy
from evalsuite.stats.strata import mean_stderr
from evalsuite.tasks.base import Task, TaskContext
from evalsuite.tasks.planning import Planned, capped, grid
from evalsuite.tasks.registry import register_task_type
from evalsuite.core.types import Completion, Metric, MetricKind, Request, Sample, Score

Schedule = Literal["shared_prefix", "naive"]

_ADJECTIVES = ("amber brisk calm dusty eager faint gentle hollow icy jolly keen lofty mellow nimble ochre "
               "proud quiet rustic silent tawny umber vivid wary young zesty bold crisp dim fierce grand "
               "humble ivory lucid misty noble pale rapid shy tidy vast witty").split()
_NOUNS = ("anchor badger candle dolphin ember falcon garden harbor island jacket kettle lantern meadow "
          "needle orchard pepper quarry river saddle tunnel valley walnut yarrow zephyr beacon cactus "
          "dagger engine fossil glacier hammer igloo jungle kernel ladder magnet nectar").split()

INTRO = ("Some special magic numbers are hidden within the following text. Make sure to memorize them. "
         "I will quiz you about the numbers afterwards.\n\n")


class GridConfig(BaseModel):
    """The length x depth grid shared by the long-context tasks (needle, legal_long)."""

    model_config = ConfigDict(extra="forbid")

    lengths: list[int] = Field(default_factory=lambda: [1024, 2048])
    depths: list[float] = Field(default_factory=lambda: [0.0, 0.5, 1.0])  # fractions 0..1
    seeds: int = Field(default=1, ge=1)  # seeds ctx.seed .. ctx.seed + seeds - 1
    chat: bool = True
    schedule: Schedule = "shared_prefix"

    @field_validator("lengths")
    @classmethod
    def _check_lengths(cls, v: list[int]) -> list[int]:
        return check_lengths(v)

    @field_validator("depths")
    @classmethod
    def _check_depths(cls, v: list[float]) -> list[float]:
        return check_depths(v)

    per_cell: ClassVar[int] = 1  # samples in each (length, depth, seed) cell

    def planned(self, limit: int | None) -> list[Planned]:
        return capped(grid(self.name, "acc", self.lengths, len(self.depths) * self.seeds * self.per_cell), limit)

    def narrow(self, limit: int) -> None:
        """The runner's spread thins a grid's cells for `--limit`: nothing to narrow here."""


@register_task_type
class NeedleConfig(GridConfig):
    type: Literal["needle"] = "needle"
    name: str = "needle"
    haystack: str = "paul_graham"  # paul_graham | licensedcode | a folder of .txt files
    needle: Literal["single", "multikey", "multivalue"] = "single"
    num_distractors: int = Field(default=3, ge=1)  # multikey: needles with other keys
    num_values: int = Field(default=4, ge=2)  # multivalue: values planted for the one key
    answer_tokens: int | None = Field(default=None, gt=0)  # default 16 per expected value
    scoring: Literal["fraction", "all"] = "fraction"  # multivalue: share found, or all-or-nothing
    decoys: Literal["penalize", "ignore"] = "penalize"  # values named beyond the asked ones

    def build(self, ctx: TaskContext) -> Task:
        return NeedleTask(self, ctx)


def check_lengths(v: list[int]) -> list[int]:
    if not v or any(x <= 0 for x in v) or len(set(v)) != len(v):
        raise ValueError("lengths must be distinct positive token counts")
    return v


def check_distinct(v: list[str], what: str) -> list[str]:
    if not v or len(set(v)) != len(v):
        raise ValueError(f"{what} must be a non-empty list without repeats")
    return v


def check_depths(v: list[float]) -> list[float]:
    if not v or any(not 0 <= d <= 1 for d in v):
        raise ValueError("depths are fractions from 0 to 1 (0.5 = middle)")
    if len({depth_pct(d) for d in v}) != len(v):
        raise ValueError("depths must differ in whole percents")
    return v


def depth_pct(depth: float) -> int:
    return int(round(depth * 100))


def schedule_cells(lengths: list[int], depths: list[float], seeds: list[int],
                   schedule: Schedule) -> list[tuple[int, int, float]]:
    """(seed, length, depth) in the order to send them.

    shared_prefix: per seed (one haystack), longest length and deepest needle first, so the
    first prompt computes the longest shared prefix and later ones reuse it from the cache.
    naive: the grid in config order, seed innermost, as a plain nested loop would send it.
    """
    if schedule == "naive":
        return [(s, n, d) for n in lengths for d in depths for s in seeds]
    return [(s, n, d) for s in seeds for n in sorted(lengths, reverse=True) for d in sorted(depths, reverse=True)]


def check_fits(name: str, lengths: list[int], ctx: TaskContext) -> None:
    if ctx.tokenizer is None:
        raise ConfigError(f"tasks: {name}: needs the model's tokenizer to size prompts")
    too_long = [n for n in lengths if ctx.max_model_len and n > ctx.max_model_len]
    if too_long:
        raise ConfigError(f"tasks: {name}: lengths {too_long} exceed max_model_len {ctx.max_model_len}; drop them "
                          "or raise the variants' max_model_len (with rope scaling for a model whose native "
                          "window is shorter, see the needle task's docs)")


def haystack_budget(name: str, length: int, answer: int, fixed: int) -> int:
    """Haystack tokens that make prompt + answer budget exactly `length`."""
    n = length - answer - fixed
    if n < 16:
        raise ConfigError(f"tasks: {name}: length {length} is too short for the prompt frame "
                          f"({fixed} tokens) and answer budget ({answer} tokens)")
    return n


# a comma between digits with exactly three after it: "1,234,567" is one number, "1234567,7654321" two
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_VALUE = re.compile(r"(?<!\d)\d{7}(?!\d)")  # the needles' values: 1_000_000 .. 9_999_999


def value_in(value: str, text: str) -> bool:
    """`value` as a whole number in `text` (1234567 does not match inside 12345678)."""
    return re.search(rf"(?<!\d){re.escape(value)}(?!\d)", _THOUSANDS.sub("", text)) is not None


def named_values(text: str) -> list[str]:
    """The needle-format values (whole 7-digit numbers) in `text`, each once, in order."""
    return list(dict.fromkeys(_VALUE.findall(_THOUSANDS.sub("", text))))


def needle_value(found: int, asked: int, extra: int, scoring: str) -> float:
    """The score of an answer naming `found` of `asked` values and `extra` values not asked
    (pass extra=0 to ignore them): single needles and `all` score 1 only for every asked value and
    no other, multivalue `fraction` found / (asked + extra), the Jaccard index (docs/tasks.md)."""
    if asked == 1 or scoring == "all":
        return float(found == asked and extra == 0)
    return found / (asked + extra)


def rate(flags: list[bool], name: str) -> Metric:
    mean, se = mean_stderr([float(f) for f in flags])
    return Metric(name=name, value=mean, stderr=se, n=len(flags), kind=MetricKind.quantity, direction="lower")


class GridTask(Task):
    """A long-context task over a length x depth grid: one haystack token stream per seed."""

    heading: str | None = None  # a section heading the haystack repeats, if any

    def __init__(self, cfg: GridConfig, ctx: TaskContext):
        check_fits(cfg.name, cfg.lengths, ctx)
        self.cfg, self.ctx, self.name = cfg, ctx, cfg.name
        self.primary_metric = f"{cfg.name}/acc"
        self.seeds = [ctx.seed + i for i in range(cfg.seeds)]
        self._hay: dict[int, TokenHaystack] = {}
        self._docs = None

    def documents(self, src):
        raise NotImplementedError

    def haystack(self, seed: int) -> TokenHaystack:
        if seed not in self._hay:
            if self._docs is None:
                self._docs = self.documents(resolve_source(self.cfg.haystack, self.ctx.base_dir, self.ctx.cache_dir))
            extra = {"heading": self.heading} if self.heading else {}
            self._hay[seed] = TokenHaystack(self._docs, self.ctx.tokenizer, seed, max(self.cfg.lengths), **extra)
        return self._hay[seed]


class NeedleTask(GridTask):
    def __init__(self, cfg: NeedleConfig, ctx: TaskContext):
        super().__init__(cfg, ctx)
        n_values = cfg.num_values if cfg.needle == "multivalue" else 1
        self.answer_tokens = cfg.answer_tokens or 16 * n_values

    def documents(self, src):
        return [d for d in load_documents(src) if english_prose(d)] or load_documents(src)

    def samples(self) -> list[Sample]:
        cells = schedule_cells(self.cfg.lengths, self.cfg.depths, self.seeds, self.cfg.schedule)
        return [self.sample(s, n, d) for s, n, d in cells]

    def _layout(self, seed: int, length: int) -> dict[str, Any]:
        """Distractor keys, values and depths: fixed per (seed, length), so that all depths of a
        length share the haystack up to the target needle."""
        rng = random.Random(f"needle:{seed}:{length}")
        k = self.cfg.num_distractors if self.cfg.needle == "multikey" else 0
        keys = rng.sample([f"{a}-{b}" for a in _ADJECTIVES for b in _NOUNS], k)
        values = [str(v) for v in rng.sample(range(1_000_000, 10_000_000), k)]
        return {"keys": keys, "values": values, "depths": [rng.random() for _ in range(k)]}

    def _target(self, seed: int, length: int, pct: int, layout: dict[str, Any]) -> tuple[str, list[str]]:
        rng = random.Random(f"needle:{seed}:{length}:{pct}")
        taken = set(layout["keys"])
        key = next(k for k in (f"{rng.choice(_ADJECTIVES)}-{rng.choice(_NOUNS)}" for _ in range(1000))
                   if k not in taken)
        n = self.cfg.num_values if self.cfg.needle == "multivalue" else 1
        pool = [v for v in rng.sample(range(1_000_000, 10_000_000), n + len(layout["values"]))
                if str(v) not in layout["values"]]
        return key, [str(v) for v in pool[:n]]

    def _texts(self, key: str) -> tuple[str, str]:
        if self.cfg.needle == "multivalue":
            return (f"What are all the special magic numbers for {key} mentioned in the provided text?",
                    f"The special magic numbers for {key} mentioned in the provided text are")
        return (f"What is the special magic number for {key} mentioned in the provided text?",
                f"The special magic number for {key} mentioned in the provided text is")

    def sample(self, seed: int, length: int, depth: float) -> Sample:
        tok, pct = self.ctx.tokenizer, depth_pct(depth)
        layout = self._layout(seed, length)
        key, values = self._target(seed, length, pct, layout)
        question, answer_prefix = self._texts(key)
        prefix, suffix = prompt_frame(tok, INTRO, "\n\n" + question, answer_prefix, self.cfg.chat)
        needles = [encode(tok, f" The special magic number for {key} is: {v}.") for v in values]
        decoys = [encode(tok, f" The special magic number for {k} is: {v}.")
                  for k, v in zip(layout["keys"], layout["values"])]
        fixed = len(prefix) + len(suffix) + sum(map(len, needles + decoys))
        n = haystack_budget(self.name, length, self.answer_tokens, fixed)
        hay = self.haystack(seed)
        # decoy positions from a length-only reference so every depth of this length agrees
        ref = haystack_budget(self.name, length, self.answer_tokens, len(prefix))
        pos = hay.position(n, depth)
        inserts = [(min(hay.position(ref, d), n), ids) for d, ids in zip(layout["depths"], decoys)]
        inserts += [(pos, [t for ids in needles for t in ids])]
        ids = prefix + splice(hay.ids[:n], inserts) + suffix
        before = sum(len(t) for p, t in inserts[:-1] if p <= pos)  # decoys spliced in ahead of it
        meta = {"seed": seed, "length": length, "depth": pct, "key": key, "answers": values,
                "distractors": layout["values"], "needle_token": len(prefix) + pos + before,
                "prompt_tokens": len(ids)}
        req = Request(prompt_token_ids=ids, max_tokens=self.answer_tokens)
        return Sample(id=f"{self.name}-s{seed}-len{length}-d{pct}", task=self.name, request=req,
                      target=", ".join(values), group=cell_group(length, pct), meta=meta)

    def score(self, sample: Sample, completion: Completion) -> Score:
        answers, text = sample.meta["answers"], completion.text
        found = [a for a in answers if value_in(a, text)]
        extras = [v for v in named_values(text) if v not in answers]
        penalized = len(extras) if self.cfg.decoys == "penalize" else 0
        value = needle_value(len(found), len(answers), penalized, self.cfg.scoring)
        extra = cell_extra(sample, completion)
        hits = [v for v in sample.meta["distractors"] if value_in(v, text)]
        extra.update(found=found, distractor_hits=hits, extras=extras)
        return Score(sample_id=sample.id, task=self.name, value=value, pred=text.strip()[:200],
                     target=sample.target, group=sample.group, extra=extra)

    def metrics(self, scores: list[Score]) -> list[Metric]:
        out = grid_metrics(self.name, scores)
        if scores:
            out.append(rate([bool(extras_of(s)) for s in scores], f"{self.name}/extra_value_rate"))
        if scores and self.cfg.needle == "multikey":
            out.append(rate([bool(s.extra.get("distractor_hits")) for s in scores], f"{self.name}/decoy_rate"))
        return out


def extras_of(score: Score) -> list[str]:
    """Values named beyond the asked ones; read back from the answer where a record predates them."""
    if "extras" in score.extra:
        return score.extra["extras"]
    return [v for v in named_values(score.pred) if v not in score.target.split(", ")]


def cell_group(length: int, pct: int) -> str:
    return f"len{length}_depth{pct}"


def cell_extra(sample: Sample, completion: Completion) -> dict[str, Any]:
    """What every grid task records per sample: its cell and how much of its prompt was cached."""
    m = sample.meta
    return {"seed": m["seed"], "length": m["length"], "depth": m["depth"],
            "prompt_tokens": completion.prompt_tokens or m["prompt_tokens"],
            "cached_prompt_tokens": completion.cached_prompt_tokens}


def grid_metrics(name: str, scores: list[Score]) -> list[Metric]:
    """acc overall, per length and per (length, depth) cell, plus the prompt tokens sent and computed."""
    if not scores:
        return []
    out = [accuracy(scores, f"{name}/acc")]
    by_len: dict[int, list[Score]] = defaultdict(list)
    by_cell: dict[tuple[int, int], list[Score]] = defaultdict(list)
    for s in scores:
        by_len[s.extra["length"]].append(s)
        by_cell[(s.extra["length"], s.extra["depth"])].append(s)
    out += [accuracy(g, f"{name}/acc/len{n}", length=n) for n, g in sorted(by_len.items())]
    out += [accuracy(g, f"{name}/acc/{cell_group(n, d)}", length=n, depth=d) for (n, d), g in sorted(by_cell.items())]
    known = [s for s in scores if s.extra.get("cached_prompt_tokens") is not None]
    if known:
        uncached = sum(s.extra["prompt_tokens"] - s.extra["cached_prompt_tokens"] for s in known)
        tokens = {"n": len(known), "kind": MetricKind.quantity, "unit": "tokens"}
        out.append(Metric(name=f"{name}/uncached_prompt_tokens_total", value=float(uncached), **tokens))
        total = sum(s.extra["prompt_tokens"] for s in known)
        out.append(Metric(name=f"{name}/prompt_tokens_total", value=float(total), **tokens))
    return out
