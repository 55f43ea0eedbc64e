#!/usr/bin/env bash
# RULER at 64K and 128K (YaRN x4) for bf16, kv_fp8_skip_layers_0_1, fp8, kv_fp8 and awq, in that order
# of need (the baseline; the cache the needles called intact; then the others), run ON the H200 from
# /root/repo. The card is compute-bound on these prefills (a 128K item ~3.1 s alone), so a lane more
# only shares it: two lanes, one per length, each finishing a variant before the next, so that what
# a session leaves undone is whole variants, not a few tasks of each.
#   l128  128K: bf16, kv_fp8_skip_layers_0_1 (its 32 kept 128K items seeded), fp8, kv_fp8, awq
#   l64   64K:  bf16, kv_fp8_skip_layers_0_1, fp8, kv_fp8, awq (built on the card, ~3 min, last)
# Re-runnable: each lane seeds its folder from the scores kept in $D/scores-ruler-64k and
# $D/scores-ruler-128k where they exist (fetched, and carried with the start call), so a second session
# resumes where this one stopped.
# The items: 64K ~1.5 minutes and 128K ~3.5 minutes on the host's 16 cores, or none where they were
# built beforehand on any machine with the 1.5B (`python lab/ruler_items.py` on the two configs; the
# cache key is what the tokenizer does, not the tokenizers version that wrote it), packed with
# `python lab/pack.py ~/.cache/evalsuite/ruler .gpu/items/ruler.tar.zst` (~5 MB), carried with a kit
# part and unpacked by `device.sh items` after `setup`. The 64K lane starts once its items exist, while
# the 128K items build beside it; the 128K lane waits for them. The items the host built are copied to
# runs/h200/items/ruler, which the polls bring back.
# Usage: setsid nohup bash lab/plans/qwen-1.5b-ruler-long.sh T0 BUDGET_S > /root/lanes.log 2>&1 < /dev/null &
# (ORDER="V ..." runs only those variants, in that order; LENGTHS=65536 only the 64K lane, for a session
# too short for 128K.)
source "$(dirname "$0")/ruler-common.sh" "$@"
order=${ORDER:-bf16 kv_fp8_skip_layers_0_1 fp8 kv_fp8 awq}
items $M 65536
lanes=("$(seeds $D/scores-ruler-64k $M l64 $order) run $M l64 $order")
if [ "${LENGTHS:-65536 131072}" != 65536 ]; then
  items $L 131072 &
  lanes+=("until [ -f $I/131072.done ]; do sleep 5; done; $(seeds $D/scores-ruler-128k $L l128 $order) run $L l128 $order")
fi
bash lab/lanes.sh $DL "${lanes[@]}"
wait
