"""`vllm bench serve` kept resident: one process runs a pass's levels one after another.

Importing vLLM takes 15-30 s, longer than many a level; a process per level paid it every time.
This one imports it once, then per line on stdin (`{"argv": [...], "log": PATH}`, the arguments
that follow `vllm bench serve`) runs vLLM's own command line on them, exactly as `vllm bench serve
ARGS` does, with everything it prints going to PATH, and answers `{"rc": N}` on the stdout it
started with (its first line, `{"ready": true}`, once vLLM is imported). The API key comes from
its environment ($OPENAI_API_KEY), never a line. evalsuite.capacity.loadgen.Resident drives it and
ends it at a level's deadline.
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import os
import sys
import traceback

from evalsuite.engine.vllm_cli import _vllm_version, exact_flags_only, refused_flag


def _one(argv: list[str], log: str) -> int:
    """One level: vLLM's CLI on `argv`, fds 1 and 2 (its prints, its loggers, C code) into `log`."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    try:
        if refused_flag(argv):
            print("evalsuite: error: --config: refused: a file of more arguments would pass unchecked")
            return 2
        from vllm.entrypoints.cli.main import main

        sys.argv = ["vllm", "bench", "serve", *argv]
        main()
        return 0
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001  (any failure of a level is that level's, and said in its log)
        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for x in (*saved, fd):
            os.close(x)


def main() -> None:
    answer = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # what vLLM prints while it imports never mixes with the answers
    metadata.version = _vllm_version
    exact_flags_only()
    import vllm.benchmarks.serve  # noqa: F401  (the import paid once, before the first level)
    import vllm.entrypoints.cli.main  # noqa: F401

    answer.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        ask = json.loads(line)
        answer.write(json.dumps({"rc": _one([str(a) for a in ask["argv"]], str(ask["log"]))}) + "\n")


if __name__ == "__main__":
    main()
