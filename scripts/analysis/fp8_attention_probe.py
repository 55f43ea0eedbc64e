"""Why does an FP8 KV cache break Qwen2.5 on vLLM 0.26? A CPU probe of the attention inputs.

vLLM 0.26 quantizes the *query* to FP8 as well whenever the KV cache is FP8 and the backend takes FP8
queries (FlashAttention 3 and, on CUDA, Triton: `supports_quant_query_input`), with a static
per-tensor scale that stays 1.0 unless the checkpoint carries a q_scale; k/v scales are 1.0 unless
calibrated. With scale 1.0 every element beyond FP8 e4m3's largest value (448) is clipped. This
script measures, on recorded prompts of a run folder (their token ids), the real post-RoPE q, k, v
of every layer of a Hugging Face checkpoint, and what each FP8 scheme does to attention:

    none            exact (fp32) attention
    bf16            q, k, v rounded to bf16: the baseline's own error, for scale
    qkv_scale1      q, k, v in FP8 with scale 1.0: vLLM's FP8 KV cache, uncalibrated
    qkv_kvcal       k, v with calibrated per-tensor scales (amax / 448), q still at 1.0:
                    the llmcompressor-calibrated checkpoint
    kv_scale1       k, v in FP8 with scale 1.0, q exact: FP8 storage without FP8 queries
    kv_per_token_head  k, v with a scale per token and head, q exact: `fp8_per_token_head`
    qkv_scale1_skip01  as qkv_scale1, but layers 0 and 1 left in 16 bits: vLLM's
                    `kv_cache_dtype_skip_layers: ["0", "1"]`
    kv_int8_per_token_head  k, v in int8 with a symmetric scale per token and head, q exact
    qkv_scale1_p8   as qkv_scale1, and the softmax probabilities rounded to e4m3 before they weight
                    V, as FlashAttention 3's FP8 kernel does (values below 2^-9 of the row maximum
                    become subnormal or zero)

Per layer it prints max |q|, |k|, |v|, the share of q/k elements beyond 448 and each scheme's
relative error of the attention output; `--generate` then runs the model end to end under each
scheme on the first prompt and prints its greedy answer.

    python scripts/analysis/fp8_attention_probe.py MODEL_DIR SAMPLES.jsonl [--ids ID ...] [--generate N]

Not part of the package: it needs transformers (a vLLM dependency) and runs the model in fp32 on
CPU, a few minutes per 4K-token prompt.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, AutoModelForCausalLM, AutoTokenizer

E4M3_MAX = 448.0
SCHEMES = ("none", "bf16", "qkv_scale1", "qkv_scale1_p8", "qkv_kvcal", "kv_scale1", "kv_per_token_head",
           "qkv_scale1_skip01", "kv_int8_per_token_head")
SKIPPED_LAYERS = (0, 1)


def fp8(x: torch.Tensor, scale: torch.Tensor | float) -> torch.Tensor:
    """Round-trip through e4m3 as vLLM's static quantization does: divide, clamp to +-448, cast."""
    return (x / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).to(x.dtype) * scale


def per_tensor(x: torch.Tensor) -> torch.Tensor:
    return x.abs().amax().clamp(min=1e-12) / E4M3_MAX


def per_token_head(x: torch.Tensor) -> torch.Tensor:  # x: (batch, heads, tokens, dim)
    return x.abs().amax(dim=-1, keepdim=True).clamp(min=1e-12) / E4M3_MAX


def int8(x: torch.Tensor) -> torch.Tensor:
    scale = x.abs().amax(dim=-1, keepdim=True).clamp(min=1e-12) / 127
    return (x / scale).round().clamp(-127, 127) * scale


def apply(scheme: str, q, k, v, layer: int = -1):
    if scheme == "qkv_scale1_skip01":
        return (q, k, v) if layer in SKIPPED_LAYERS else apply("qkv_scale1", q, k, v)
    if scheme == "bf16":
        return tuple(x.to(torch.bfloat16).to(x.dtype) for x in (q, k, v))
    if scheme == "kv_int8_per_token_head":
        return q, int8(k), int8(v)
    if scheme in ("qkv_scale1", "qkv_scale1_p8"):
        return fp8(q, 1.0), fp8(k, 1.0), fp8(v, 1.0)
    if scheme == "qkv_kvcal":
        return fp8(q, 1.0), fp8(k, per_tensor(k)), fp8(v, per_tensor(v))
    if scheme == "kv_scale1":
        return q, fp8(k, 1.0), fp8(v, 1.0)
    if scheme == "kv_per_token_head":
        return q, fp8(k, per_token_head(k)), fp8(v, per_token_head(v))
    return q, k, v


def attend(module, q, k, v, scaling, fp8_probs: bool = False):
    causal = q.shape[2] > 1
    if not fp8_probs:
        out = F.scaled_dot_product_attention(q, k, v, scale=scaling, is_causal=causal, enable_gqa=True)
        return out.transpose(1, 2).contiguous()
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    scores = (q @ k.transpose(-1, -2)) * scaling
    if causal:
        t = q.shape[2]
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    p = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    # the row sum is taken in fp32 before P is rounded, as in FlashAttention 3's FP8 path
    out = (fp8(p, 1.0) @ v) / p.sum(dim=-1, keepdim=True)
    return out.transpose(1, 2).contiguous()


class Probe:
    """An attention function for transformers' AttentionInterface: records statistics, and
    returns attention under `self.scheme` (exact while measuring)."""

    def __init__(self):
        self.scheme = "none"
        self.measure = False
        self.stats: dict[int, dict[str, float]] = defaultdict(dict)

    def __call__(self, module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kw):
        if self.measure:
            self._record(module.layer_idx, query, key, value, scaling)
        q, k, v = apply(self.scheme, query, key, value, module.layer_idx)
        return attend(module, q, k, v, scaling, self.scheme.endswith("_p8")), None

    def _record(self, layer, q, k, v, scaling):
        s = self.stats[layer]
        s["q_max"] = max(s.get("q_max", 0.0), q.abs().max().item())
        s["k_max"] = max(s.get("k_max", 0.0), k.abs().max().item())
        s["v_max"] = max(s.get("v_max", 0.0), v.abs().max().item())
        s["q_clip_pct"] = 100 * (q.abs() > E4M3_MAX).float().mean().item()
        s["k_clip_pct"] = 100 * (k.abs() > E4M3_MAX).float().mean().item()
        exact = attend(None, q, k, v, scaling)
        for scheme in SCHEMES[1:]:
            got = attend(None, *apply(scheme, q, k, v, layer), scaling, scheme.endswith("_p8"))
            s[f"err_{scheme}"] = ((got - exact).norm() / exact.norm()).item()


def load_samples(path: Path, ids: list[str] | None) -> list[dict]:
    rows = [json.loads(line) for line in path.open()]
    if ids:
        rows = [r for r in rows if r["sample"]["id"] in ids]
    return rows


def prompt_ids(tok, row: dict) -> list[int]:
    request = row["sample"]["request"]
    return request["prompt_token_ids"] or tok(request["prompt"]).input_ids


def measure(model, probe: Probe, ids: list[int]) -> None:
    probe.measure, probe.scheme = True, "none"
    with torch.no_grad():
        model(torch.tensor([ids]))
    probe.measure = False


def report(probe: Probe) -> None:
    cols = ["q_max", "k_max", "v_max", "q_clip_pct", "k_clip_pct"] + [f"err_{s}" for s in SCHEMES[1:]]
    print("layer " + " ".join(f"{c:>20}" for c in cols))
    for layer in sorted(probe.stats):
        print(f"{layer:5d} " + " ".join(f"{probe.stats[layer][c]:20.4g}" for c in cols))
    for c in cols[5:]:
        vals = [probe.stats[l][c] for l in probe.stats]
        print(f"mean {c}: {sum(vals) / len(vals):.4g}   max: {max(vals):.4g}")


def generate(model, tok, probe: Probe, ids: list[int], n: int, schemes) -> None:
    for scheme in schemes:
        probe.scheme = scheme
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False)
        print(f"{scheme:>18}: {tok.decode(out[0, len(ids):])!r}", flush=True)


def choose(model, tok, probe: Probe, rows: list[dict], schemes) -> None:
    """Multiple-choice items (MMLU samples): the letter each scheme picks from the next-token logits."""
    for r in rows:
        ids = prompt_ids(tok, r)
        letters = [tok.encode(" " + c)[0] for c in r["sample"]["choices"]]
        picks = []
        for scheme in schemes:
            probe.scheme = scheme
            with torch.no_grad():
                lp = torch.log_softmax(model(torch.tensor([ids])).logits[0, -1].float(), dim=-1)[letters]
            picks.append(f"{scheme}={r['sample']['choices'][int(lp.argmax())]}({lp.max().item():.2f})")
        print(f"{r['sample']['id']} target={r['sample']['target']} " + " ".join(picks), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir", type=Path)
    ap.add_argument("samples", type=Path, help="a run folder's samples/TASK.jsonl (prompt token ids)")
    ap.add_argument("--ids", nargs="*", help="sample ids (default: the first)")
    ap.add_argument("--generate", type=int, default=0, help="new tokens per scheme on the first prompt")
    ap.add_argument("--schemes", nargs="*", choices=SCHEMES, help="schemes to generate with (default: all)")
    ap.add_argument("--no-measure", action="store_true", help="skip the per-layer statistics")
    ap.add_argument("--choices", action="store_true", help="multiple-choice samples: each scheme's pick")
    args = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    probe = Probe()
    AttentionInterface.register("fp8probe", probe)
    tok = AutoTokenizer.from_pretrained(args.model_dir)
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.float32,
                                                 attn_implementation="fp8probe")
    rows = load_samples(args.samples, args.ids) or load_samples(args.samples, None)[:1]
    for r in rows:
        ids = prompt_ids(tok, r)
        print(f"# {r['sample']['id']}: {len(ids)} tokens, target {r['sample']['target']!r}", flush=True)
        if not args.no_measure:
            measure(model, probe, ids)
    if not args.no_measure:
        report(probe)
    if args.choices:
        choose(model, tok, probe, rows, args.schemes or SCHEMES)
    if args.generate:
        generate(model, tok, probe, prompt_ids(tok, rows[0]), args.generate, args.schemes or SCHEMES)


if __name__ == "__main__":
    main()
