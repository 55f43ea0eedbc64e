#!/usr/bin/env bash
# Runs ON the H200: several groups of variants of one config at once, one `evalsuite run` process
# per group, each in its own output folder (so resumes never mix), for at most LIMIT seconds;
# then packs each group's run folder into $OUT. Called again with the same groups, it resumes.
#   waves.sh LIMIT CONFIG "bf16 kv_fp8" "fp8 fp8_kv_fp8" ...
# The config must give each process a fixed KV pool (kv_cache_memory_bytes) and a small
# gpu_memory_utilization, as configs/h200/qwen-1.5b-accuracy.yaml does.
set -uo pipefail
limit=$1 config=$2; shift 2
here=$(cd "$(dirname "$0")" && pwd)
stem=$(basename "$config" .yaml)
nvidia-smi --query-compute-apps=pid --format=csv,noheader | xargs -r kill -9 2>/dev/null
pids=()
i=0
for group in "$@"; do
  i=$((i + 1))
  out=runs/h200/$stem/g$i
  args=()
  for v in $group; do args+=(-V "$v"); done
  resume=()
  ls "$out"/*/run.json >/dev/null 2>&1 && resume=(--resume)
  mkdir -p "$out"
  # Staggered starts: vLLM checks the card's free memory while it starts.
  sleep $(( i > 1 ? 20 : 0 ))
  left=$(( limit - (i - 1) * 20 ))
  timeout --signal=INT --kill-after=20 "$left" bash "$here/device.sh" run run "$config" \
    --output-dir "$out" "${resume[@]}" "${args[@]}" > "$out/console-$(date +%H%M%S).log" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; echo "group pid $p rc=$?"; done
# A process killed at the limit can leave its engine holding GPU memory; the next call needs it.
nvidia-smi --query-compute-apps=pid --format=csv,noheader | xargs -r kill -9 2>/dev/null
i=0
for group in "$@"; do
  i=$((i + 1))
  out=runs/h200/$stem/g$i
  tail -c 1500 "$(ls -t "$out"/console-*.log | head -1)" | tr '\r' '\n' | grep -v "^\s*$" | tail -12
  PYTHONPATH=/root/zst python3 "$here/pack.py" "$out" "$OUT/g$i.tar.zst"
done
ls -la "$OUT"
