#!/usr/bin/env bash
# What the RULER plans left unmeasured, at every length, resumed from the per-item scores kept in
# $D/scores-ruler, $D/scores-ruler-64k and $D/scores-ruler-128k (fetched, and carried with the start call,
# since git ignores them): `seed` rebuilds each lane's run folder and `run --resume` scores only the
# items without a score. Left after 2026-12-05 (second session): INT8 per-token-head alone (Triton
# attention, whose prefill is the slowest) and the control its 64K single needles need:
#   A  bf16_triton_attn on the 64K single needles (36 items; qwen-1.5b-ruler-64k-single.yaml: was the
#      INT8 cache's loss there the cache's or Triton's?), then INT8's other 100 items at 64K
#   B  INT8's last 22 legal_long_multi items at 32K, then its 132 items at 128K (~1.5 hours alone:
#      several sessions, each resuming the last)
# On an H100 80GB, A's first 32 INT8 items at 64K and B's 128 contract questions took the ~21 minutes
# the two lanes had, side by side. Two runs starting together reach their first item ~2.5 minutes after
# the plan starts (items loaded, then each engine's torch.compile, ~50 s).
# ORDER_64 and ORDER_LONG replace the variants of A's 64K and B's 128K steps (every variant of the 64K
# and 128K configs is defined there).
# Items: 4K-32K, 64K and 128K built on the host (~1, ~1.5 and ~3.5 minutes) or carried, as
# qwen-1.5b-ruler-long.sh says. Carrying, start and polls: as qwen-1.5b-ruler.sh.
# Usage: setsid nohup bash lab/plans/qwen-1.5b-ruler-rest.sh T0 BUDGET_S > /root/lanes.log 2>&1 < /dev/null &
source "$(dirname "$0")/ruler-common.sh" "$@"
long=${ORDER_LONG:-kv_int8_per_token_head} mid=${ORDER_64:-kv_int8_per_token_head}
C=lab/configs/h200/qwen-1.5b-ruler-64k-single.yaml
# Side by side: each config's items are its own files, and carried ones still cost a minute or so each
# of reading the tokenizer over the essays (the cache key), which the lanes would otherwise wait for.
short_items & items $M 65536 & items $L 131072 &
wait
bash lab/lanes.sh $DL \
  "run $C c64 bf16_triton_attn; $(seeds $D/scores-ruler-64k $M l64 $mid) run $M l64 $mid" \
  "$(seeds $D/scores-ruler $S r4i kv_int8_per_token_head) run $S r4i kv_int8_per_token_head; \
$(seeds $D/scores-ruler-128k $L l128 $long) run $L l128 $long"
