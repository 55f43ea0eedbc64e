"""Print `uv pip install` options that carry over this machine's pip configuration.

uv reads no pip.conf and no PIP_* variables, so a machine that gets a wheel from a local
folder (find-links), a mirror (index-url) or a private CA (cert) would lose them when setup
switches from pip to uv. `pip config list` shows what pip would use (files and environment,
the environment last, as pip lets it win); this turns it into uv options, one per line.
Index folders that do not exist are dropped: pip only warns about them, uv stops.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

MULTI = {"find-links": "--find-links", "extra-index-url": "--extra-index-url"}
SINGLE = {"index-url": "--index-url", "constraint": "--constraint"}


def pip_config(python: str) -> dict[str, str]:
    out = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    config: dict[str, str] = {}
    for line in out.splitlines():
        key, _, value = line.partition("=")
        section, _, name = key.partition(".")
        if section in ("global", "install", ":env:") and name:
            config[name] = value.strip().strip("'\"")  # later lines (the environment) win
    return config


def _reachable(location: str) -> bool:
    parsed = urlparse(location)
    if parsed.scheme in ("http", "https"):
        return True
    return Path(parsed.path if parsed.scheme == "file" else location).exists()


def uv_options(config: dict[str, str]) -> list[str]:
    opts: list[str] = []
    for name, flag in MULTI.items():
        for value in shlex.split(config.get(name, "")):
            if _reachable(value):
                opts += [flag, value]
    for name, flag in SINGLE.items():
        if config.get(name) and _reachable(config[name]):
            opts += [flag, config[name]]
    return opts


def uv_env(config: dict[str, str]) -> list[str]:
    """KEY=VALUE lines for the environment of uv."""
    env = []
    if config.get("cert"):
        env.append(f"SSL_CERT_FILE={config['cert']}")
    if config.get("default-timeout") or config.get("timeout"):
        env.append(f"UV_HTTP_TIMEOUT={config.get('default-timeout') or config.get('timeout')}")
    return env


def main(argv: list[str]) -> int:
    python, what = argv[1], argv[2]
    config = pip_config(python)
    lines = uv_options(config) if what == "options" else uv_env(config)
    sys.stdout.write("".join(f"{line}\n" for line in lines))  # nothing at all when empty
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
