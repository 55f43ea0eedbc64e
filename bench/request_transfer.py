"""What one batch costs to cross between evalsuite and its engine child, with the engine idle meanwhile.

The offline engine (evalsuite/engine/offline.py and vllm_offline.py) sends a batch's requests to its
child as `Request.model_dump()` dicts through a `multiprocessing` Pipe of the spawn context; the child
validates them back into `Request`s before `llm.generate`, and returns `Completion.model_dump()` dicts
that the parent validates. The engine generates nothing while that happens, and a bare
`vllm.LLM.generate` loop (bench/overhead.py's other side) pays none of it. This times exactly those
steps, the same types and the same context, for a batch shaped like MMLU 5-shot (token-id prompts,
one answer token with 20 top log-probabilities), without vLLM: the figure bench/overhead.py's MMLU gap
on a GPU is read against (docs/benchmarks.md).

    .venv/bin/python bench/request_transfer.py [--batch 1024] [--prompt-tokens 750] [--logprobs 20] [--rounds 5]

The last line printed is the RESULT line: medians over the rounds, seconds per batch.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import statistics
import time

from evalsuite.core.types import Completion, Request


def _child(conn) -> None:
    """The engine child's side: validate the requests; on "go", dump its completions and send them."""
    while True:
        msg = conn.recv()
        if msg[0] == "stop":
            return
        reqs = [Request.model_validate(r) for r in msg[1]]
        conn.send(("ok", None))  # the requests have arrived: vLLM would start here
        done = _completions(len(reqs), msg[2])  # vLLM's answers, built untimed
        conn.send(("ready", None))
        conn.recv()
        conn.send(("ok", [c.model_dump() for c in done]))


def _completions(n: int, logprobs: int) -> list[Completion]:
    tokens = [f" tok{i}" for i in range(logprobs)]
    return [Completion(text=" A", top_logprobs=[{t: -random.random() * 5 for t in tokens}], prompt_tokens=750,
                       output_tokens=1, cached_prompt_tokens=600, finish_reason="length", ttft_ms=12.0,
                       e2e_ms=12.0) for _ in range(n)]


def _requests(args) -> list[Request]:
    return [Request(prompt="x" * (4 * args.prompt_tokens),
                    prompt_token_ids=[random.randrange(150_000) for _ in range(args.prompt_tokens)],
                    max_tokens=1, logprobs=args.logprobs) for _ in range(args.batch)]


def one_round(conn, reqs: list[Request], logprobs: int) -> tuple[float, float]:
    """Seconds from the parent's dump to the child's validated requests, and from the child's dump of
    its completions to the parent's validated ones."""
    t0 = time.perf_counter()
    conn.send(("generate", [r.model_dump() for r in reqs], logprobs))
    conn.recv()
    t1 = time.perf_counter()
    conn.recv()  # the child has built its completions
    t2 = time.perf_counter()
    conn.send(("go",))
    _, payload = conn.recv()
    [Completion.model_validate(c) for c in payload]
    return t1 - t0, time.perf_counter() - t2


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=1024, help="requests a batch (evalsuite's engine.batch_size default)")
    p.add_argument("--prompt-tokens", type=int, default=750, help="token ids a prompt (MMLU 5-shot: ~750)")
    p.add_argument("--logprobs", type=int, default=20, help="top log-probabilities an answer token")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    random.seed(0)
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_child, args=(child,), daemon=True)
    proc.start()
    reqs = _requests(args)
    one_round(parent, reqs, args.logprobs)  # the child's first imports and allocations, not counted
    times = [one_round(parent, reqs, args.logprobs) for _ in range(args.rounds)]
    parent.send(("stop",))
    proc.join()
    req_s = statistics.median(t[0] for t in times)
    comp_s = statistics.median(t[1] for t in times)
    print(f"# rounds (requests s, completions s): {[(round(a, 4), round(b, 4)) for a, b in times]}")
    print(f"RESULT bench=request_transfer batch={args.batch} prompt_tokens={args.prompt_tokens} "
          f"logprobs={args.logprobs} requests_s={req_s:.4f} completions_s={comp_s:.4f} "
          f"per_item_ms={(req_s + comp_s) * 1000 / args.batch:.4f}")


if __name__ == "__main__":
    main()
