#!/usr/bin/env bash
# What qwen-1.5b-ruler.sh left unmeasured, resumed from the per-item scores kept in
# docs/results/h200-2026-12-01-qwen2.5-coder-1.5b/scores-ruler{,-128k} (`slim.sh aside` with those two
# folders as KEEP, so that they travel): `seed` rebuilds each variant's run folder and `run --resume`
# scores only the items without a score.
#   r4   kv_int8_per_token_head at 4K-32K (64 of 528 RULER items done; Triton attention: the long lane)
#   r2   kv_fp8's last 54 legal_long_multi items
#   r1l  bf16, then fp8, at 64K/128K (YaRN x4)
#   r3l  kv_fp8_skip_layers_0_1 at 64K/128K (32 of 264 done), then awq
# The 64K/128K lanes wait for their items (~5 minutes on 16 cores), built once while the short lanes run.
# Carrying, start and polls: as qwen-1.5b-ruler.sh.
# Usage: setsid nohup bash lab/plans/qwen-1.5b-ruler-rest.sh T0 BUDGET_S > /root/lanes.log 2>&1 < /dev/null &
source "$(dirname "$0")/ruler-common.sh" "$@"
D=docs/results/h200-2026-12-01-qwen2.5-coder-1.5b
I=runs/h200/items
wait_long="while [ ! -f $I/long.done ]; do sleep 5; done"
bash lab/lanes.sh $DL "py items lab/ruler_items.py $L; touch $I/long.done" \
  "seed $D/scores-ruler $S r4 kv_int8_per_token_head; run $S r4 kv_int8_per_token_head" \
  "seed $D/scores-ruler $S r2 kv_fp8; run $S r2 kv_fp8" \
  "$wait_long; run $L r1l bf16 fp8" \
  "seed $D/scores-ruler-128k $L r3l kv_fp8_skip_layers_0_1; $wait_long; run $L r3l kv_fp8_skip_layers_0_1 awq"
