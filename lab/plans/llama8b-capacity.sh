#!/usr/bin/env bash
# The capacity search on the Llama-3.1-8B shape with dummy weights (lab/configs/llama8b-dummy-capacity.yaml:
# users within p90 TTFT <= 2 s and p90 ITL <= 50 ms at 8K and 32K prompts, 256 output tokens), run ON
# the lent machine (an H100 or H200) from /root/repo after `device.sh setup` and `device.sh copy`,
# with .gpu/llama31-8b made by lab/prepare_h200.sh (config.json and tokenizer; no weights to carry).
# Speed does not depend on weight values (the config says why), so these are an 8B's users at the SLO.
# One lane, each engine alone on the card; one run, whole on its own (runs/h200/cap8b); each step
# one variant, stopped at its STEP_S (a cut variant keeps its finished levels):
#   bf16     <= 7 min  (~6: engine start ~1.5 with no weights to load; 32K prefill ~1.3 s alone, so 1-2
#   fp8      <= 7 min   users there, ~1 min a level; 8K ~5 users, 3-4 levels of ~30 s)
#   kv_fp8   <= 7 min
#   about 18 minutes, at most 21. The search stops a length's levels from starting after 130 s and
#   ends a level at 120 s. Estimates from the 8B's shape (15 GiB of weights, 128 KiB of KV a token:
#   a 0.9 H100 pool holds ~12 requests of 32K, ~47 of 8K; the first token, not the pool, binds), not
#   yet measured.
# Usage: setsid nohup bash lab/plans/llama8b-capacity.sh T0 BUDGET_S > /root/lanes.log 2>&1 < /dev/null &
set -uo pipefail
cd "$(dirname "$0")/../.."
DL=$(($1 + $2 - ${END_MARGIN_S:-120}))
C=lab/configs/llama8b-dummy-capacity.yaml
${LANES:-bash lab/lanes.sh} $DL "STEP_S=420 run $C cap8b bf16; STEP_S=420 run $C cap8b fp8; STEP_S=420 run $C cap8b kv_fp8"
# Back on the CPU machine (the sub-page's tables; say on it that the weights were dummy, and why):
#   evalsuite report runs/h200/cap8b/<run> --out docs/results/<page>/llama8b-capacity
