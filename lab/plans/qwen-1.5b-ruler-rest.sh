#!/usr/bin/env bash
# What qwen-1.5b-ruler.sh left unmeasured at 4K-32K, resumed from the per-item scores kept in
# $D/scores-ruler (`slim.sh aside` with that folder as KEEP, so that it travels): `seed` rebuilds each
# variant's run folder and `run --resume` scores only the items without a score.
#   r4   kv_int8_per_token_head at 4K-32K (64 of 528 RULER items done; Triton attention: ~12 minutes alone)
#   r2   kv_fp8's last 54 legal_long_multi items
# 64K and 128K: qwen-1.5b-ruler-long.sh. Carrying, start and polls: as qwen-1.5b-ruler.sh.
# Usage: setsid nohup bash lab/plans/qwen-1.5b-ruler-rest.sh T0 BUDGET_S > /root/lanes.log 2>&1 < /dev/null &
source "$(dirname "$0")/ruler-common.sh" "$@"
short_items
bash lab/lanes.sh $DL \
  "seed $D/scores-ruler $S r4 kv_int8_per_token_head; run $S r4 kv_int8_per_token_head" \
  "seed $D/scores-ruler $S r2 kv_fp8; run $S r2 kv_fp8"
