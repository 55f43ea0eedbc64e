"""The offline engine takes the next batch while it answers the current one (`pipelined`), answers in
order, and stays in step when a caller stops early or a batch fails.

The child runs the real `_serve` loop around a stand-in LLM that echoes its prompts. Whether a batch
was sent ahead is a fact, not a timing: the stand-in's generate() for batch k waits until the
child's reader has prepared batch k+1 (it sees its prompts), and says whether it came.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from evalsuite.core.types import EngineStats, Request
from evalsuite.engine import EngineFailed
from evalsuite.engine.offline import OfflineEngine


class EchoLLM:
    def __init__(self, prepared: dict[int, threading.Event], batches: int, fail_at: int | None):
        self.prepared, self.batches, self.fail_at = prepared, batches, fail_at

    def generate(self, prompts, params, use_tqdm=False):
        k = batch_of(prompts[0])
        if k == self.fail_at:
            raise RuntimeError("boom")
        ahead = k + 1 < self.batches and self.prepared.setdefault(k + 1, threading.Event()).wait(30)
        return [SimpleNamespace(outputs=[SimpleNamespace(text=f"{p}|{'ahead' if ahead else 'alone'}", token_ids=[0],
                                                         logprobs=None, finish_reason="length")],
                                metrics=None, prompt_token_ids=[1], prompt_logprobs=None, num_cached_tokens=0)
                for p in prompts]

    def get_metrics(self):
        return []


def batch_of(prompt: str) -> int:
    return int(prompt.split("/")[0][1:])


def echo_worker(conn, model, kwargs, log_path, env) -> None:
    """OfflineEngine's child entry: the real `_serve`, the stand-in in vLLM's place, and the reader's
    prompt building watched so that the stand-in knows which batches have arrived."""
    from evalsuite.engine import vllm_offline

    prepared: dict[int, threading.Event] = {}

    def prompt(req: Request):
        prepared.setdefault(batch_of(req.prompt), threading.Event()).set()
        return req.prompt

    vllm_offline._prompt = prompt
    vllm_offline._sampling = lambda req: None  # the stand-in needs no parameters: no vLLM import
    conn.send(("ready", EngineStats().model_dump()))
    try:
        vllm_offline._serve(conn, EchoLLM(prepared, kwargs["batches"], kwargs.get("fail_at")), 0.0)
    except Exception as e:  # as worker_main reports it
        conn.send(("error", f"{type(e).__name__}: {e}"))


def batch(k: int, size: int = 3) -> list[Request]:
    return [Request(prompt=f"b{k}/i{i}", max_tokens=1) for i in range(size)]


@pytest.fixture
def engine(tmp_path, request):
    eng = OfflineEngine("stand-in", request.param, tmp_path / "engine.log", entry=echo_worker, startup_timeout_s=120)
    eng.start()
    yield eng
    eng.close()


@pytest.mark.parametrize("engine", [{"batches": 4}], indirect=True)
def test_each_batch_but_the_last_finds_the_next_one_waiting(engine):
    got = [[c.text for c in done] for done in engine.pipelined(batch(k) for k in range(4))]
    assert got == [[f"b{k}/i{i}|{'ahead' if k < 3 else 'alone'}" for i in range(3)] for k in range(4)]


@pytest.mark.parametrize("engine", [{"batches": 3}], indirect=True)
def test_a_caller_that_stops_early_leaves_the_engine_in_step(engine):
    stream = engine.pipelined(batch(k) for k in range(3))
    assert next(stream)[0].text == "b0/i0|ahead"
    stream.close()  # batches 1 and 2 were sent; their answers must not be taken for the next call's
    assert [c.text for c in engine.generate(batch(9, size=2))] == ["b9/i0|alone", "b9/i1|alone"]
    assert engine.stats() is not None


@pytest.mark.parametrize("engine", [{"batches": 4, "fail_at": 2}], indirect=True)
def test_a_failing_batch_fails_the_stream_after_the_answers_before_it(engine):
    got = []
    with pytest.raises(EngineFailed, match="RuntimeError: boom"):
        for done in engine.pipelined(batch(k) for k in range(4)):
            got.append(done[0].text)
    assert got == ["b0/i0|ahead", "b1/i0|ahead"]
