#!/usr/bin/env bash
# What the RULER plans left unmeasured, at every length, resumed from the per-item scores kept in
# $D/scores-ruler, $D/scores-ruler-64k and $D/scores-ruler-128k (`slim.sh aside` with the three as KEEP,
# so that they travel): `seed` rebuilds each lane's run folder and `run --resume` scores only the
# items without a score. Two lanes, in order of need (left after 2026-12-05): the card is compute-bound
# on these prefills and shares itself about evenly, so what completes a variant's table goes first in
# each lane and INT8 per-token-head (Triton attention, slowest) fills the rest of the lease:
#   A  128K: awq (its build first), then 64K: kv_int8_per_token_head (its items built on every core
#      first, ~1.5 minutes; ~25 minutes alone)
#   B  128K: kv_fp8's last 60 items (niah_multivalue, niah_multiquery, vt, cwe, fwe), then kv_fp8's
#      last 54 legal_long_multi items at 32K, then kv_int8_per_token_head's 150 (~64 items at 32K in
#      10 minutes beside two other runs)
# Two runs starting together reach their first item ~2.5 minutes after the plan starts (items loaded,
# then each engine's torch.compile, ~50 s).
# ORDER_LONG, ORDER_LONG2 and ORDER_64 replace the variants of A's 128K step, B's 128K step and A's
# 64K step (every variant of the 64K and 128K configs is defined there).
# Items: 4K-32K and 128K built on the host (~1 and ~3.5 minutes) or carried, as
# qwen-1.5b-ruler-long.sh says; 64K in lane A. Carrying, start and polls: as qwen-1.5b-ruler.sh.
# Usage: setsid nohup bash lab/plans/qwen-1.5b-ruler-rest.sh T0 BUDGET_S > /root/lanes.log 2>&1 < /dev/null &
source "$(dirname "$0")/ruler-common.sh" "$@"
long=${ORDER_LONG:-awq} long2=${ORDER_LONG2:-kv_fp8} mid=${ORDER_64:-kv_int8_per_token_head}
short_items
items $L 131072
bash lab/lanes.sh $DL \
  "$(seeds $D/scores-ruler-128k $L l128 $long) run $L l128 $long; py i64 lab/ruler_items.py $M; \
$(seeds $D/scores-ruler-64k $M l64 $mid) run $M l64 $mid" \
  "$(seeds $D/scores-ruler-128k $L l128b $long2) run $L l128b $long2; \
$(seeds $D/scores-ruler $S r4 kv_fp8) run $S r4 kv_fp8; \
$(seeds $D/scores-ruler $S r4i kv_int8_per_token_head) run $S r4i kv_int8_per_token_head"
