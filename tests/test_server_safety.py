"""A server evalsuite starts listens on the loopback interface only and refuses requests without
the API key it made for this run; the key stays out of the command line and engine.log."""

from __future__ import annotations

import psutil
import pytest
import requests

from evalsuite.core.types import Request
from evalsuite.engine.server import ServerEngine, serve_command


def test_serve_command_binds_loopback_and_carries_no_key():
    cmd = serve_command("/m", 8123, {"max_model_len": 512})
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and cmd.count("--host") == 1
    assert not any("key" in part for part in cmd)


def test_each_started_server_has_its_own_key(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_API_KEY", "from-the-environment")
    a, b = (ServerEngine("/m", {}, tmp_path / "log") for _ in range(2))
    assert a._api_key != b._api_key and len(a._api_key) >= 32 and "from-the-environment" not in (a._api_key, b._api_key)
    assert a._http.headers["Authorization"] == f"Bearer {a._api_key}"
    attached = ServerEngine("/m", {}, tmp_path / "log", base_url="http://localhost:8000")
    assert attached._api_key == "from-the-environment"  # a server of the user's own: the user's key


def listening(pid: int) -> set[str]:
    procs = [psutil.Process(pid)] + psutil.Process(pid).children(recursive=True)
    addrs = set()
    for proc in procs:
        try:
            conns = proc.net_connections(kind="inet")
        except psutil.NoSuchProcess:
            continue
        addrs |= {c.laddr.ip for c in conns if c.status == psutil.CONN_LISTEN}
    return addrs


@pytest.mark.engine
def test_started_server_is_loopback_only_and_needs_its_key(tmp_path, tiny_model):
    log = tmp_path / "engine.log"
    kwargs = {"dtype": "bfloat16", "max_model_len": 512, "enforce_eager": True, "kv_cache_memory_bytes": 32 * 2**20}
    engine = ServerEngine(str(tiny_model), kwargs, log, env={"VLLM_ENABLE_V1_MULTIPROCESSING": "0"},
                          startup_timeout_s=600)
    try:
        engine.start()
        assert listening(engine._proc.pid) == {"127.0.0.1"}
        refused = requests.get(f"{engine.base_url}/v1/models", timeout=10)
        wrong = requests.get(f"{engine.base_url}/v1/models", headers={"Authorization": "Bearer wrong"}, timeout=10)
        assert refused.status_code == wrong.status_code == 401
        (done,) = engine.generate([Request(prompt="Hello", max_tokens=2, temperature=0.0)])
        assert done.output_tokens >= 1
    finally:
        engine.close()
    assert engine._api_key not in log.read_text()
