"""The Engine protocol, and the factory (evalsuite.engine.factory) that picks an implementation for a run.

Two vLLM implementations share it: offline (vllm.LLM in a child process) and server
(`vllm serve` on loopback, or an already running server); a third, fake, answers from a seeded
hash for fast end-to-end tests. Tasks never know which. The factory takes the model and vLLM's
arguments as they are to be passed; what a config's variant asks for is the run's to work out.

May import: core, memory, models.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol

from evalsuite.core.types import Completion, EngineStats, Request


class Engine(Protocol):
    def start(self) -> EngineStats:
        """Load the model; returns what the engine reports about memory and capacity."""

    def generate(self, requests: list[Request], on_done: Callable[[int], None] | None = None) -> list[Completion]:
        """Run a batch; results in request order. `on_done(k)` reports k more finished."""

    def pipelined(self, batches: Iterable[list[Request]]) -> Iterator[list[Completion]]:
        """Each batch's completions in order. An engine that takes the next batch while it answers the
        current one (the offline engine) gets it ahead; the others answer one a call (one_at_a_time)."""

    def stats(self) -> EngineStats:
        """Engine stats after the workload (peak KV used, preemptions) merged with start()'s."""

    @property
    def pid(self) -> int | None:
        """The process the engine runs in (its tree is the engine: core, workers), once started;
        None where it is not a child of this process (an already running server, the fake)."""

    def close(self, wait: bool = True) -> None:
        """End the engine and everything it started. wait=False ends it at once: an interrupted run's
        engine is mid-batch and would not answer a polite shutdown (which then waits ~a minute)."""


def one_at_a_time(engine: Engine, batches: Iterable[list[Request]]) -> Iterator[list[Completion]]:
    """`pipelined` for an engine that answers one batch a call."""
    for requests in batches:
        yield engine.generate(requests)


class EngineFailed(RuntimeError):
    """The engine died or refused to start; the message carries the reason for the record."""


def tensor_parallel_workaround(kwargs: dict[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """vLLM 0.26's all-reduce + RMSNorm fusion picks FlashInfer's NVLink-multicast all-reduce for
    TP > 1 and crashes in CUDA-graph capture (illegal memory access) where multicast is off, which
    hosts mark with NCCL_NVLS_ENABLE=0. There the fusion is switched off, unless the variant says
    otherwise in its own engine_args.compilation_config."""
    if int(kwargs.get("tensor_parallel_size", 1)) < 2 or env.get("NCCL_NVLS_ENABLE") != "0":
        return kwargs
    compilation = kwargs.get("compilation_config")
    if compilation is not None and not isinstance(compilation, dict):
        return kwargs  # a level or a JSON string: the user's own choice
    compilation = dict(compilation or {})
    passes = dict(compilation.get("pass_config") or {})
    passes.setdefault("fuse_allreduce_rms", False)
    return {**kwargs, "compilation_config": {**compilation, "pass_config": passes}}

