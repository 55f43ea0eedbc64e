#!/usr/bin/env bash
# Runs ON the lent H200 machine, from the repository root that `device run` sends.
#   device.sh stash          move whatever this call carried (.kit parts, .gpu/carry, .m pieces, the
#                            weightless model shapes .gpu/llama31-8b*, packed items .gpu/items) to /root
#   device.sh prepare        stash, then install the kit and wheels in the background (detached), so
#                            that the calls carrying the model pieces overlap it: in the call after the
#                            kit, .kit/zst and .gpu/carry have arrived
#   device.sh setup          install the vLLM kit, the missing wheels and llmcompressor (or wait for
#                            `prepare` to finish doing so); import the model(s) pack.sh cut in pieces
#   device.sh run ARGS...    `evalsuite ARGS...` with the H200 environment (see env below)
#   device.sh py SCRIPT ARGS...  a bench/ or scripts/ Python script with the same environment
#   device.sh copy           a private copy of this repo in /root/repo, for runs that outlive the call
#   device.sh items          unpack RULER items built on another machine (lab/ruler_items.py, then
#                            `lab/pack.py ~/.cache/evalsuite/ruler .gpu/items/ruler.tar.zst`, stashed by
#                            an earlier call) into the cache, where runs find them instead of building
#                            them (minutes at 128K)
#   device.sh restore        unpack run folders an earlier session's poll.sh brought back (carried as
#                            .gpu/runs/NAME.tar.zst.*) into /root/repo/runs/h200, where lanes.sh resumes them
# The machine keeps /root while it is held (about 30 s after each call), so calls go back to back.
set -euo pipefail
repo=$(pwd)
R=${EVALSUITE_DEVICE_ROOT:-/root}  # the device machine's home; a test points it elsewhere

env_h200() {
  export PYTHONPATH=$R/site:$R/extra:$repo
  export EVALSUITE_CACHE=$R/cache EVALSUITE_QUANT_PYTHON=$R/quantpy
  export VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1
}

# Moved, not copied: a carried path stays in this checkout for the calls after the one that carried
# it, and copying it again in each would rewrite wheels that a background install (prepare) is reading.
move_into() {  # DIR DEST: DIR's contents merged into DEST, then DIR gone from the checkout
  [ -d "$1" ] || return 0
  mkdir -p "$2" && cp -r "$1"/. "$2"/ && rm -rf "$1"
}

stash() {
  mkdir -p $R/kit $R/carry $R/m
  if [ -d .kit ]; then
    for f in .kit/part?? .kit/install_kit.sh .kit/site.sha256; do [ -e "$f" ] && mv "$f" $R/kit/; done
    move_into .kit/zst $R/kit
  fi
  move_into .gpu/carry $R/carry
  move_into .gpu/items $R/items
  for d in .gpu/llama31-8b*/ .gpu/*-shape/; do [ -d "$d" ] && mkdir -p $R/shapes && cp -r "$d" $R/shapes/; done
  if [ -d .m ]; then
    for f in .m/[a-z][0-9][0-9] .m/name .m/name.[a-z]; do [ -e "$f" ] && mv "$f" $R/m/; done
  fi
  ls $R/kit $R/carry $R/m | tr '\n' ' '; echo
}

missing() {  # the wheels in $1 whose distribution the image (plus the kit) does not have
  for w in "$1"/*.whl; do
    [ -e "$w" ] || continue
    dist=$(basename "$w" | cut -d- -f1)
    PYTHONPATH=$R/site python3 -c "import importlib.metadata as m,sys; m.version(sys.argv[1])" "$dist" \
      2>/dev/null || echo "$w"
  done
}

setup_env() {  # once per machine: $R/env.done marks it done; the lock makes a second caller wait
  exec 9>$R/env.lock
  flock 9
  [ -f $R/env.done ] && return 0
  # A marker, not the folder: an install cut midway (a failed background run) is redone whole.
  [ -f $R/site/.installed ] || { rm -rf $R/site; bash $R/kit/install_kit.sh; touch $R/site/.installed; }
  need=$(missing $R/carry/wheels; if [ -d $R/carry/lmeval ]; then missing $R/carry/lmeval; fi)
  [ -n "$need" ] && python3 -m pip install -q --no-index --no-deps --target $R/extra $need
  # llmcompressor pins compressed-tensors 0.19 while vLLM 0.26 pins 0.17: it gets a folder of its own
  # that comes first on the quantize worker's path only.
  # Optional: a run that builds no INT4 checkpoint (a latency bench) carries no quant/ wheels.
  if ls $R/carry/quant/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --target $R/quant $R/carry/quant/*.whl
  fi
  printf '#!/bin/bash\nexport PYTHONPATH=%s/quant:%s/extra:%s/site:$PYTHONPATH\nexec python3 "$@"\n' "$R" "$R" "$R" > $R/quantpy
  chmod +x $R/quantpy
  mkdir -p $R/cache && tar -C $R/cache -xzf $R/carry/data.tar.gz
  env_h200
  python3 -c "import vllm, datasets, gguf, typer; print('vllm', vllm.__version__, 'datasets', datasets.__version__)"
  if [ -d $R/quant ]; then
    $R/quantpy -c "import llmcompressor, compressed_tensors as c; print('llmcompressor', llmcompressor.__version__, 'ct', c.__version__)"
  fi
  touch $R/env.done
}

prepare() {
  stash
  # A copy runs: the next call refreshes this checkout, and bash reads a script while it runs it.
  cp "$repo/lab/device.sh" $R/device-env.sh
  # From $R: the checkout is rewritten by the calls that follow, and pip needs a working directory.
  (cd $R && setsid nohup bash $R/device-env.sh setup-env > $R/prepare.log 2>&1 < /dev/null &)
  echo "installing in the background (log: $R/prepare.log)"
}

setup() {
  [ -f $R/env.done ] || echo "waiting for the environment ($R/prepare.log: $(tail -1 $R/prepare.log 2>/dev/null))"
  (setup_env)
  env_h200
  ls $R/m/name* >/dev/null 2>&1 || { echo "no model carried (dummy-weight shapes only)"; return 0; }
  mkdir -p .gpu
  # pack.sh's slots: the pieces q00.. of the model named in `name`, p00.. of the one in `name.p`, ...
  for nf in $R/m/name*; do
    slot=q
    case $nf in *.?) slot=${nf##*.} ;; esac
    name=$(cat "$nf")
    if [ ! -f "$R/m/$name" ]; then cat $R/m/${slot}?? > "$R/m/$name" && rm -f $R/m/${slot}??; fi
    ln -sf "$R/m/$name" ".gpu/$name"
    python3 -m evalsuite models import "$R/m/$name"
  done
}

copy() {  # the repo `device run` sends is refreshed by every call; detached runs need one that is not
  mkdir -p $R/repo
  tar -C "$repo" --exclude=./.kit --exclude=./.m --exclude=./.gpu --exclude=./runs -cf - . | tar -C $R/repo -xf -
  mkdir -p $R/repo/.gpu
  for nf in $R/m/name*; do [ -f "$nf" ] && ln -sf "$R/m/$(cat "$nf")" "$R/repo/.gpu/$(cat "$nf")"; done
  # model shapes without weights (lab/prepare_h200.sh: config.json and tokenizer), stashed by an earlier call
  [ -d $R/shapes ] && cp -r $R/shapes/. $R/repo/.gpu/
  echo "copied to $R/repo"
}

items() {
  mkdir -p $R/cache
  for first in $R/items/*.tar.zst.0; do
    [ -e "$first" ] || continue
    PYTHONPATH=$R/zst python3 lab/pack.py --unpack "${first%.0}".* $R/cache
    echo "unpacked $(basename "${first%.tar.zst.0}") into $R/cache"
  done
}

restore() {
  mkdir -p $R/repo/runs/h200
  for first in .gpu/runs/*.tar.zst.0; do
    [ -e "$first" ] || continue
    name=$(basename "$first" .tar.zst.0)
    PYTHONPATH=$R/zst python3 lab/pack.py --unpack .gpu/runs/"$name".tar.zst.* $R/repo/runs/h200
    echo "restored runs/h200/$name"
  done
}

cmd=${1:?usage: device.sh stash|prepare|setup|copy|items|restore|run|py}
shift
case $cmd in
  stash) stash ;;
  prepare) prepare ;;
  setup-env) setup_env ;;
  setup) setup ;;
  run) env_h200; exec python3 -m evalsuite "$@" ;;
  py) env_h200; exec python3 "$@" ;;
  copy) copy ;;
  items) items ;;
  restore) restore ;;
  *) echo "unknown step $cmd" >&2; exit 2 ;;
esac
