"""What evalsuite's offline engine adds around each `llm.generate` call, with the engine idle meanwhile.

The parent sends a batch's requests through a Pipe to the engine child (evalsuite/engine/offline.py),
the child turns them into vLLM prompts and sampling parameters, runs `llm.generate`, converts each
output into a `Completion` and sends them back (`_serve` in evalsuite/engine/vllm_offline.py). This
runs that real code (`OfflineEngine` with its `entry` hook, the real `_serve` and `to_completion`)
around a stand-in `llm` that answers at once with outputs built beforehand, shaped like MMLU 5-shot
(token-id prompts, one answer token with 20 top log-probabilities). A bare `vllm.LLM.generate` loop
(bench/overhead.py's other side) pays only for building the prompts and sampling parameters
(`bare_s`, timed apart here); the rest (`overhead_s`) is what bench/overhead.py's MMLU gap on a GPU
is read against (docs/benchmarks.md). Needs vLLM importable (SamplingParams), no model and no GPU.

The second part asks what of that stays on the engine's critical path: `--rounds` batches to a
stand-in that takes `--engine-s` a batch (sleeping, as vLLM's client waits on a GPU's engine core),
once a call after another (`generate`) and once pipelined (`pipelined`: the next batch sent while
the engine answers the current one, as the runner asks). `*_beyond_s` is the wall time a batch
beyond the engine's own; pipelined it should be near zero.

    .venv/bin/python bench/request_transfer.py [--batch 1024] [--prompt-tokens 750] [--logprobs 20] [--rounds 5]
        [--engine-s 0.5]

The last line printed is the RESULT line: medians over the rounds, seconds per batch.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace


class StandInLLM:
    """Answers every batch at once with the same prebuilt outputs; has no metrics of its own."""

    def __init__(self, batch: int, prompt_tokens: int, logprobs: int, engine_s: float = 0.0):
        self.engine_s = engine_s
        ids = list(range(prompt_tokens))
        step = {i: SimpleNamespace(decoded_token=f" tok{i}", logprob=-random.random() * 5, rank=i + 1)
                for i in range(logprobs)}
        self.outputs = [SimpleNamespace(
            outputs=[SimpleNamespace(text=" A", token_ids=[0], logprobs=[step] if logprobs else None,
                                     finish_reason="length")],
            metrics=None, prompt_token_ids=ids, prompt_logprobs=None, num_cached_tokens=prompt_tokens - 150)
            for _ in range(batch)]

    def generate(self, prompts, params, use_tqdm=False):
        if self.engine_s:  # a GPU's batch: the client waits on the engine core and holds no GIL
            time.sleep(self.engine_s)
        return self.outputs[:len(prompts)]

    def get_metrics(self):
        return []


def stand_in_worker(conn, model: str, kwargs: dict, log_path: str, env: dict) -> None:
    """OfflineEngine's child entry with the stand-in in vLLM's place; the loop is the real `_serve`."""
    from evalsuite.core.types import EngineStats
    from evalsuite.engine.vllm_offline import _serve

    conn.send(("ready", EngineStats().model_dump()))
    _serve(conn, StandInLLM(**kwargs), 0.0)


def requests(args) -> list:
    from evalsuite.core.types import Request

    return [Request(prompt="x" * (4 * args.prompt_tokens),
                    prompt_token_ids=[random.randrange(150_000) for _ in range(args.prompt_tokens)],
                    max_tokens=1, logprobs=args.logprobs or None) for _ in range(args.batch)]


def bare_build_s(reqs) -> float:
    """What the bare loop does per batch besides generating: vLLM's prompts and sampling parameters."""
    from evalsuite.engine.vllm_offline import _prompt, _sampling

    t = time.perf_counter()
    [_prompt(r) for r in reqs], [_sampling(r) for r in reqs]
    return time.perf_counter() - t


def measure(args) -> tuple[list[tuple[float, float]], float, float]:
    """Per round: the engine call and the bare build with an engine that answers at once; then the
    wall time of `--rounds` batches to an engine that takes `--engine-s` a batch, one call after
    another and pipelined (the next batch sent while the engine answers the current one)."""
    from evalsuite.engine.offline import OfflineEngine

    reqs = requests(args)
    with tempfile.TemporaryDirectory() as tmp:
        kwargs = {"batch": args.batch, "prompt_tokens": args.prompt_tokens, "logprobs": args.logprobs}
        engine = OfflineEngine("stand-in", kwargs, Path(tmp) / "engine.log", entry=stand_in_worker)
        slow = OfflineEngine("stand-in", {**kwargs, "engine_s": args.engine_s}, Path(tmp) / "slow.log",
                             entry=stand_in_worker)
        engine.start(), slow.start()
        try:
            engine.generate(reqs), slow.generate(reqs)  # the children's first imports, not counted
            bare_build_s(reqs)  # and this process's
            times = []
            for _ in range(args.rounds):
                t = time.perf_counter()
                engine.generate(reqs)
                times.append((time.perf_counter() - t, bare_build_s(reqs)))
            t = time.perf_counter()
            for _ in range(args.rounds):
                slow.generate(reqs)
            serial_s = time.perf_counter() - t
            t = time.perf_counter()
            for _ in slow.pipelined([reqs] * args.rounds):
                pass
            pipelined_s = time.perf_counter() - t
        finally:
            engine.close(), slow.close()
    return times, serial_s, pipelined_s


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=1024, help="requests a batch (evalsuite's engine.batch_size default)")
    p.add_argument("--prompt-tokens", type=int, default=750, help="token ids a prompt (MMLU 5-shot: ~750)")
    p.add_argument("--logprobs", type=int, default=20, help="top log-probabilities an answer token (0: none)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--engine-s", type=float, default=0.5,
                   help="the stand-in engine's time a batch in the serial/pipelined comparison")
    args = p.parse_args(argv)
    random.seed(0)
    times, serial_s, pipelined_s = measure(args)
    call_s = statistics.median(t[0] for t in times)
    bare_s = statistics.median(t[1] for t in times)
    print(f"# rounds (engine call s, bare build s): {[(round(a, 4), round(b, 4)) for a, b in times]}")
    print(f"RESULT bench=request_transfer batch={args.batch} prompt_tokens={args.prompt_tokens} "
          f"logprobs={args.logprobs} call_s={call_s:.4f} bare_s={bare_s:.4f} overhead_s={call_s - bare_s:.4f} "
          f"per_item_ms={(call_s - bare_s) * 1000 / args.batch:.4f} engine_s={args.engine_s} "
          f"serial_beyond_s={(serial_s / args.rounds - args.engine_s):.4f} "
          f"pipelined_beyond_s={(pipelined_s / args.rounds - args.engine_s):.4f}")


if __name__ == "__main__":
    main()
