"""Server mode: `vllm serve` on 127.0.0.1 (or a given base URL), streamed completions.

A server this suite starts listens on the loopback interface only and answers only requests that
carry the API key made for it at start (vLLM reads it from $VLLM_API_KEY: kept out of the command
line, which engine.log records and every local user can list). An attached server (`base_url`)
gets $VLLM_API_KEY of this environment, if set.

Streaming lets the client time the first token and every later one as a user of the
OpenAI-compatible API sees them, which offline mode cannot show.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests

from evalsuite.core.types import Completion, EngineStats, Request
from evalsuite.core.units import DTYPE_BYTES, GIB
from evalsuite.engine import EngineFailed, one_at_a_time
from evalsuite.engine.offline import exited, failure_reason, fill_from_log, kill_process_group


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli_args(kwargs: dict[str, Any]) -> list[str]:
    """Engine kwargs as `vllm serve` flags, each under its exact name and bound to its value with `=`,
    so that no value is read as a flag of its own; a list's items follow its flag (argparse's nargs),
    never one that reads as an option, and a False boolean uses argparse's --no- form.
    evalsuite.engine.vllm_cli refuses a flag that vLLM's parser would only take as an abbreviation."""
    out: list[str] = []
    for key, value in kwargs.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            out.append(flag)
        elif value is False:
            out.append("--no-" + key.replace("_", "-"))
        elif isinstance(value, dict):
            out.append(f"{flag}={json.dumps(value)}")
        elif isinstance(value, list):
            items = [str(v) for v in value]
            if any(_option(v) for v in items):  # run.safety refuses these in a config, switch or not
                raise ValueError(f"{key}: an item would be read as an option of `vllm serve`")
            out += [flag, *items] if items else []
        else:
            out.append(f"{flag}={value}")
    return out


def _option(text: str) -> bool:
    try:
        float(text)
        return False
    except ValueError:
        return text.startswith("-")


def serve_command(model: str, port: int, kwargs: dict[str, Any]) -> list[str]:
    """`vllm serve` on the loopback interface; a `host` in kwargs (allowed only by the config's
    unsafe_engine_args) comes later and wins. The model is the one positional argument (vLLM moves a
    `--model=` there too), so it can never start with '-': a path that does is given as ./-PATH, the
    same file (run.config refuses such a model before it gets here)."""
    if model.startswith("-"):
        model = f"./{model}"
    return [sys.executable, "-m", "evalsuite.engine.vllm_cli", "serve", model, "--host", "127.0.0.1",
            "--port", str(port), *cli_args(kwargs)]


def parse_prometheus(text: str) -> dict[str, Any]:
    """Sum of each series over its labels, plus the labels of cache_config_info.

    prometheus_client's parser reads the exposition format (escapes, timestamps, histograms);
    a malformed line ends the parse and keeps what came before it."""
    from prometheus_client.parser import text_string_to_metric_families

    vals: dict[str, Any] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "vllm:cache_config_info" and sample.labels:
                    vals["cache_config_info"] = dict(sample.labels)
                vals[sample.name] = vals.get(sample.name, 0.0) + float(sample.value)
    except ValueError:
        pass
    return vals


def _int(x: Any) -> int | None:
    try:
        return int(float(x))
    except (TypeError, ValueError):
        return None


def stats_from_metrics(vals: dict[str, Any], stats: EngineStats) -> EngineStats:
    info = vals.get("cache_config_info", {})
    s = stats.model_copy(deep=True)
    s.block_size = _int(info.get("block_size")) or s.block_size
    s.kv_cache_blocks = _int(info.get("num_gpu_blocks")) or s.kv_cache_blocks
    tokens = _int(info.get("kv_cache_size_tokens"))
    if tokens or (s.kv_cache_blocks and s.block_size):
        s.kv_cache_tokens = tokens or s.kv_cache_blocks * s.block_size
        s.source["kv_cache_tokens"] = "api"
    conc = info.get("kv_cache_max_concurrency")
    if conc not in (None, "None"):
        s.max_concurrency = float(conc)
    if "vllm:num_preemptions_total" in vals:
        s.num_preemptions = int(vals["vllm:num_preemptions_total"])
    hits, queries = vals.get("vllm:prefix_cache_hits_total"), vals.get("vllm:prefix_cache_queries_total")
    if hits is not None and queries:
        s.prefix_cache_hit_rate = hits / queries
    return s


class ServerEngine:
    def __init__(self, model: str, kwargs: dict[str, Any], log_path: Path, env: dict[str, str] | None = None,
                 base_url: str | None = None, startup_timeout_s: float = 900, concurrency: int | None = None):
        self.model, self.kwargs, self.log_path = model, dict(kwargs), Path(log_path)
        self.env, self.base_url, self.startup_timeout_s = env or {}, base_url, startup_timeout_s
        self.concurrency = concurrency or int(self.kwargs.get("max_num_seqs", 32))
        self._proc: subprocess.Popen | None = None
        self._served: str | None = None
        self._stats = EngineStats()
        self._http = requests.Session()
        self._closing = threading.Lock()
        self._api_key = os.environ.get("VLLM_API_KEY") if base_url else secrets.token_urlsafe(32)
        if self._api_key:
            self._http.headers["Authorization"] = f"Bearer {self._api_key}"

    def _launch(self) -> None:
        port = free_port()
        self.base_url = f"http://127.0.0.1:{port}"
        cmd = serve_command(self.model, port, self.kwargs)
        env = {**os.environ, **self.env, "EVALSUITE_PARENT_PID": str(os.getpid()), "VLLM_API_KEY": self._api_key}
        log = self.log_path.open("ab")
        log.write(("$ " + " ".join(cmd) + "\n").encode())
        log.flush()
        self._proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._proc is not None and exited(self._proc):
                raise EngineFailed(failure_reason(self.log_path, f"vllm serve exited with code {self._proc.returncode}"))
            try:
                r = self._http.get(f"{self.base_url}/v1/models", timeout=5)
                if r.ok:
                    self._served = r.json()["data"][0]["id"]
                    return
            except requests.RequestException:
                pass
            time.sleep(1.0)
        raise EngineFailed(f"vllm serve not ready after {self.startup_timeout_s:.0f} s ({self.base_url})")

    def start(self) -> EngineStats:
        t0 = time.perf_counter()
        self.base_url_owned = self.base_url is None
        if self.base_url_owned:
            self._launch()
        self._wait_ready()
        self._stats = EngineStats(startup_s=time.perf_counter() - t0, vllm_version=self._version())
        self._stats = stats_from_metrics(self._metrics(), self._stats)
        fill_from_log(self._stats, self.log_path)
        if self._stats.weights_gib is None and not self.kwargs.get("quantization") and self.base_url_owned:
            self._stats.weights_gib = checkpoint_gib(self.model)
            if self._stats.weights_gib is not None:
                self._stats.source["weights_gib"] = "checkpoint"
        return self._stats

    def _version(self) -> str | None:
        try:
            return self._http.get(f"{self.base_url}/version", timeout=5).json().get("version")
        except (requests.RequestException, ValueError):
            return None

    def _metrics(self) -> dict[str, Any]:
        try:
            return parse_prometheus(self._http.get(f"{self.base_url}/metrics", timeout=10).text)
        except requests.RequestException:
            return {}

    def _body(self, req: Request) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self._served, "prompt": req.prompt_token_ids if req.prompt_token_ids is not None else req.prompt,
            "max_tokens": req.max_tokens, "temperature": req.temperature, "stream": True,
            "stream_options": {"include_usage": True}, "ignore_eos": req.ignore_eos,
        }
        if req.logprobs is not None:
            body["logprobs"] = req.logprobs
        if req.prompt_logprobs is not None:
            body["prompt_logprobs"] = req.prompt_logprobs
        if req.stop:
            body["stop"] = req.stop
        if req.seed is not None:
            body["seed"] = req.seed
        return body

    def _one(self, req: Request) -> Completion:
        t0 = time.perf_counter()
        stamps: list[float] = []
        text, top, usage, finish = [], [], {}, None
        with self._http.post(f"{self.base_url}/v1/completions", json=self._body(req), stream=True, timeout=3600) as r:
            if not r.ok:
                raise EngineFailed(f"server answered {r.status_code}: {r.text[:300]}")
            for line in r.iter_lines():
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                usage = chunk.get("usage") or usage
                for ch in chunk.get("choices", []):
                    stamps.append(time.perf_counter())
                    text.append(ch.get("text", ""))
                    lp = ch.get("logprobs") or {}
                    top += [dict(d) for d in (lp.get("top_logprobs") or []) if d is not None]
                    finish = ch.get("finish_reason") or finish
        return _completion(t0, stamps, "".join(text), top, usage, finish)

    def _scored(self, req: Request) -> Completion:
        """A prompt-logprob request: vLLM refuses those when streaming, so one plain response
        (no per-token timing; log-likelihood requests measure accuracy, not latency)."""
        body = {**self._body(req), "stream": False}
        body.pop("stream_options")
        r = self._http.post(f"{self.base_url}/v1/completions", json=body, timeout=3600)
        if not r.ok:
            raise EngineFailed(f"server answered {r.status_code}: {r.text[:300]}")
        data = r.json()
        choice = data["choices"][0]
        done = _completion(time.perf_counter(), [], choice.get("text", ""), [], data.get("usage") or {},
                           choice.get("finish_reason"))
        ids = req.prompt_token_ids or []
        steps = [{int(k): v for k, v in step.items()} if step else {} for step in choice.get("prompt_logprobs") or []]
        picked = [step.get(tid) for tid, step in zip(ids, steps)]
        done.prompt_logprobs = [p["logprob"] if p else None for p in picked]
        done.prompt_ranks = [p.get("rank") if p else None for p in picked]
        return done

    def generate(self, requests_: list[Request], on_done: Callable[[int], None] | None = None) -> list[Completion]:
        with ThreadPoolExecutor(max_workers=max(1, min(self.concurrency, len(requests_)))) as pool:
            out = list(pool.map(lambda r: self._scored(r) if r.prompt_logprobs is not None else self._one(r), requests_))
        if on_done:
            on_done(len(requests_))
        return out

    def pipelined(self, batches: Iterable[list[Request]]) -> Iterator[list[Completion]]:
        # each request of a batch is already its own HTTP call, run side by side: no batch to send ahead
        return one_at_a_time(self, batches)

    def endpoint(self) -> tuple[str | None, str | None, str | None]:
        """Where another client of this server (a load generator) reaches it, once started: its base
        URL, its API key and the id it serves the model under."""
        return self.base_url, self._api_key, self._served

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None else None

    def stats(self) -> EngineStats:
        return stats_from_metrics(self._metrics(), self._stats)

    def close(self, wait: bool = True) -> None:
        with self._closing:  # the owner's thread and a packed run's interrupt may both close it
            self._close(wait)

    def _close(self, wait: bool) -> None:
        self._http.close()
        if self._proc is None:
            return
        # The server leads its own session; its API server, engine core and tensor-parallel workers
        # share the group and are ended together, also when the server itself already died.
        kill_process_group(self._proc.pid, grace_s=30 if wait else 0)
        self._proc.wait()
        self._proc = None


def checkpoint_gib(model_dir: str) -> float | None:
    """Tensor bytes of the checkpoint, from safetensors' headers: what an unquantized load holds.

    The CPU server logs no weight size and offers no apply_model, so for unquantized
    variants the checkpoint is the exact answer; quantized-on-load variants get none.
    """
    from safetensors import safe_open

    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for f in files:
        with safe_open(f, framework="numpy") as fh:
            for name in fh.keys():
                tensor = fh.get_slice(name)
                total += math.prod(tensor.get_shape()) * DTYPE_BYTES[tensor.get_dtype()]
    return total / GIB


def _completion(t0: float, stamps: list[float], text: str, top: list, usage: dict, finish) -> Completion:
    n_out = int(usage.get("completion_tokens") or len(stamps))
    ttft = (stamps[0] - t0) * 1000 if stamps else None
    itl = (stamps[-1] - stamps[0]) * 1000 / (n_out - 1) if len(stamps) > 1 and n_out > 1 else None
    e2e = (stamps[-1] - t0) * 1000 if stamps else None
    details = usage.get("prompt_tokens_details") or {}
    return Completion(text=text, top_logprobs=top, prompt_tokens=int(usage.get("prompt_tokens") or 0),
                      output_tokens=n_out, cached_prompt_tokens=details.get("cached_tokens"),
                      finish_reason=finish, ttft_ms=ttft, itl_ms=itl, e2e_ms=e2e)
