"""The only module that imports vllm. Runs inside the offline engine's child process."""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from evalsuite.core.types import Completion, EngineStats, Request
from evalsuite.core.units import GIB


def _sampling(req: Request):
    from vllm import SamplingParams

    return SamplingParams(
        max_tokens=req.max_tokens,
        temperature=req.temperature,
        logprobs=req.logprobs,
        prompt_logprobs=req.prompt_logprobs,
        stop=req.stop or None,
        ignore_eos=req.ignore_eos,
        seed=req.seed,
    )


def _prompt(req: Request):
    from vllm.inputs import TokensPrompt

    if req.prompt_token_ids is not None:
        return TokensPrompt(prompt_token_ids=req.prompt_token_ids)
    return req.prompt


def _top_logprobs(step: dict[int, Any]) -> dict[str, float]:
    """Token text -> logprob; two ids that decode alike keep the larger logprob."""
    out: dict[str, float] = {}
    for tid, lp in step.items():
        text = lp.decoded_token if lp.decoded_token is not None else f"<{tid}>"
        if text not in out or lp.logprob > out[text]:
            out[text] = float(lp.logprob)
    return out


def _first_token_s(m) -> float | None:
    """Arrival to first token; older engines lack first_token_latency but keep core timestamps."""
    if m is None:
        return None
    latency = getattr(m, "first_token_latency", None)
    if latency:
        return latency
    first, queued = getattr(m, "first_token_ts", 0.0), getattr(m, "queued_ts", 0.0)
    return first - queued if first and queued else None


def prompt_token_logprobs(ids: list[int], steps: list | None) -> tuple[list[float | None], list[int | None]]:
    """Each prompt token's own log-probability and rank, picked out of vLLM's per-position dicts."""
    if not steps:
        return [], []
    lps: list[float | None] = []
    ranks: list[int | None] = []
    for tid, step in zip(ids, steps):
        lp = step.get(tid) if step else None
        lps.append(None if lp is None else float(lp.logprob))
        ranks.append(None if lp is None else lp.rank)
    return lps, ranks


def to_completion(res) -> Completion:
    out = res.outputs[0]
    m = res.metrics
    ttft = itl = e2e = None
    n_gen = len(out.token_ids)
    first = _first_token_s(m)
    if first:
        ttft = first * 1000
        decode_s = max(m.last_token_ts - m.first_token_ts, 0.0)
        itl = decode_s * 1000 / (n_gen - 1) if n_gen > 1 else None
        e2e = ttft + decode_s * 1000
    prompt_lps, prompt_ranks = prompt_token_logprobs(list(res.prompt_token_ids or []), res.prompt_logprobs)
    return Completion(
        text=out.text,
        prompt_logprobs=prompt_lps,
        prompt_ranks=prompt_ranks,
        top_logprobs=[_top_logprobs(s) for s in (out.logprobs or [])],
        prompt_tokens=len(res.prompt_token_ids or []),
        output_tokens=n_gen,
        cached_prompt_tokens=res.num_cached_tokens,
        finish_reason=out.finish_reason,
        ttft_ms=ttft,
        itl_ms=itl,
        e2e_ms=e2e,
    )


def _metric_values(llm) -> dict[str, float]:
    """Counters and gauges from the engine's Prometheus snapshot, summed over labels."""
    vals: dict[str, float] = {}
    for m in llm.get_metrics():
        v = getattr(m, "value", None)
        if isinstance(v, (int, float)):
            vals[m.name] = vals.get(m.name, 0.0) + float(v)
    return vals


def engine_stats(llm, startup_s: float) -> EngineStats:
    import vllm

    from evalsuite.engine.probes import model_bytes

    cc = llm.llm_engine.vllm_config.cache_config
    mc = llm.llm_engine.vllm_config.model_config
    stats = EngineStats(vllm_version=vllm.__version__, startup_s=startup_s, max_model_len=mc.max_model_len)
    stats.block_size = cc.block_size
    stats.kv_cache_blocks = cc.num_gpu_blocks
    tokens = getattr(cc, "kv_cache_size_tokens", None)
    stats.kv_cache_tokens = tokens if tokens else (cc.num_gpu_blocks or 0) * cc.block_size
    conc = getattr(cc, "kv_cache_max_concurrency", None)
    stats.max_concurrency = conc if conc else stats.kv_cache_tokens / mc.max_model_len
    stats.source = {"kv_cache_tokens": "api", "block_size": "api", "max_concurrency": "api" if conc else "computed"}
    try:
        mb = llm.apply_model(model_bytes)[0]
        stats.weights_gib = (mb["param_bytes"] + mb["buffer_bytes"]) / GIB
        stats.source["weights_gib"] = "api"
    except Exception as e:  # older engines refuse apply_model; the log parser fills it then
        print(f"evalsuite: apply_model failed: {e}", file=sys.stderr)
    return stats


_KV_GAUGES = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")  # vLLM >= 0.11, and before


def next_pause(elapsed_s: float, read_s: float, interval_s: float, budget: float, max_pause_s: float) -> float:
    """KVPeak's wait before its next read: `interval_s` at first, then a tenth of the time elapsed,
    at least `budget` times the last read's duration, never more than `max_pause_s`."""
    return min(max(interval_s, elapsed_s / 10, budget * read_s), max_pause_s)


class KVPeak:
    """Samples the engine's KV-usage gauge over the engine's life; the gauge itself holds only 'now'.

    Each wake-up takes the GIL from the engine's own loop: `llm.get_metrics()` every 20 ms made a
    CPU engine's batch 12% slower, and even a microsecond read of the gauge alone every 20 ms 5-8%
    (both measured inside one process, alternating with and without the sampler). So it reads only
    the gauge's collector, every 20 ms for a batch's first 0.2 s (short batches keep their peak) and
    then every tenth of the time elapsed, at least `budget` times a read's duration and at most
    max_pause_s apart: about 1% of a long batch, with the peak resolved to ~10% of its duration.
    One thread for the engine's life, told of each batch by `begin()`: a thread started per batch
    waits for the GIL at every start, 20-50 ms a batch while the previous batch's answers are
    converted beside it.

    A batch shorter than the first pause (a tiny model on a loaded CPU) can end unseen, so `settle()`
    raises the peak to a floor no sampling can miss: the blocks the largest request held at its last
    step (`blocks` = block size and pool size; None where a request's blocks are not all held to its
    end, as with sliding-window or hybrid attention).
    """

    def __init__(self, llm, interval_s: float = 0.02, budget: float = 100.0, max_pause_s: float = 1.0,
                 registry=None, blocks: tuple[int, int] | None = None):
        self.llm, self.interval_s, self.budget, self.max_pause_s = llm, interval_s, budget, max_pause_s
        self.blocks = blocks
        self.peak, self.reads = 0.0, 0
        self._registry = registry
        self._begun = time.perf_counter()
        self._stop = threading.Event()
        self._kick = threading.Event()  # a batch began (or the sampler ends): its schedule restarts
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _read(self) -> float:
        gauges = self._gauges.collect()
        values = [s.value for m in gauges for s in m.samples if s.name in _KV_GAUGES]
        if values:
            return max(values)
        for m in self.llm.get_metrics():  # an engine whose metrics live elsewhere
            if m.name in _KV_GAUGES:
                return float(m.value)
        return 0.0

    def _run(self) -> None:
        if self._registry is None:  # imported here so that its first-time cost is not a read's
            from prometheus_client import REGISTRY

            self._registry = REGISTRY
        self._gauges = self._registry.restricted_registry(list(_KV_GAUGES))
        pause = self.interval_s
        while not self._stop.is_set():
            if self._kick.wait(pause):
                self._kick.clear()
                pause = self.interval_s
                continue
            t0 = time.perf_counter()
            try:
                self.peak = max(self.peak, self._read())
                self.reads += 1
            except Exception:  # a registry read racing a write is retried next tick
                pass
            t1 = time.perf_counter()
            pause = next_pause(t1 - self._begun, t1 - t0, self.interval_s, self.budget, self.max_pause_s)

    def begin(self) -> None:
        """A batch starts now: read often again, then back off with its elapsed time."""
        self._begun = time.perf_counter()
        self._kick.set()

    def settle(self, results) -> None:
        """A batch ended: its largest request's blocks are a floor under the batch's peak."""
        if not self.blocks or not results:
            return
        block_size, pool = self.blocks
        # the last sampled token never enters the cache, so a request held prompt + output - 1 slots
        held = max(len(r.prompt_token_ids or ()) + max((len(o.token_ids) for o in r.outputs), default=0) - 1
                   for r in results)
        self.peak = max(self.peak, min(1.0, -(-max(held, 0) // block_size) / pool))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._kick.set()
        self._thread.join()


def _whole_request_blocks(llm) -> tuple[int, int] | None:
    """(block size, pool blocks) where every request holds all its blocks until it ends, else None."""
    try:
        cc = llm.llm_engine.vllm_config.cache_config
        mc = llm.llm_engine.vllm_config.model_config
        partial = mc.is_hybrid or mc.is_attention_free or mc.get_sliding_window()
    except AttributeError:  # an engine that does not say: sampling alone
        return None
    return None if partial or not cc.num_gpu_blocks else (cc.block_size, cc.num_gpu_blocks)


def _read_ahead(conn, inbox: queue.SimpleQueue) -> None:
    """Receives the parent's messages while the engine works, so that the next batch's unpickling
    and vLLM's prompts and sampling parameters for it are ready when the current batch ends."""
    while True:
        msg = conn.recv()
        if msg[0] == "generate":
            try:
                msg = ("generate", [_prompt(r) for r in msg[1]], [_sampling(r) for r in msg[1]])
            except Exception as e:  # noqa: BLE001 - a request vLLM refuses fails its batch, in its turn
                traceback.print_exc()
                msg = ("refused", f"{type(e).__name__}: {e}")
        inbox.put(msg)
        if msg[0] == "close":
            return


def _reply(conn, results) -> None:
    try:
        completions = [to_completion(r) for r in results]
    except Exception as e:  # noqa: BLE001 - the parent must hear of it, not wait for an answer
        traceback.print_exc()
        conn.send(("error", f"{type(e).__name__}: {e}"))
        return
    conn.send(("ok", completions))


def _serve(conn, llm, startup_s: float) -> None:
    """Answers the parent's messages in order. Reading the next message and converting and sending
    a batch's results run on two threads beside the engine: done in line they left it idle (~0.08 ms
    an MMLU item, bench/request_transfer.py). One sending thread keeps the replies in order."""
    inbox: queue.SimpleQueue = queue.SimpleQueue()
    threading.Thread(target=_read_ahead, args=(conn, inbox), daemon=True, name="evalsuite-inbox").start()
    with KVPeak(llm, blocks=_whole_request_blocks(llm)) as kv, ThreadPoolExecutor(max_workers=1, thread_name_prefix="evalsuite-outbox") as outbox:
        while True:
            msg = inbox.get()
            op = msg[0]
            if op == "generate":
                kv.begin()
                results = llm.generate(msg[1], msg[2], use_tqdm=False)
                kv.settle(results)
                outbox.submit(_reply, conn, results)
            elif op == "refused":
                outbox.submit(conn.send, ("error", msg[1]))
            elif op == "metrics":
                outbox.submit(conn.send, ("ok", {**_metric_values(llm), "kv_usage_peak": kv.peak}))
            elif op == "close":
                break
    _shutdown(llm)
    conn.send(("ok", None))


def _shutdown(llm) -> None:
    try:
        llm.llm_engine.engine_core.shutdown()
    except Exception:  # best effort: the parent terminates the process tree anyway
        pass


def _own_resource_tracker() -> None:
    """A resource tracker of this process's own, started on first use with its stderr the engine log.
    A spawned child shares its parent's tracker, which reports at the parent's exit the semaphores
    vLLM registered here and os._exit left registered ("leaked semaphore objects": it unlinks them,
    harmless) on the user's console. The tracker's public functions are bound to the one instance,
    so it is re-initialised in place (private in the standard library, unchanged since 3.8)."""
    from multiprocessing import resource_tracker

    resource_tracker._resource_tracker.__init__()


def worker_main(conn, model: str, kwargs: dict[str, Any], log_path: str, env: dict[str, str]) -> None:
    """Child-process entry: start the engine, answer requests until told to close."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    _own_resource_tracker()
    os.environ.update(env)
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")  # apply_model ships a function
    try:
        from vllm import LLM

        t0 = time.perf_counter()
        llm = LLM(model=model, disable_log_stats=False, **kwargs)
        stats = engine_stats(llm, time.perf_counter() - t0)
        conn.send(("ready", stats.model_dump()))
    except BaseException as e:  # any start failure is this variant's recorded reason
        traceback.print_exc()
        conn.send(("error", f"{type(e).__name__}: {e}"))
        return
    try:
        _serve(conn, llm, stats.startup_s or 0.0)
    except BaseException as e:
        traceback.print_exc()
        try:
            conn.send(("error", f"{type(e).__name__}: {e}"))
        except Exception:
            pass
    finally:
        sys.stdout.flush()
        os._exit(0)  # skip vLLM's slow atexit teardown; the parent reaps the process tree
