#!/usr/bin/env bash
# bench/latency_isolation.py on one card (H100 or H200), run ON the machine from /root/repo after
# `device.sh setup` and `device.sh copy`: the 1.5B's shape with dummy weights (speed does not depend on
# weight values), so no model is carried or imported. One lane, the card to itself, one phase a step in the
# order that leaves something whole wherever the time ends: packed, alone (each on a restarted engine:
# with the first, a packed-vs-alone comparison), packed with --stop decided, packed again, the report;
# its parts and RESULT line in runs/h200/li*, which lab/poll.sh sends back.
# Budget (bench/latency_isolation.py's own estimate, H100): packed ~4.5 min cold then ~3.5, stop ~4,
# alone ~4: about 16 minutes of card.
# Carrying (5 calls back to back, each with the checkout, ~10 MiB): the kit re-split to fit beside the
# checkout (`cat .kit/part?? > j; split -b 50M -d j .kit/part`), then
#   1 carry [.kit/part00, .kit/site.sha256, .kit/install_kit.sh]             `bash lab/device.sh stash`
#   2 carry [.kit/part01]                                                     `bash lab/device.sh stash`
#   3 carry [.kit/part02]                                                     `bash lab/device.sh stash`
#   4 carry [.kit/part03, .kit/zst, .gpu/carry, .gpu/qwen2.5-coder-1.5b-shape] (lab/shape_folder.sh; .gpu/carry:
#     pack.sh's wheels/ and a data.tar.gz holding the haystack essays only), running
#       T0=$(date +%s); set -e; bash lab/device.sh stash; bash lab/device.sh setup 2>&1 | tail -4
#       bash lab/device.sh copy; cd /root/repo; set +e
#       setsid nohup bash lab/plans/qwen-1.5b-latency-isolation.sh $T0 B > /root/lanes.log 2>&1 < /dev/null &
#       sleep 400; bash lab/poll.sh 0
#   then `cd /root/repo && bash lab/poll.sh 540` back to back until lanes.done.
# Usage: [PHASES="packed alone"] setsid nohup bash lab/plans/qwen-1.5b-latency-isolation.sh T0 BUDGET_S > /root/lanes.log 2>&1 < /dev/null &
set -uo pipefail
cd "$(dirname "$0")/../.."
DL=$(($1 + $2 - ${END_MARGIN_S:-90}))
C=lab/configs/h200/qwen-1.5b-latency-isolation.yaml
B="bench/latency_isolation.py $C -w runs/h200/li/work --busy busy_triton"
# PHASES: the phases in order (default all four); a lease too short for ~16 min of card runs
# "packed alone" (~9 min): one packed run against each variant alone, and the report of those.
PHASES=${PHASES:-packed alone stop packed}
steps="" k=1
for ph in $PHASES; do steps="$steps py li$k $B --phase $ph;"; k=$((k + 1)); done
${LANES:-bash lab/lanes.sh} $DL "$steps py li$k $B --report"
