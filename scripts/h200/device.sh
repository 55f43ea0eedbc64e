#!/usr/bin/env bash
# Runs ON the lent H200 machine, from the repository root that `device run` sends.
#   device.sh stash          move whatever this call carried (.kit parts, .gpu/carry, .m pieces, the
#                            weightless model shapes .gpu/llama31-8b*) to /root
#   device.sh setup          install the vLLM kit, the missing wheels and llmcompressor; import the model
#   device.sh run ARGS...    `evalsuite ARGS...` with the H200 environment (see env below)
#   device.sh bench ARGS...  bench/mmlu_vs_lmeval.py ARGS... with the same environment
#   device.sh py SCRIPT ARGS...  any other bench/ script (overhead, engine_start, niah_schedule), same environment
#   device.sh copy           a private copy of this repo in /root/repo, for runs that outlive the call
#   device.sh restore        unpack run folders an earlier session's poll.sh brought back (carried as
#                            .gpu/runs/NAME.tar.zst.*) into /root/repo/runs/h200, where lanes.sh resumes them
#   device.sh pack NAME DIR  tar.gz a run folder into $OUT (split into 15 MiB pieces)
# The machine keeps /root while it is held (about 30 s after each call), so calls go back to back.
set -euo pipefail
repo=$(pwd)

env_h200() {
  export PYTHONPATH=/root/site:/root/extra:$repo
  export EVALSUITE_CACHE=/root/cache EVALSUITE_QUANT_PYTHON=/root/quantpy
  export VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1
}

stash() {
  mkdir -p /root/kit /root/carry /root/m
  if [ -d .kit ]; then
    for f in .kit/part?? .kit/install_kit.sh .kit/site.sha256; do [ -e "$f" ] && mv "$f" /root/kit/; done
    [ -d .kit/zst ] && cp .kit/zst/*.whl /root/kit/
  fi
  [ -d .gpu/carry ] && cp -r .gpu/carry/. /root/carry/
  for d in .gpu/llama31-8b*/; do [ -d "$d" ] && mkdir -p /root/shapes && cp -r "$d" /root/shapes/; done
  if [ -d .m ]; then
    for f in .m/q?? .m/name; do [ -e "$f" ] && mv "$f" /root/m/; done
  fi
  ls /root/kit /root/carry /root/m | tr '\n' ' '; echo
}

missing() {  # the wheels in $1 whose distribution the image (plus the kit) does not have
  for w in "$1"/*.whl; do
    dist=$(basename "$w" | cut -d- -f1)
    PYTHONPATH=/root/site python3 -c "import importlib.metadata as m,sys; m.version(sys.argv[1])" "$dist" \
      2>/dev/null || echo "$w"
  done
}

setup() {
  [ -d /root/site/vllm ] || bash /root/kit/install_kit.sh
  need=$(missing /root/carry/wheels; [ -d /root/carry/lmeval ] && missing /root/carry/lmeval)
  [ -n "$need" ] && python3 -m pip install -q --no-index --no-deps --target /root/extra $need
  # llmcompressor pins compressed-tensors 0.19 while vLLM 0.26 pins 0.17: it gets a folder of its own
  # that comes first on the quantize worker's path only.
  python3 -m pip install -q --no-index --no-deps --target /root/quant /root/carry/quant/*.whl
  printf '#!/bin/bash\nexport PYTHONPATH=/root/quant:/root/extra:/root/site:$PYTHONPATH\nexec python3 "$@"\n' > /root/quantpy
  chmod +x /root/quantpy
  mkdir -p /root/cache && tar -C /root/cache -xzf /root/carry/data.tar.gz
  env_h200
  python3 -c "import vllm, datasets, gguf, typer; print('vllm', vllm.__version__, 'datasets', datasets.__version__)"
  /root/quantpy -c "import llmcompressor, compressed_tensors as c; print('llmcompressor', llmcompressor.__version__, 'ct', c.__version__)"
  [ -f /root/m/name ] || { echo "no model carried (dummy-weight shapes only)"; return 0; }
  name=$(cat /root/m/name)
  if [ ! -f "/root/m/$name" ]; then cat /root/m/q?? > "/root/m/$name" && rm -f /root/m/q??; fi
  mkdir -p .gpu && ln -sf "/root/m/$name" ".gpu/$name"
  python3 -m evalsuite models import "/root/m/$name"
}

copy() {  # the repo `device run` sends is refreshed by every call; detached runs need one that is not
  mkdir -p /root/repo
  tar -C "$repo" --exclude=./.kit --exclude=./.m --exclude=./.gpu --exclude=./runs -cf - . | tar -C /root/repo -xf -
  mkdir -p /root/repo/.gpu
  [ -f /root/m/name ] && ln -sf "/root/m/$(cat /root/m/name)" "/root/repo/.gpu/$(cat /root/m/name)"
  # model shapes without weights (scripts/prepare_h200.sh: config.json and tokenizer), stashed by an earlier call
  [ -d /root/shapes ] && cp -r /root/shapes/. /root/repo/.gpu/
  echo "copied to /root/repo"
}

restore() {
  mkdir -p /root/repo/runs/h200
  for first in .gpu/runs/*.tar.zst.0; do
    [ -e "$first" ] || continue
    name=$(basename "$first" .tar.zst.0)
    PYTHONPATH=/root/zst python3 scripts/h200/pack.py --unpack .gpu/runs/"$name".tar.zst.* /root/repo/runs/h200
    echo "restored runs/h200/$name"
  done
}

pack() {
  local name=$1 dir=$2
  tar -czf - -C "$(dirname "$dir")" "$(basename "$dir")" | split -b 15M -d -a 1 - "$OUT/$name.tgz."
}

cmd=${1:?usage: device.sh stash|setup|copy|restore|run|bench|py|pack}
shift
case $cmd in
  stash) stash ;;
  setup) setup ;;
  run) env_h200; exec python3 -m evalsuite "$@" ;;
  bench) env_h200; exec python3 bench/mmlu_vs_lmeval.py "$@" ;;
  py) env_h200; exec python3 "$@" ;;
  copy) copy ;;
  restore) restore ;;
  pack) pack "$@" ;;
  *) echo "unknown step $cmd" >&2; exit 2 ;;
esac
