"""The Engine protocol and the factory that picks an implementation for a run.

Two vLLM implementations share it: offline (vllm.LLM in a child process) and server
(`vllm serve` on loopback, or an already running server). Tasks never know which.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from evalsuite.types import Completion, EngineStats, Request


class Engine(Protocol):
    def start(self) -> EngineStats:
        """Load the model; returns what the engine reports about memory and capacity."""

    def generate(self, requests: list[Request], on_done: Callable[[int], None] | None = None) -> list[Completion]:
        """Run a batch; results in request order. `on_done(k)` reports k more finished."""

    def stats(self) -> EngineStats:
        """Engine stats after the workload (peak KV used, preemptions) merged with start()'s."""

    def close(self) -> None: ...


class EngineFailed(RuntimeError):
    """The engine died or refused to start; the message carries the reason for the record."""
