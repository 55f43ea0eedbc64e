"""Any lm-eval 0.4.13 task, run by lm-eval's own evaluator through the variant's engine.

An in-process `lm_eval.api.model.LM` adapter over evalsuite's Engine, rather than lm-eval's
`local-completions` against a `vllm serve`: it works in both engine modes (offline has no
HTTP server), it needs no tokenizer download or server flags on lm-eval's side, and every
request goes through the same engine object whose memory and latency the variant records.
Log-likelihoods come from vLLM's prompt log-probabilities (Request.prompt_logprobs): the
continuation's tokens' log-probabilities summed, greedy when each one ranks first, exactly
as lm-eval's own `vllm` backend computes them. Tokenization is lm-eval's (TemplateLM), so
context/continuation splits match its other backends.

lm-eval's aggregated metrics, with its stderr, become `{name}/{lm_task}/{metric}[/{filter}]`;
each document's per-item values are recorded as a sample row, so paired tests, `finish` and
resume see them too. A variant interrupted inside lm-eval reruns this task (lm-eval has no
partial results); a task already recorded for the variant is not rerun.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from evalsuite.core.errors import ConfigError
from evalsuite.stats.strata import mean_stderr
from evalsuite.tasks.base import Task, TaskContext
from evalsuite.tasks.planning import Planned
from evalsuite.tasks.registry import register_task_type
from evalsuite.core.types import Completion, Metric, MetricKind, Request, Sample, Score


@register_task_type
class LMEvalConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["lm_eval"] = "lm_eval"
    name: str = "lm_eval"
    tasks: list[str] = Field(min_length=1)  # lm-eval task or group names
    num_fewshot: int | None = Field(default=None, ge=0)  # None: each task's own default
    limit: int | None = Field(default=None, ge=1)  # documents per task
    # lm-eval runs the `!function` Python code of include_path's YAML files: allowed only when said
    allow_code: bool = False
    include_path: str | None = None  # folder of custom task YAMLs, relative to the config file
    batch_size: int = Field(default=64, gt=0)  # requests per engine call
    apply_chat_template: bool = False
    gen_kwargs: dict[str, Any] | None = None
    bootstrap_iters: int = Field(default=1000, ge=0)  # stderr of non-mean metrics (mean ones are exact)

    @field_validator("include_path")
    @classmethod
    def _code_allowed(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value and not info.data.get("allow_code"):
            raise ValueError("lm-eval runs the Python code (`!function`) of the task files there; "
                             "set allow_code: true on this task to allow it")
        return value

    def build(self, ctx: TaskContext) -> Task:
        return LMEvalTask(self, ctx)

    def planned(self, limit: int | None) -> list[Planned]:
        return []  # lm-eval picks its own items: nothing is known of them before it runs

    def narrow(self, limit: int) -> None:
        self.limit = min(self.limit or limit, limit)  # lm-eval picks its own items, at most its limit


@functools.lru_cache(maxsize=8)
def _indexed(include: str | None):
    """lm-eval's index of its thousands of task YAMLs takes seconds to build: once per folder."""
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=include)


def task_manager(cfg: LMEvalConfig, base_dir: Path):
    include = None
    if cfg.include_path:
        include = Path(cfg.include_path).expanduser()
        include = include if include.is_absolute() else (base_dir / include).resolve()
        if not include.is_dir():
            raise ConfigError(f"tasks.{cfg.name}.include_path: {include} is not a folder")
        include = str(include)
    return _indexed(include)


# lm-eval's aggregates: a mean per document for most, corpus-level for some (perplexity, BLEU), so no
# interval over the recorded items is drawn for them (strata None), and no direction is assumed
LM_EVAL_MEANING = {"kind": MetricKind.mean, "unit": ""}


def metric_key(prefix: str, task: str, metric: str, filt: str) -> str:
    """`prefix/task/metric[/filter]`, in the characters MLflow accepts ("none" filters dropped)."""
    parts = [prefix, task, metric] + ([] if filt == "none" else [filt])
    return "/".join(re.sub(r"[^A-Za-z0-9_\-. ]", "_", p) for p in parts)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def results_metrics(prefix: str, results: dict[str, Any], order: list[str]) -> list[Metric]:
    """lm-eval's `results` section as Metrics with its stderr; the asked tasks first, in order."""
    counts = results.get("n-samples", {})
    names = sorted(results["results"], key=lambda t: (order.index(t) if t in order else len(order), t))
    out = []
    for task in names:
        row = results["results"][task]
        n = (counts.get(task) or {}).get("effective")
        for key, value in row.items():
            if "," not in key or "_stderr," in key or _number(value) is None:
                continue
            metric, filt = key.split(",", 1)
            stderr = _number(row.get(f"{metric}_stderr,{filt}"))
            out.append(Metric(name=metric_key(prefix, task, metric, filt), value=float(value),
                              stderr=None if stderr is None or math.isnan(stderr) else stderr, n=n, **LM_EVAL_MEANING))
    return out


def sample_rows(name: str, task: str, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record row per lm-eval document: its per-item metric values in the score."""
    rows = []
    for d in docs:
        values = {m: v for m in d.get("metrics", []) if (v := _number(d.get(m))) is not None}
        first = next(iter(values.values()), math.nan)
        group = task if d.get("filter", "none") == "none" else f"{task}/{d['filter']}"
        sample = Sample(id=f"{group}/{d['doc_id']}", task=name, request=Request(prompt=_context(d)),
                        target=str(d.get("target", "")),
                        group=group, meta={"lm_eval_task": task, "filter": d.get("filter", "none")})
        completion = Completion(text=str(d.get("filtered_resps", ""))[:500])
        score = Score(sample_id=sample.id, task=name, value=first, pred=completion.text[:200], target=sample.target,
                      group=group, extra={"lm_eval": values})
        rows.append({"sample": sample.model_dump(), "completion": completion.model_dump(), "score": score.model_dump()})
    return rows


def _context(doc: dict[str, Any]) -> str | None:
    """The document's first request context (the prompt lm-eval built), for reading records."""
    args = doc.get("arguments")
    first = next(iter(args.values()), None) if isinstance(args, dict) else (args[0] if args else None)
    if isinstance(first, dict):
        first = first.get("arg_0")
    elif isinstance(first, (list, tuple)):
        first = first[0] if first else None
    return first if isinstance(first, str) else None


class LMEvalTask(Task):
    """Drives the engine itself (`evaluate`), instead of the runner sending its samples."""

    harness = True

    def __init__(self, cfg: LMEvalConfig, ctx: TaskContext):
        self.cfg, self.ctx, self.name = cfg, ctx, cfg.name
        self.primary_metric = metric_key(cfg.name, cfg.tasks[0], "acc", "none")
        self._manager = None
        self._last: list[Metric] | None = None  # lm-eval's aggregates of the latest evaluate()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_manager": None}  # Ray ships tasks; the index is rebuilt where it runs

    def samples(self) -> list[Sample]:
        """One placeholder per lm-eval task, checked against lm-eval's index before any engine starts."""
        try:
            self._manager = task_manager(self.cfg, self.ctx.base_dir)
        except ImportError:
            raise ConfigError(f"tasks.{self.name}: type lm_eval needs lm-eval (pip install 'lm-eval==0.4.13')") from None
        known = set(self._manager.all_tasks)
        unknown = [t for t in self.cfg.tasks if t not in known]
        if unknown:
            where = f" or under {self.cfg.include_path}" if self.cfg.include_path else ""
            raise ConfigError(f"tasks.{self.name}.tasks: {', '.join(unknown)} not among lm-eval's tasks{where}")
        return [Sample(id=t, task=self.name, request=Request(), target="", group=t) for t in self.cfg.tasks]

    def evaluate(self, engine, tokenizer, record: Callable[[list[dict[str, Any]]], None]) -> list[Score]:
        """Runs lm-eval's evaluator over the engine; records each document's row, returns their scores."""
        from lm_eval import simple_evaluate

        from evalsuite.tasks.lmeval_model import EngineLM  # lm-eval is optional: imported when a task runs

        if tokenizer is None:
            raise ConfigError(f"tasks.{self.name}: type lm_eval needs the model's tokenizer")
        c = self.cfg
        max_length = engine.stats().max_model_len or self.ctx.max_model_len or 2048
        results = simple_evaluate(
            model=EngineLM(engine, tokenizer, max_length, c.batch_size), tasks=list(c.tasks),
            num_fewshot=c.num_fewshot, limit=c.limit, task_manager=self._manager or task_manager(c, self.ctx.base_dir),
            apply_chat_template=c.apply_chat_template, gen_kwargs=c.gen_kwargs, bootstrap_iters=c.bootstrap_iters,
            log_samples=True)  # lm-eval's own seeds: the same few-shot picks as an `lm_eval` run
        self._last = results_metrics(self.name, results, list(c.tasks))
        rows = [r for task, docs in results.get("samples", {}).items() for r in sample_rows(self.name, task, docs)]
        record(rows)
        return [Score.model_validate(r["score"]) for r in rows]

    def score(self, sample: Sample, completion: Completion) -> Score:
        raise NotImplementedError("lm_eval tasks are scored by lm-eval inside evaluate()")

    def metrics(self, scores: list[Score]) -> list[Metric]:
        """lm-eval's own aggregates when this process ran it; else (finish, resume) each recorded
        per-item metric's mean with its standard error, which is what lm-eval reports for its mean
        metrics (acc, acc_norm, exact_match); corpus-level ones (perplexity, BLEU) differ there."""
        if self._last is not None:
            out, self._last = self._last, None
            return out
        series: dict[str, list[float]] = {}
        for s in scores:
            task, _, filt = (s.group or "").partition("/")
            for metric, value in (s.extra.get("lm_eval") or {}).items():
                series.setdefault(metric_key(self.name, task, metric, filt or "none"), []).append(value)
        out = []
        for key, values in series.items():
            mean, se = mean_stderr(values)
            out.append(Metric(name=key, value=mean, stderr=se, n=len(values), **LM_EVAL_MEANING))
        return out
