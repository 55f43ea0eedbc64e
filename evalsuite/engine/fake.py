"""A deterministic stand-in for vLLM (`engine: {mode: fake}`), as inspect_ai ships a mock model.

It lets the runner, resume, tracking, compare and gate run end to end in seconds without an engine.
Answers come from a seeded hash of the prompt, so a run is repeatable and two variants agree on
every item except a fixed share: `disagree`, by default larger for weight quantization than for a
KV-cache dtype, or set per variant with `engine_args: {fake_disagree: 0.4}`. Multiple-choice
requests get log-probabilities for the usual answer tokens (letters, Yes/No, with and without the
leading space), so the choice tasks score them like a real model's. Memory numbers are fake but
self-consistent (weights from the checkpoint's tensors, a fixed KV cache).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from evalsuite.core.types import Completion, EngineStats, Request
from evalsuite.core.units import GIB
from evalsuite.engine import one_at_a_time
from evalsuite.engine.server import checkpoint_gib

_WORDS = ("Yes", "No", "A", "B", "C", "D", "E", "F", "G", "H", "I", "J", "yes", "no")
CANDIDATES = tuple(w for word in _WORDS for w in (" " + word, word))  # the tokens choice tasks look for
# Share of items a variant answers differently from the 16-bit baseline, by what it changes.
DEFAULT_DISAGREE = {"quantization": 0.10, "kv_cache_dtype": 0.03}
KV_CACHE_GIB = 1.0
BLOCK_SIZE = 16
KV_BYTES_PER_TOKEN = 4096


def _unit(*parts: Any) -> float:
    """A uniform number in [0, 1) from its inputs, the same on every machine and run."""
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def disagreement(kwargs: dict[str, Any]) -> float:
    if "fake_disagree" in kwargs:
        return float(kwargs["fake_disagree"])
    share = 0.0
    if kwargs.get("quantization"):
        share += DEFAULT_DISAGREE["quantization"]
    if kwargs.get("kv_cache_dtype", "auto") != "auto":
        share += DEFAULT_DISAGREE["kv_cache_dtype"]
    return share


class FakeEngine:
    """Implements the Engine protocol; `kwargs` are the variant's engine arguments."""

    def __init__(self, model_dir: str, kwargs: dict[str, Any], log_path: Path | None = None):
        self.model_dir, self.kwargs, self.log_path = model_dir, dict(kwargs), log_path
        self.seed = int(self.kwargs.get("seed") or 0)
        self.disagree = disagreement(self.kwargs)
        # what makes this variant's answers its own; the seed alone is shared with the baseline, and
        # the share of memory an engine reserves changes no answer
        self.identity = {k: v for k, v in sorted(self.kwargs.items())
                         if k not in ("seed", "fake_disagree", "gpu_memory_utilization")}
        self._started: EngineStats | None = None
        self._tokens_seen = 0
        self._peak_tokens = 0

    def start(self) -> EngineStats:
        max_len = int(self.kwargs.get("max_model_len") or 4096)
        # an 8-bit KV cache holds twice the tokens in the same bytes, as vLLM's does
        eight_bit = self.kwargs.get("kv_cache_dtype", "auto") != "auto"
        per_token = KV_BYTES_PER_TOKEN // 2 if eight_bit else KV_BYTES_PER_TOKEN
        tokens = int(KV_CACHE_GIB * GIB // per_token)
        self._started = EngineStats(
            vllm_version="fake", device="fake", startup_s=0.0,
            weights_gib=checkpoint_gib(self.model_dir) if Path(self.model_dir).is_dir() else None,
            kv_cache_gib=KV_CACHE_GIB, kv_cache_blocks=tokens // BLOCK_SIZE, kv_cache_tokens=tokens,
            block_size=BLOCK_SIZE, kv_bytes_per_token=per_token, max_model_len=max_len,
            max_concurrency=tokens / max_len, source={"weights_gib": "fake", "kv_cache_gib": "fake"})
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self.log_path.write_text(f"fake engine: {self.model_dir} {json.dumps(self.identity, default=str)}\n")
        return self._started.model_copy()

    def generate(self, requests: list[Request], on_done: Callable[[int], None] | None = None) -> list[Completion]:
        if self._started is None:
            raise RuntimeError("FakeEngine.generate before start()")
        out = [self._complete(r) for r in requests]
        batch_tokens = sum(c.prompt_tokens + c.output_tokens for c in out)
        self._tokens_seen += batch_tokens
        self._peak_tokens = max(self._peak_tokens, min(batch_tokens, self._started.kv_cache_tokens or 0))
        if on_done is not None:
            on_done(len(requests))
        return out

    def pipelined(self, batches: Iterable[list[Request]]) -> Iterator[list[Completion]]:
        return one_at_a_time(self, batches)

    def _complete(self, request: Request) -> Completion:
        prompt = request.prompt_token_ids if request.prompt_token_ids is not None else request.prompt
        own = _unit("flip", prompt, self.seed) < self.disagree
        key = (prompt, self.seed, self.identity) if own else (prompt, self.seed)
        ids = request.prompt_token_ids
        n_prompt = len(ids) if ids is not None else len((request.prompt or "").split())
        top: list[dict[str, float]] = []
        if request.logprobs:
            top = [self._logprobs(key, request.logprobs)]
            text = max(top[0], key=top[0].__getitem__)
            n_out = 1
        else:
            natural = 1 + int(8 * _unit("len", key))  # where an answer would stop on its own
            n_out = request.max_tokens if request.ignore_eos else max(1, min(request.max_tokens, natural))
            text = " ".join(f"w{int(1000 * _unit('word', key, i))}" for i in range(n_out))
        ttft = 5.0 + 0.01 * n_prompt
        itl = 2.0
        return Completion(text=text, top_logprobs=top, prompt_tokens=n_prompt, output_tokens=n_out,
                          finish_reason="length" if n_out == request.max_tokens else "stop",
                          ttft_ms=ttft, itl_ms=itl, e2e_ms=ttft + itl * max(0, n_out - 1))

    def _logprobs(self, key: tuple, k: int) -> dict[str, float]:
        """Log-softmax over the candidate tokens of seeded scores; the top k of them."""
        scores = {c: 4.0 * _unit("score", key, c) for c in CANDIDATES}
        norm = math.log(sum(math.exp(s) for s in scores.values()))
        ranked = sorted(scores.items(), key=lambda kv: -kv[1])[:k]
        return {c: s - norm for c, s in ranked}

    def stats(self) -> EngineStats:
        base = self._started or EngineStats()
        peak_blocks = math.ceil(self._peak_tokens / BLOCK_SIZE)
        return base.model_copy(update={"num_preemptions": 0, "kv_used_peak_blocks": peak_blocks,
                                       "kv_used_peak_gib": peak_blocks * BLOCK_SIZE * (base.kv_bytes_per_token or 0) / GIB,
                                       "prefix_cache_hit_rate": 0.0})

    pid = None  # no process of its own

    def close(self, wait: bool = True) -> None:
        self._started = None
