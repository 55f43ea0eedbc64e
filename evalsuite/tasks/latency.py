"""The latency pass: one request at a time over distinct random-token prompts.

Task batches are scheduled for throughput, so their per-request times include queueing.
This pass measures TTFT and ITL the way a single user sees them, and its prompts share no
prefix, so prefix caching cannot flatter it. Untimed warm-up requests of each timed length go
first, right before the timed ones (the runner sends them once the device is had to itself).
"""

from __future__ import annotations

import random
from functools import cached_property

from evalsuite.stats.metrics import latency_summary
from evalsuite.stats.timing import RATES, SERIES, series
from evalsuite.core.types import REQUEST_TIMINGS, TTFT_P50, Completion, Metric, Request, Sample, Score
from evalsuite.tasks.base import Task


def timing_score(task: str, sample: Sample, completion: Completion) -> Score:
    """A timed request's record: nothing to get right, its timings and token counts kept."""
    extra = {key: getattr(completion, key) for key in REQUEST_TIMINGS}
    extra.update(prompt_tokens=completion.prompt_tokens, output_tokens=completion.output_tokens,
                 cached_prompt_tokens=completion.cached_prompt_tokens)
    return Score(sample_id=sample.id, task=task, value=1.0, pred="", target="", group=sample.group, extra=extra)


class LatencyTask(Task):
    name = "latency"
    primary_metric = TTFT_P50
    batch_size = 1  # one user's view: no request queues behind another
    limited = False  # its lengths x repeats are the measurement's design, not items to thin
    runs_simulated = False
    timed_alone = True

    def __init__(self, prompt_tokens: list[int], output_tokens: int, repeats: int, tokenizer, seed: int = 0,
                 warmup: int = 0):
        self.prompt_tokens, self.output_tokens, self.repeats = prompt_tokens, output_tokens, repeats
        self.tokenizer, self.seed, self.warmup = tokenizer, seed, warmup

    def _token_pool(self) -> list[int]:
        special = set(getattr(self.tokenizer, "all_special_ids", []) or [])
        size = len(self.tokenizer)
        return [i for i in range(min(size, 32000)) if i not in special]

    def samples(self) -> list[Sample]:
        rng = random.Random(self.seed)
        out = []
        for n in self.prompt_tokens:
            for r, req in enumerate(self._requests(rng, n, self.repeats)):
                out.append(Sample(id=f"len{n}-r{r}", task=self.name, request=req, target="", group=str(n)))
        return out

    @cached_property
    def _pool(self) -> list[int]:
        return self._token_pool()

    def _requests(self, rng: random.Random, n: int, count: int) -> list[Request]:
        return [Request(prompt_token_ids=[rng.choice(self._pool) for _ in range(n)], max_tokens=self.output_tokens,
                        ignore_eos=True) for _ in range(count)]

    def warmup_request(self) -> Request:
        return Request(prompt_token_ids=self._token_pool()[:16], max_tokens=4, ignore_eos=True)

    def warmup_requests(self) -> list[Request]:
        """`warmup` requests of each timed length and output, prompts of their own (a seed apart from the
        timed ones', so no prefix is cached for those); with none asked, one short request for the
        first request's own overheads."""
        if not self.warmup:
            return [self.warmup_request()]
        rng = random.Random(f"warmup-{self.seed}")
        return [r for n in self.prompt_tokens for r in self._requests(rng, n, self.warmup)]

    def score(self, sample: Sample, completion: Completion) -> Score:
        return timing_score(self.name, sample, completion)

    def metrics(self, scores: list[Score]) -> list[Metric]:
        """Per metric the pooled summary, and with several prompt lengths one per length
        (`.../ctx<N>`): a median over mixed lengths describes no request anyone sends."""
        groups = sorted({s.group for s in scores}, key=lambda g: int(g or 0))
        out: list[Metric] = []
        for key, (_, unit) in SERIES.items():
            out += latency_summary(_values(key, scores), f"latency/{key}", unit, rate=unit in RATES)
            for g in groups if len(groups) > 1 else []:
                sub = [s for s in scores if s.group == g]
                out += [m.model_copy(update={"name": f"{m.name}/ctx{g}", "length": int(g)})
                        for m in latency_summary(_values(key, sub), f"latency/{key}", unit, rate=unit in RATES)]
        return out


def _values(key: str, scores: list[Score]) -> list[float]:
    """The figure of every timed request (evalsuite.stats.timing.SERIES: the gate reads the same)."""
    return series(key, [s.extra for s in scores])
