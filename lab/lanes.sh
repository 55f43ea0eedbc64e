#!/usr/bin/env bash
# Runs ON the H200, detached from the `device run` call that starts it (setsid), so that evaluations
# go on across calls and no engine restarts at a call's limit. Each LANE is a ';'-separated list of
# steps run in order; lanes run side by side; every step stops at DEADLINE (epoch seconds).
#   lanes.sh DEADLINE "run CONFIG NAME V1 V2; bench NAME ARGS..." "run CONFIG NAME V3" ...
# Steps:  run CONFIG NAME VARIANT...   `evalsuite run`, output in runs/h200/NAME (resumed if there)
#         bench NAME ARGS...           bench/mmlu_vs_lmeval.py ARGS, work folder runs/h200/NAME
#         py NAME SCRIPT ARGS...       any other bench/ script; its output in runs/h200/NAME/bench.log
#         seed SCORES CONFIG NAME VARIANT...  a run folder in runs/h200/NAME from the per-item scores kept
#                                      in SCORES (a fetched page's, docs/results/...: `evalsuite import
#                                      --for-resume`), so that the next `run` step of NAME resumes those
#                                      variants instead of measuring their items again
# A step prefixed STEP_S=N (e.g. "STEP_S=360 run ...") stops after N seconds, or at DEADLINE if sooner.
# lab/poll.sh waits on the lanes and sends their folders back.
set -uo pipefail
export DEADLINE=$1
shift
cd "$(dirname "$0")/.."

left() { echo $(( DEADLINE - $(date +%s) )); }
limit() { local t; t=$(left); [ -n "${STEP_S:-}" ] && [ "$STEP_S" -lt "$t" ] && t=$STEP_S; echo "$t"; }

run() {
  local config=$1 out=runs/h200/$2
  shift 2
  local args=() resume=()
  for v in "$@"; do args+=(-V "$v"); done
  ls "$out"/*/run.json >/dev/null 2>&1 && resume=(--resume)
  mkdir -p "$out"
  [ "$(left)" -gt 60 ] || return 0
  timeout --signal=INT --kill-after=20 "$(limit)" bash lab/device.sh run run "$config" \
    --output-dir "$out" "${resume[@]}" "${args[@]}" > "$out/console-$(date +%H%M%S).log" 2>&1
  echo "run $config $* rc=$?"
}

bench() {  # bench NAME ARGS: the lm-eval comparison, with its work folder kept in the lane's folder
  local name=$1
  shift
  py "$name" bench/mmlu_vs_lmeval.py "$@" --work-dir "runs/h200/$name"
}
py() {
  local out=runs/h200/$1
  shift
  mkdir -p "$out"
  [ "$(left)" -gt 60 ] || return 0
  timeout --signal=INT --kill-after=20 "$(limit)" bash lab/device.sh py "$@" > "$out/bench.log" 2>&1
  echo "py $* rc=$?"
}
seed() {
  local scores=$1 config=$2 out=runs/h200/$3
  shift 3
  local args=()
  for v in "$@"; do args+=(--variant "$v"); done
  mkdir -p "$out"
  bash lab/device.sh run import "$scores" "$out" --config "$config" --for-resume "${args[@]}" \
    > "$out/seed.log" 2>&1
  echo "seed $config $* rc=$?"
}
export -f left limit run bench py seed

mkdir -p runs/h200
i=0
for lane in "$@"; do
  i=$((i + 1))
  # Staggered starts: vLLM checks the card's free memory while it starts.
  sleep $(( i > 1 ? 15 : 0 ))
  bash -c "$lane" > "runs/h200/lane$i.log" 2>&1 &
done
wait
# An engine interrupted at the deadline can leave its GPU memory held; nothing else runs here now.
nvidia-smi --query-compute-apps=pid --format=csv,noheader | xargs -r kill -9 2>/dev/null
date +%s > runs/h200/lanes.done
