"""Runs inside .venv-quant (llmcompressor): one W4A16 quantization described by a job file.

Started by evalsuite.models.quantize as `.venv-quant/bin/python -m evalsuite.models.quantize_worker --job J`
with PYTHONPATH at the repo, so it must import nothing from evalsuite and nothing that only the
main venv has (vllm, pydantic models): the two venvs pin different compressed-tensors and
transformers. It writes the compressed-tensors checkpoint to `out_dir` and a result file with
timings, versions and the recipe; the parent adds the cache bookkeeping.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def _recipe(method: str, scheme: str, ignore: list[str], params: dict):
    from llmcompressor.modifiers.quantization import GPTQModifier, QuantizationModifier

    common = {"targets": ["Linear"], "scheme": scheme, "ignore": ignore}
    if method == "rtn":
        return [QuantizationModifier(**common)]
    if method == "gptq":
        return [GPTQModifier(dampening_frac=params.get("dampening_frac", 0.01), **common)]
    if method == "kv_fp8":
        # No weight scheme: the weights stay in the source dtype and only the k/v projections'
        # outputs are observed, giving the static scales vLLM applies with kv_cache_dtype fp8.
        kv = {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False, "symmetric": True}
        return [QuantizationModifier(kv_cache_scheme=kv)]
    if method == "awq":
        from llmcompressor.modifiers.transform.awq import AWQModifier

        # AWQ only rescales channels; the QuantizationModifier after it does the rounding.
        return [AWQModifier(duo_scaling=params.get("duo_scaling", True), n_grid=params.get("n_grid", 20)),
                QuantizationModifier(**common)]
    raise SystemExit(f"unknown method {method!r}")


def _calibration(tokenizer, texts: list[str], samples: int, seq_len: int):
    """`samples` windows of exactly `seq_len` tokens, spread evenly over the joined texts so
    that they come from many documents rather than the first few."""
    from datasets import Dataset

    ids = tokenizer("\n\n".join(texts), add_special_tokens=False)["input_ids"]
    if len(ids) < samples * seq_len:
        raise SystemExit(f"calibration text has {len(ids)} tokens, fewer than {samples} x {seq_len}")
    stride = (len(ids) - seq_len) // max(1, samples - 1) if samples > 1 else 0
    windows = [ids[i * stride : i * stride + seq_len] for i in range(samples)]
    return Dataset.from_dict({"input_ids": windows, "attention_mask": [[1] * seq_len for _ in windows]}), len(ids)


def _cpu_only_patches() -> list[str]:
    """AWQ pins cached activations for faster host-to-device copies; pinning needs an
    accelerator and raises on a machine without one, where the copy is a no-op anyway."""
    import torch

    if torch.accelerator.is_available():
        return []
    from llmcompressor.pipelines.cache import IntermediatesCache

    IntermediatesCache.pin_memory = lambda self, *args, **kwargs: None
    return ["IntermediatesCache.pin_memory -> no-op (no accelerator)"]


def _source_dtype(model_dir: Path) -> str:
    config = json.loads((model_dir / "config.json").read_text())
    dtype = config.get("dtype") or config.get("torch_dtype") or "bfloat16"
    return dtype if dtype in ("bfloat16", "float16", "float32") else "bfloat16"


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    return {d: version(d) for d in ("llmcompressor", "compressed-tensors", "torch", "transformers")}


def _recipe_text(out_dir: Path, recipe) -> str:
    saved = out_dir / "recipe.yaml"  # llmcompressor writes it beside the weights
    if saved.is_file():
        return saved.read_text()
    return "\n".join(repr(m) for m in recipe)


def run(job: dict) -> dict:
    import torch
    from llmcompressor import oneshot
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(job.get("seed", 0))
    out_dir = Path(job["out_dir"])
    p = job["params"]
    saved_dtype = _source_dtype(Path(job["model_dir"]))
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(job["model_dir"], dtype=getattr(torch, p["compute_dtype"]))
    tokenizer = AutoTokenizer.from_pretrained(job["model_dir"])
    load_s = time.perf_counter() - t0
    recipe = _recipe(job["method"], p["scheme"], p["ignore"], p)
    kwargs, calib = {}, {}
    if job["method"] != "rtn":
        texts = [json.loads(line)["text"] for line in Path(job["calibration_file"]).read_text().splitlines()]
        ds, total = _calibration(tokenizer, texts, p["samples"], p["seq_len"])
        kwargs = {"dataset": ds, "num_calibration_samples": p["samples"], "max_seq_length": p["seq_len"],
                  "shuffle_calibration_samples": False}
        calib = {"tokens_available": total, "samples": p["samples"], "seq_len": p["seq_len"]}
    patches = _cpu_only_patches() if job["method"] == "awq" else []
    t1 = time.perf_counter()
    oneshot(model=model, recipe=recipe, **kwargs)
    quantize_s = time.perf_counter() - t1
    t2 = time.perf_counter()
    # Before packing, so the int4 values are chosen against the scales vLLM will use.
    model.to(getattr(torch, saved_dtype))
    model.config.dtype = saved_dtype
    model.save_pretrained(out_dir, save_compressed=True)
    tokenizer.save_pretrained(out_dir)
    save_s = time.perf_counter() - t2
    return {"load_s": load_s, "quantize_s": quantize_s, "save_s": save_s, "calibration": calib,
            "compute_dtype": p["compute_dtype"], "saved_dtype": saved_dtype,
            "patches": patches, "versions": _versions(), "recipe": _recipe_text(out_dir, recipe)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", required=True, type=Path, help="JSON job written by evalsuite.models.quantize")
    args = parser.parse_args(argv)
    job = json.loads(args.job.read_text())
    result = run(job)
    Path(job["result_file"]).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
