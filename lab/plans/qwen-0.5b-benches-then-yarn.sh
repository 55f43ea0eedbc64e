#!/usr/bin/env bash
# One device session's plan, run ON the H200 from /root/repo after `device.sh setup` and `device.sh copy`
# with the 0.5B imported:
#   1. alone on the card, one after the other: bench/engine_start.py first (so that its first start
#      finds no compile or kernel cache of an earlier engine on this fresh machine), the latency pass
#      of fp8_kv_fp8, bench/niah_schedule.py at 16K + 64K (YaRN, the real model), bench/overhead.py;
#   2. the YaRN grid's remainder for the four runtime variants, each partial variant resumed from the
#      scores kept in docs/results (`seed`), needle and legal_long before the multi-key needle.
# Usage: setsid nohup bash lab/plans/qwen-0.5b-benches-then-yarn.sh T0 BUDGET_S > /root/lanes.log &
# where T0 is the epoch second the device call began and BUDGET_S the budget left before it: phase 2
# ends 240 s before the budget does, so that the last poll calls can bring every folder back.
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$1 B=$2
D1=$((T0 + 860)) DL=$((T0 + B - 240))
M=$(ls -d /root/cache/models/qwen2.5-coder-0.5b*)
L=lab/configs/h200/qwen-0.5b-latency.yaml
Y=lab/configs/h200/qwen-0.5b-128k-needle-legal.yaml
K=lab/configs/h200/qwen-0.5b-128k-multikey.yaml
D=docs/results/h200-2026-12-01-qwen2.5-coder-0.5b/scores-128k
YARN='hf_overrides={"rope_parameters":{"rope_type":"yarn","factor":4.0,"original_max_position_embeddings":32768,"rope_theta":1000000.0}}'
bash lab/lanes.sh $D1 "py es bench/engine_start.py --model $M; run $L lat fp8_kv_fp8; \
py niah bench/niah_schedule.py --model $M --engine-arg '$YARN' --lengths 16384,65536 \
--depths 0,0.25,0.5,0.75,1 --seeds 3 --compile --rounds 2 --json runs/h200/niah/niah.json; \
py ov bench/overhead.py --model $M --mmlu-per-subject 50 --mmlu-shots 5 --needle-lengths 4096,16384,28672 \
--needle-depths 0,0.5,1 --needle-seeds 3 --rounds 2 --engine-arg max_num_batched_tokens=16384"
rm -f runs/h200/lanes.done
bash lab/lanes.sh $DL "seed $D $Y y3 fp8; run $Y y3 fp8" "seed $D $Y y4 fp8_kv_fp8; run $Y y4 fp8_kv_fp8" \
  "seed $D $Y y1 bf16; run $Y y1 bf16; seed $D $K m1 bf16 fp8; run $K m1 bf16 fp8" \
  "seed $D $Y y2 kv_fp8; run $Y y2 kv_fp8; run $K m2 kv_fp8 fp8_kv_fp8"
