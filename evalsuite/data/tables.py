"""Shared data plumbing for tasks: is the hub reachable, table files, seeded and label-stratified subsampling."""

from __future__ import annotations

import difflib
import functools
import json
import os
import random
import socket
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from evalsuite.core.errors import ConfigError

_TRUE = {"1", "true", "yes", "on"}


def hub_offline_by_env() -> bool:
    return any(os.environ.get(k, "").strip().lower() in _TRUE for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


@functools.lru_cache(maxsize=1)
def hub_reachable(timeout_s: float = 2.0) -> bool:
    """True when a TCP connection to the hub opens within timeout_s.

    Checked in a thread because name resolution ignores socket timeouts and can hang far
    longer than a user should wait for a fallback that is then not taken.
    """
    if hub_offline_by_env():
        return False
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    result: list[bool] = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
            result.append(True)
        except OSError:
            result.append(False)

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout_s + 0.5)
    return bool(result and result[0])


def resolve_dir(path: str, base_dir: Path) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else (base_dir / p).resolve()


def read_records(path: Path) -> list[dict[str, Any]]:
    """Rows of a parquet, JSONL/JSON, TSV or CSV file, or of a `save_to_disk` folder."""
    if path.is_dir():
        from datasets import load_from_disk

        return load_from_disk(str(path)).to_list()
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        with path.open() as f:
            return [json.loads(line) for line in f if line.strip()]
    if suffix == ".json":
        return json.loads(path.read_text())
    if suffix == ".parquet":
        import pandas as pd

        return pd.read_parquet(path).to_dict(orient="records")
    if suffix in (".tsv", ".csv"):
        import pandas as pd

        # keep_default_na off: a clause reading "None" or "NA" is text, not a missing value
        return pd.read_csv(path, sep="\t" if suffix == ".tsv" else ",", keep_default_na=False).to_dict(orient="records")
    raise ValueError(f"{path}: unsupported file type {suffix!r}")


def seeded_subset(n: int, limit: int | None, seed: int, stratum: str) -> list[int]:
    """Indices of `limit` of n items, in their original order.

    Seeded per stratum (subject, clause type), so a stratum's pick does not change when
    other strata are added or filtered out.
    """
    if limit is None or limit >= n:
        return list(range(n))
    rng = random.Random(f"{seed}:{stratum}")
    return sorted(rng.sample(range(n), limit))


def label_quotas(counts: dict[str, int], limit: int) -> dict[str, int]:
    """Items to draw per label: equal shares of `limit`, a label short of its share giving the
    rest to the others; an odd item goes to the larger label (then the later name)."""
    quotas, left = {}, limit
    order = sorted(counts, key=lambda label: (counts[label], label))
    for i, label in enumerate(order):
        quotas[label] = min(counts[label], left // (len(order) - i))
        left -= quotas[label]
    return quotas


def stratified_subset(labels: list[str], limit: int | None, seed: int, stratum: str) -> list[int]:
    """Indices of `limit` items with the labels as even as they allow, in their original order.

    Equal counts per label, not proportional ones: a balanced accuracy is the mean of the labels'
    recalls, so its standard error is smallest with the same n behind each recall, and a subset
    of two or more items never loses a label. Seeded per stratum and label, so a stratum's pick
    does not change when other strata are added or filtered out.
    """
    if limit is None or limit >= len(labels):
        return list(range(len(labels)))
    by_label: dict[str, list[int]] = defaultdict(list)
    for i, label in enumerate(labels):
        by_label[label].append(i)
    quotas = label_quotas({k: len(v) for k, v in by_label.items()}, limit)
    picked = [i for label, idx in sorted(by_label.items())
              for i in random.Random(f"{seed}:{stratum}:{label}").sample(idx, quotas[label])]
    return sorted(picked)


def check_names(given: list[str], allowed: list[str], key: str, what: str) -> None:
    """ConfigError for the first unknown name, with a suggestion and a shortened allowed list."""
    for name in given:
        if name in allowed:
            continue
        close = difflib.get_close_matches(name, allowed, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        shown = ", ".join(allowed[:8]) + (f", ... ({len(allowed)} in all)" if len(allowed) > 8 else "")
        raise ConfigError(f"{key}: unknown {what} {name!r}{hint}; allowed: {shown}")
