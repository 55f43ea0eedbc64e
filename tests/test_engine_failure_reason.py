"""A variant whose engine dies mid-generation is recorded with the root cause from vLLM's log, not
with the client's "see the stack trace above" (as vLLM 0.26 reported an FA3 scheduler error on the
H200)."""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path

import pytest

from evalsuite.core.types import EngineStats
from evalsuite.engine import EngineFailed
from evalsuite.engine.offline import OfflineEngine, failure_reason

CLIENT = "EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause."
CORE_LOG = """\
(EngineCore pid=2955) INFO 12-01 19:53:40 [core.py:100] init engine (profile, create kv cache) took 32 s
(EngineCore pid=2955) ERROR 12-01 19:54:07 [dump_input.py:72] Dumping input data for V1 LLM engine (v0.26.0)
(EngineCore pid=2955) ERROR 12-01 19:54:07 [core.py:1332] EngineCore encountered a fatal error.
(EngineCore pid=2955) ERROR 12-01 19:54:07 [core.py:1332] Traceback (most recent call last):
(EngineCore pid=2955) ERROR 12-01 19:54:07 [core.py:1332]     out, softmax_lse, _, _ = torch.ops._vllm_fa3_C.fwd(
(EngineCore pid=2955) ERROR 12-01 19:54:07 [core.py:1332] RuntimeError: scheduler_metadata must have shape (metadata_size)
ERROR 12-01 19:54:07 [async_llm.py:700] EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.
"""


def erroring_engine(message, conn, model, kwargs, log_path, env) -> None:
    """Stand-in for vllm_offline.worker_main that fails its first batch with `message`, its engine log
    holding the core's traceback (bound with functools.partial: spawn pickles the child's target)."""
    conn.send(("ready", EngineStats().model_dump()))
    conn.recv()
    Path(log_path).write_text(CORE_LOG)
    conn.send(("error", message))
    conn.recv()


@pytest.mark.parametrize(("message", "recorded"), [
    (CLIENT, "RuntimeError: scheduler_metadata must have shape"),  # vLLM's client: "see above"
    ("ValueError: prompt of 40000 tokens exceeds max_model_len 32768",  # a worker's own, specific
     "ValueError: prompt of 40000 tokens"),
])
def test_a_generation_failure_is_recorded_with_its_cause(tmp_path, message, recorded):
    engine = OfflineEngine("unused", {}, tmp_path / "engine.log", entry=partial(erroring_engine, message),
                           startup_timeout_s=60)
    engine.start()
    try:
        with pytest.raises(EngineFailed, match="^" + re.escape(recorded)):
            engine.generate([])
    finally:
        engine.close(wait=False)


def test_failure_reason_skips_the_generic_wrappers(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text(CORE_LOG)
    assert failure_reason(log, CLIENT) == "RuntimeError: scheduler_metadata must have shape (metadata_size)"
    assert failure_reason(tmp_path / "missing.log", CLIENT) == CLIENT


PYDANTIC_LOG = """\
(EngineCore pid=81) ERROR 12-05 02:27:40 [core.py:1332] pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig
(EngineCore pid=81) ERROR 12-05 02:27:40 [core.py:1332]   Value error, User-specified max_model_len (1000000) is greater than the derived max_model_len [type=value_error, input_value=ArgsKwargs((), {'model': 'x'}), input_type=ArgsKwargs]
(EngineCore pid=81) ERROR 12-05 02:27:40 [core.py:1332]     For further information visit https://errors.pydantic.dev/2.14/v/value_error
"""


def test_failure_reason_keeps_what_a_pydantic_error_says_below_its_count(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text(PYDANTIC_LOG)
    assert failure_reason(log, "x") == ("ValidationError: 1 validation error for ModelConfig: Value error, "
                                        "User-specified max_model_len (1000000) is greater than the derived "
                                        "max_model_len")


@pytest.mark.engine
def test_a_real_engine_refusing_its_arguments_is_recorded_with_why(tmp_path, tiny_model):
    """vLLM validates its config with pydantic, whose exception line holds only a count: the reason
    must name what was refused."""
    engine = OfflineEngine(str(tiny_model), {"max_model_len": 10**6, "dtype": "bfloat16", "enforce_eager": True},
                           tmp_path / "engine.log", env={"VLLM_ENABLE_V1_MULTIPROCESSING": "0"},
                           startup_timeout_s=300)
    try:
        with pytest.raises(EngineFailed, match=r"ValidationError: .*max_model_len \(1000000\)"):
            engine.start()
    finally:
        engine.close(wait=False)
