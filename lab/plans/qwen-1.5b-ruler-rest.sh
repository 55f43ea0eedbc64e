#!/usr/bin/env bash
# What the RULER plans left unmeasured, at every length, resumed from the per-item scores kept in
# $D/scores-ruler, $D/scores-ruler-64k and $D/scores-ruler-128k (`slim.sh aside` with the three as KEEP,
# so that they travel): `seed` rebuilds each lane's run folder and `run --resume` scores only the
# items without a score. Three lanes, in order of need:
#   r4    kv_int8_per_token_head at 4K-32K (64 of 528 RULER items done; Triton attention, ~12 minutes
#         alone), and kv_fp8's last 54 legal_long_multi items
#   l128  128K: fp8 (8 of 132 done), awq, kv_fp8 (~10 minutes each beside another lane; awq's build
#         ~3 minutes first)
#   l64   64K: awq's last 20 items (its build: whichever lane starts it first, the other waits on its lock)
# kv_int8_per_token_head at 64K and 128K (~25 minutes and ~1.5 hours on Triton) is for later sessions:
# ORDER_LONG=kv_int8_per_token_head (both lengths' configs define it).
# Items: built on the host (~1 minute for 4K-32K, ~5 for 64K+128K) or carried, as qwen-1.5b-ruler-long.sh
# says. Carrying, start and polls: as qwen-1.5b-ruler.sh.
# Usage: setsid nohup bash lab/plans/qwen-1.5b-ruler-rest.sh T0 BUDGET_S > /root/lanes.log 2>&1 < /dev/null &
source "$(dirname "$0")/ruler-common.sh" "$@"
long=${ORDER_LONG:-fp8 awq kv_fp8}
l64v=$(echo awq $long | tr ' ' '\n' | awk '!seen[$0]++' | xargs)  # awq's 64K rest first, once
short_items
items $M 65536
items $L 131072
bash lab/lanes.sh $DL \
  "$(seeds $D/scores-ruler $S r4 kv_int8_per_token_head kv_fp8) run $S r4 kv_int8_per_token_head kv_fp8" \
  "$(seeds $D/scores-ruler-128k $L l128 $long) run $L l128 $long" \
  "$(seeds $D/scores-ruler-64k $M l64 $l64v) run $M l64 $l64v"
