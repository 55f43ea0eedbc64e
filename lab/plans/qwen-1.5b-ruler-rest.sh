#!/usr/bin/env bash
# What RULER on the 1.5B still misses (docs/results/h200-2026-12-01-qwen2.5-coder-1.5b/ruler.md): the
# INT8 per-token-head cache at 64K and 128K (YaRN x4, as every 64K/128K row), its kernel control and
# its last contract questions, run ON the lent machine from /root/repo after `device.sh setup`,
# `device.sh items` and `device.sh copy` with the 1.5B imported. Steps in order of value; each seeds
# its run folder from the per-item scores kept in $D (fetched, carried with the start call): a lease
# resumes where the last stopped, and a step with no item left is left out.
#   lane 1  c64   bf16_triton_attn on the 36 single needles at 64K (qwen-1.5b-ruler-64k-single.yaml):
#                 whether INT8's 7 lost needles there are the cache's or Triton attention's. Whole: it
#                 starts only where twice its estimate fits (it shares the card with lane 2)
#   lane 2  r4i   INT8's last contract questions (legal_long_multi) at 32K (qwen-1.5b-ruler.yaml), whole
#           l64   INT8's other items at 64K (qwen-1.5b-ruler-64k.yaml), resumable
#           l128  INT8's items at 128K (qwen-1.5b-ruler-128k.yaml), resumable
#   lane 3  i128  the 128K items on the CPU, read in ~a minute where carried, else built beside the card
# Two engines at most run at once, so the configs' 16 GiB pools stay on an H100 too (KEEP_POOLS):
# fixed alike with the H200 baseline's, the gate compares INT8's KV capacity with bf16's.
#
# Budget (BUDGET=1 prints it from the kept scores' counts; lab/tests/test_rest_plan.py holds it):
#   start 120 s a run to its first item: its carried items read (51 s at 64K here, below) and its
#          engine started (INT8's on the H100: startup_s 71.1 in its 64K kept record); two runs
#          starting together took ~2.5 min to their first items on the H100 on 2026-12-05
#   c64     7 s a 64K item: bf16 on Triton attention's first token alone on the H200, 1,715 ms at
#           32K and 26,861.5 at 130K (the 1.5B page's latency run), a*n + b*n^2 -> 6.9 s at 65,536
#   r4i     3 s a 32K question: INT8's first token at 32K, 3,904.6 ms (the same run), less the 30.5%
#           of prompt tokens its 128 kept questions found cached (their records' cached_prompt_tokens)
#   l64    24 s a 64K item: on the H100 on 2026-12-05 INT8's 32 single needles at 64K and its 128
#          questions (128 x 2.7 s) filled the ~18.5 min of card the two lanes had after their first
#          item. Its 32K first token scaled (x4.2, less ~20% of shared prefixes) says 12.5 s
#   l128   93 s a 128K item: l64's x3.87, bf16 on Triton's 130K/64K (26.9 / 6.9 s). The 32K first
#          token scaled as bf16 on Triton's 130K/32K (x15.7) says 61 s, 50 less shared prefixes
#   lease  1,800 s: carrying ~190 s (2026-12-05: 24 calls back to back, the start call began with
#          1,609 s left), setup and copy ~90 s of the start call, END_MARGIN_S 150 for the last
#          polls: ~1,370 s of lanes
# Card seconds are added step after step (an engine's start beside another lane's prefill counted
# in full), so a lease holds at least what BUDGET=1 says: at these figures the first lease c64 and
# r4i whole and 28 of l64's 100 items, the second 52 more, the third the rest of 64K and 128K's first
# 6; then 13 of 128K's items a lease, 13 leases in all. At the lower figures (T64=13 T128=50): 64K
# whole in the second, 7 in all. The first lease's l64 log gives the rate the next budget takes.
# Items, built before the lease (the cache key is what the tokenizer does, so any machine with the
# 1.5B): `python lab/ruler_items.py lab/configs/h200/qwen-1.5b-ruler{,-64k,-128k}.yaml`, then
# `python lab/pack.py ~/.cache/evalsuite/ruler .gpu/items/ruler.tar.zst`, carried beside .gpu/carry
# and unpacked by `device.sh items` (in a call of its own where .gpu/carry's has no 6.5 MB left).
# Built on the card instead, the 64K items would hold c64 and l64 back ~1.5 min at the first lease's
# start (16 cores, qwen-1.5b-ruler-long.sh), the 4K-32K ones r4i ~1 min; the 128K ones (~3.5 min)
# lane 3 builds beside the card before l128 needs them. Measured on 2026-12-07 on a 2-core host
# shared with other work (one process, at 28-47% of a core): built 4K-32K in 180 s, 64K in 595 s,
# 128K in 1,842 s (~90, ~170, ~590 s of one core); 118 MB in 66 files (64K 30 MB, 128K 60 MB),
# packed to one 6.5 MB piece in 5 s, unpacked in 0.4 s; a run reading them takes 41 / 51 / 74 s
# (4K-32K / 64K / 128K) before its engine starts; the contract questions build in 16 s.
# Carrying, start and polls: as qwen-1.5b-yarn-rest.sh (the kit, .gpu/carry and the items with `device.sh prepare`, the model's
# pieces); the start call carries $D/scores-ruler{,-64k,-128k,-64k-single} (those fetched) and runs
#   T0=$(date +%s); set -e; bash lab/device.sh stash; bash lab/device.sh setup 2>&1 | tail -4
#   bash lab/device.sh items; bash lab/device.sh copy; cd /root/repo; set +e
#   setsid nohup bash lab/plans/qwen-1.5b-ruler-rest.sh $T0 B > /root/lanes.log 2>&1 < /dev/null &
#   sleep 100; bash lab/poll.sh 0
# then `cd /root/repo && bash lab/poll.sh 500` back to back until the lanes are done. Afterwards, here:
# `evalsuite export RUN --scores $D/scores-ruler-64k` (and -64k-single, -128k, the 4K-32K folder's
# scores-ruler) for each lane's run folder, and lab/regen_results.sh.
# Usage: setsid nohup bash lab/plans/qwen-1.5b-ruler-rest.sh T0 BUDGET_S > /root/lanes.log 2>&1 < /dev/null &
# (BUDGET=1: the budget and what each lease publishes, nothing run; LANES=printf: the lanes, unrun.)
export KEEP_POOLS=1
source "$(dirname "$0")/ruler-common.sh" "$@"
C=lab/configs/h200/qwen-1.5b-ruler-64k-single.yaml
V=kv_int8_per_token_head
START=120 LEASE=1800 CARRY=190 SETUP=90 T64=${T64:-24} T128=${T128:-93}
W=$((LEASE - CARRY - SETUP - ${END_MARGIN_S:-150}))
kept() {  # SCORES VARIANT: the items kept for VARIANT (0 where none)
  local n=0 f
  for f in "$1/$2"/*.scores.jsonl.gz; do [ -e "$f" ] && n=$((n + $(zcat "$f" | wc -l))); done
  echo $n
}
# name lane kind items-in-the-config s/item scores config variant, in order of value
STEPS=("c64 1 whole 36 7 $D/scores-ruler-64k-single $C bf16_triton_attn"
       "r4i 2 whole 678 3 $D/scores-ruler $S $V"
       "l64 2 resumable 132 $T64 $D/scores-ruler-64k $M $V"
       "l128 2 resumable 132 $T128 $D/scores-ruler-128k $L $V")

if [ -n "${BUDGET:-}" ]; then
  echo "lanes a lease: $LEASE - carrying $CARRY - setup $SETUP - margin ${END_MARGIN_S:-150} = $W s"
  declare -A todo
  for s in "${STEPS[@]}"; do
    read -r name lane kind total per scores _ v <<<"$s"
    todo[$name]=$((total - $(kept "$scores" "$v")))
    echo "step $name lane $lane $kind: ${todo[$name]} items x $per s + start $START = $((START + todo[$name] * per)) s"
  done
  lease=0
  while :; do
    card=$W got=()
    for s in "${STEPS[@]}"; do
      read -r name _ kind _ per _ <<<"$s"
      [ "${todo[$name]}" -gt 0 ] || continue
      if [ "$kind" = whole ]; then
        n=$(( START + todo[$name] * per <= card ? todo[$name] : 0 ))
      else
        n=$(( card > START + per ? (card - START) / per : 0 ))
        n=$(( n < todo[$name] ? n : todo[$name] ))
      fi
      [ "$n" -gt 0 ] || continue
      card=$((card - START - n * per)) todo[$name]=$((todo[$name] - n))
      got+=("$name $n$([ "${todo[$name]}" -eq 0 ] && echo " (whole)")")
    done
    [ ${#got[@]} -gt 0 ] || break
    lease=$((lease + 1))
    echo "lease $lease: $(IFS=,; echo "${got[*]}" | sed 's/,/, /g')"
  done
  echo "leases: $lease"
  exit 0
fi

lanes=()
for s in "${STEPS[@]}"; do
  read -r name lane kind total per scores config v <<<"$s"
  left=$((total - $(kept "$scores" "$v")))
  [ "$left" -gt 0 ] || continue
  # a whole step shares the card with the other lane: twice its card seconds; a resumable one starts
  # where it can score one item
  guard=$([ "$kind" = whole ] && echo $((2 * (START + left * per))) || echo $((START + per)))
  lanes[$lane]+="[ \$(left) -gt $guard ] && { $(seeds "$scores" "$config" "$name" "$v")run $config $name $v; }; "
done
[ "$(kept $D/scores-ruler-128k $V)" -lt 132 ] && lanes[3]="py i128 lab/ruler_items.py $L"
args=()
for l in 1 2 3; do [ -n "${lanes[$l]:-}" ] && args+=("${lanes[$l]%; }"); done
[ ${#args[@]} -gt 0 ] || { echo "nothing left: every step's items are kept"; exit 0; }
${LANES:-bash lab/lanes.sh} $DL "${args[@]}"
