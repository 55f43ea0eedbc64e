#!/usr/bin/env bash
# RULER at 64K and 128K (YaRN x4) for bf16, kv_fp8_skip_layers_0_1, fp8, kv_fp8 and awq, in that order
# of need (the baseline; the cache the needles called intact; then the others), run ON the H200 from
# /root/repo. The card is compute-bound on these prefills (a 128K item ~3.1 s alone), so a lane more
# only shares it: two lanes, one per length, each finishing a variant before the next, so that what
# a session leaves undone is whole variants, not a few tasks of each.
#   l128  128K: bf16, kv_fp8_skip_layers_0_1 (its 32 kept 128K items seeded), fp8, kv_fp8, awq
#   l64   64K:  bf16, kv_fp8_skip_layers_0_1, fp8, kv_fp8, awq (built on the card, ~3 min, last)
# Re-runnable: each lane seeds its folder from the scores kept in $D/scores-ruler-64k and
# $D/scores-ruler-128k where they exist (`slim.sh aside` with them as KEEP), so a second session
# resumes where this one stopped.
# The items (~20 minutes of one core at 128K) can be built beforehand on any machine with the 1.5B
# (`python lab/ruler_items.py` on the two configs, then `python lab/pack.py
# ~/.cache/evalsuite/ruler .gpu/items/ruler.tar.zst`, ~5 MB, carried with a kit part): the start call
# unpacks them into the cache (`lab/device.sh items` after `setup`); what is missing a run builds itself.
# Carrying, start and polls otherwise as qwen-1.5b-ruler.sh.
# Usage: setsid nohup bash lab/plans/qwen-1.5b-ruler-long.sh T0 BUDGET_S > /root/lanes.log 2>&1 < /dev/null &
source "$(dirname "$0")/ruler-common.sh" "$@"
order="bf16 kv_fp8_skip_layers_0_1 fp8 kv_fp8 awq"
seeds() {  # the seed steps of one length's lane, for the variants kept in $1
  for v in $order; do [ -d "$1/$v" ] && printf 'seed %s %s %s %s; ' "$1" "$2" "$3" "$v"; done
}
bash lab/device.sh py lab/ruler_items.py $M $L > $I/items-long.log 2>&1
bash lab/lanes.sh $DL \
  "$(seeds $D/scores-ruler-128k $L l128) run $L l128 $order" \
  "$(seeds $D/scores-ruler-64k $M l64) run $M l64 $order"
