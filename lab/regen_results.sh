#!/usr/bin/env bash
# Recompute a results page's machine-written files (gate, compare, report, check) from the per-item
# scores and run folders in its data, and write them where the page has them: `git diff` then shows
# whatever moved, and nothing moved is the page reproduced.
#
#   bash lab/regen_results.sh PAGE...       # every page below if none is named
#
# PAGE: h200-2026-12-01-qwen2.5-coder-1.5b, h200-2026-12-01-qwen2.5-coder-0.5b, claims-2026-12-02 (the
# tables as published), h200-2026-11-30-qwen2.5-coder-1.5b, h200-2026-11-29 (the statistics of today on
# the data of then: their pages say what differs), h100-2026-12-07-qwen2.5-coder-1.5b-latency. It first puts each page's data, and the data its
# commands also read, beside the page (`evalsuite results fetch`: rebuilt from the clone's history,
# sha256 checked). Each command repeats the one that last wrote its file (same runs, run-folder names,
# variants, flags), so that a change to the statistics shows as a diff of the published files and
# nothing else; afterwards `evalsuite results pack` packs changed data into a new version.
#
#   PYTHON=.venv/bin/python RUNS=/tmp/regen-runs by default
#
# Run folders are rebuilt by `evalsuite import` under $RUNS (replaced on every call); their names
# are the labels the files print (`rebuilt-32k:bf16`, the compare headers, the report's provenance).
# The folders a report reads have the config's `controls: [bf16_repeat]` taken out (a variant these
# runs never measured), as the pages say. The reports and the claims check read them through links in
# the repository's runs/ (ignored by git; the links are removed at the end), so that what they print
# names `runs/NAME`, never a folder of this machine; run from the repository root, where the rules'
# path prints relative.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python}
PY=$(command -v "$PY")
RUNS=${RUNS:-/tmp/regen-runs}
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
export MPLBACKEND=Agg
cd "$REPO"

Q15=docs/results/h200-2026-12-01-qwen2.5-coder-1.5b
Q05=docs/results/h200-2026-12-01-qwen2.5-coder-0.5b
Q1130=docs/results/h200-2026-11-30-qwen2.5-coder-1.5b
CLAIMS=docs/results/claims-2026-12-02
H1129=docs/results/h200-2026-11-29
L1207=docs/results/h100-2026-12-07-qwen2.5-coder-1.5b-latency
CFG=lab/configs/h200
# the compare tables' rows (compare-all, compare-128k, the 0.5B's and the 2026-12-01 four-run table)
M=(--metric 'mmlu/acc' --metric 'legal/balanced_acc' --metric 'needle*/acc*' --metric 'legal_long/acc*'
   --metric 'engine/weights_gib' --metric 'engine/kv_cache_tokens')

evalsuite() { "$PY" -m evalsuite "$@"; }

rundir() {  # rundir SCORES CONFIG NAME [--variant V ...]: $RUNS/NAME from the kept scores
    local scores=$1 config=$2 name=$3
    shift 3
    rm -rf "${RUNS:?}/$name"
    evalsuite import "$scores" "$RUNS/$name" --config "$config" "$@" >/dev/null
}

no_controls() {  # the config's controls: [bf16_repeat] out of a rebuilt folder (never measured here)
    "$PY" - "$RUNS/$1/config.yaml" <<'EOF'
import sys, yaml
path = sys.argv[1]
cfg = yaml.safe_load(open(path))
cfg.pop("controls", None)
open(path, "w").write(yaml.safe_dump(cfg, sort_keys=False))
EOF
}

gate() {  # gate exits 1 (a candidate failed) or 3 (inconclusive) by design; 2 is bad input
    local rc=0
    evalsuite gate "$@" >/dev/null || rc=$?
    case $rc in 0|1|3) echo "gate: exit $rc (${*: -1})" ;; *) echo "gate failed with exit $rc" >&2; exit "$rc" ;; esac
}

compare() {  # compare RUN... --out DIR ...: the folder replaced, so no plot of an earlier call stays
    local out=""
    local args=("$@")
    local i
    for ((i = 0; i < ${#args[@]}; i++)); do [[ ${args[i]} == --out ]] && out=${args[i+1]}; done
    [[ -n $out ]] && rm -rf "$out"
    evalsuite compare "$@" --format markdown >/dev/null
}

report() {  # report html|md RUN... --out DIR
    local keep=$1
    shift
    local out=${*: -1}
    rm -rf "$out"
    evalsuite report "$@" >/dev/null
    # the 32K and YaRN reports were published without their self-contained report.html (the PNGs beside
    # report.md hold the same plots); the RULER report kept it
    [[ $keep == html ]] || rm -f "$out/report.html"
}

LINKS=()
MADE_RUNS=""
link_runs() {  # runs/NAME -> $RUNS/NAME for the reports; an existing runs/NAME is never replaced
    [[ -d runs ]] || { mkdir runs; MADE_RUNS=1; }
    local n
    for n in "$@"; do
        if [[ -L runs/$n && $(readlink "runs/$n") == "$RUNS/$n" ]]; then continue; fi
        if [[ -e runs/$n || -L runs/$n ]]; then echo "runs/$n exists: move it away first" >&2; exit 2; fi
        ln -s "$RUNS/$n" "runs/$n"
        LINKS+=("runs/$n")
    done
}
unlink_runs() {
    local l
    for l in "${LINKS[@]}"; do rm -f "$l"; done
    if [[ -n $MADE_RUNS ]]; then rmdir runs 2>/dev/null || true; fi
}
trap unlink_runs EXIT

mkdir -p "$RUNS"

q15_folders() {  # the 1.5B page's run folders (the claims check reads qwen15 too)
    rundir $Q15/scores $CFG/qwen-1.5b-accuracy.yaml rebuilt-32k            # gate, gate-repeat, compare-all
    rundir $Q1130/scores $CFG/qwen-1.5b-accuracy.yaml rebuilt-1130         # the 2026-11-30 bf16: control, repeat baseline
    # its runs were interrupted and kept as `running`; `finish` scores them as its page did (`partial`,
    # the same metrics), since a baseline must be ok or partial
    evalsuite finish "$RUNS/rebuilt-1130" >/dev/null
}

page_q15() {  # h200-2026-12-01-qwen2.5-coder-1.5b
    q15_folders
    rundir $Q15/scores-128k $CFG/qwen-1.5b-128k-accuracy.yaml rebuilt-128k # gate-128k, compare-128k
    rundir $Q15/scores-ruler $CFG/qwen-1.5b-ruler.yaml ruler               # RULER 4K-32K and legal_long_multi
    rundir $Q15/scores-ruler-64k $CFG/qwen-1.5b-ruler-64k.yaml 64k
    rundir $Q15/scores-ruler-128k $CFG/qwen-1.5b-ruler-128k.yaml 128k
    local pair tag kept config
    for pair in 32k:scores:qwen-1.5b-accuracy 128k:scores-128k:qwen-1.5b-128k-accuracy latency:latency:qwen-1.5b-latency; do
        IFS=: read -r tag kept config <<<"$pair"
        rundir $Q15/$kept $CFG/$config.yaml qwen-1.5b-$tag                 # the reports' folders
        no_controls qwen-1.5b-$tag
    done
    # compare/: the first session's four run folders (g4, g1, g2, g3), each with the variants it ran
    rundir $Q15/scores $CFG/qwen-1.5b-accuracy.yaml 20261201-033204-qwen-1.5b-accuracy --variant bf16 --variant fp8 --variant fp8_kv_fp8
    rundir $Q15/scores $CFG/qwen-1.5b-accuracy.yaml 20261201-033119-qwen-1.5b-accuracy --variant kv_fp8 --variant kv_fp8_calibrated
    rundir $Q15/scores $CFG/qwen-1.5b-accuracy.yaml 20261201-033134-qwen-1.5b-accuracy --variant gptq --variant rtn
    rundir $Q15/scores $CFG/qwen-1.5b-accuracy.yaml 20261201-033149-qwen-1.5b-accuracy --variant awq

    gate --baseline "$RUNS/rebuilt-32k:bf16" \
        $(for v in fp8 fp8_kv_fp8 kv_fp8 kv_fp8_calibrated kv_fp8_skip_layers_0_1_triton_attn kv_fp8_per_token_head \
                   kv_int8_per_token_head rtn awq gptq gguf_q4_k_m bf16_triton_attn; do echo --candidate "$RUNS/rebuilt-32k:$v"; done) \
        --control "$RUNS/rebuilt-1130:bf16" --markdown $Q15/gate.md
    gate --baseline "$RUNS/rebuilt-128k:bf16" \
        $(for v in fp8 fp8_kv_fp8 kv_fp8 kv_fp8_calibrated kv_fp8_skip_layers_0_1 rtn awq gptq gguf_q4_k_m; do
              echo --candidate "$RUNS/rebuilt-128k:$v"; done) \
        --markdown $Q15/gate-128k.md
    gate --baseline "$RUNS/rebuilt-1130:bf16" --candidate "$RUNS/rebuilt-32k:bf16" --candidate "$RUNS/rebuilt-32k:fp8" \
        --markdown $Q15/gate-repeat.md
    gate --baseline "$RUNS/ruler:bf16" --candidate "$RUNS/ruler" --json "$RUNS/gate-ruler.json" --markdown $Q15/gate-ruler.md
    gate --baseline "$RUNS/64k:bf16" --candidate "$RUNS/64k" --json "$RUNS/gate-ruler-64k.json" --markdown $Q15/gate-ruler-64k.md
    gate --baseline "$RUNS/128k:bf16" --candidate "$RUNS/128k" --json "$RUNS/gate-ruler-128k.json" --markdown $Q15/gate-ruler-128k.md
    # the effective context length per variant, from those three gates' per-length checks, into ruler.md
    "$PY" lab/scores.py effective "$RUNS"/gate-ruler{,-64k,-128k}.json --into $Q15/ruler.md
    # the Triton control at 64K once its scores are kept (qwen-1.5b-ruler-rest.sh's c64): bf16 on Triton
    # attention against bf16, and the INT8 cache against bf16 on Triton, on the single needles both answered
    if [[ -d $Q15/scores-ruler-64k-single ]]; then
        rundir $Q15/scores-ruler-64k-single $CFG/qwen-1.5b-ruler-64k-single.yaml 64k-single
        gate --baseline "$RUNS/64k:bf16" --candidate "$RUNS/64k-single:bf16_triton_attn" --markdown $Q15/gate-ruler-64k-triton.md
        gate --baseline "$RUNS/64k-single:bf16_triton_attn" --candidate "$RUNS/64k:kv_int8_per_token_head" \
            --markdown $Q15/gate-ruler-64k-int8-triton.md
    fi

    compare "$RUNS/20261201-033204-qwen-1.5b-accuracy" "$RUNS/20261201-033119-qwen-1.5b-accuracy" \
        "$RUNS/20261201-033134-qwen-1.5b-accuracy" "$RUNS/20261201-033149-qwen-1.5b-accuracy:awq" \
        --baseline bf16 --out $Q15/compare "${M[@]}"
    compare "$RUNS/rebuilt-32k" --baseline bf16 --out $Q15/compare-all "${M[@]}"
    compare "$RUNS/rebuilt-128k" --baseline bf16 --out $Q15/compare-128k "${M[@]}"
    compare "$RUNS/ruler" --baseline bf16 --out $Q15/compare-ruler
    compare "$RUNS/64k" --baseline bf16 --out $Q15/compare-ruler-64k
    compare "$RUNS/128k" --baseline bf16 --out $Q15/compare-ruler-128k

    link_runs qwen-1.5b-32k qwen-1.5b-128k qwen-1.5b-latency ruler
    report md runs/qwen-1.5b-32k runs/qwen-1.5b-latency --out $Q15/report
    report md runs/qwen-1.5b-128k runs/qwen-1.5b-latency --out $Q15/report-128k
    report html runs/ruler --out $Q15/report-ruler
    "$PY" lab/quote_report.py $Q15.md >/dev/null        # the page's decision tables, from those reports
}

page_q05() {  # h200-2026-12-01-qwen2.5-coder-0.5b
    rundir $Q05/scores $CFG/qwen-0.5b-accuracy.yaml r05-32k
    rundir $Q05/scores-128k $CFG/qwen-0.5b-128k-accuracy.yaml r05-128k
    local pair tag kept config R
    for pair in 32k:scores:qwen-0.5b-accuracy 128k:scores-128k:qwen-0.5b-128k-accuracy latency:latency:qwen-0.5b-latency; do
        IFS=: read -r tag kept config <<<"$pair"
        rundir $Q05/$kept $CFG/$config.yaml qwen-0.5b-$tag
        no_controls qwen-0.5b-$tag
    done
    for R in r05-32k r05-128k; do
        gate --baseline "$RUNS/$R:bf16" --candidate "$RUNS/$R:fp8" --candidate "$RUNS/$R:kv_fp8" \
            --candidate "$RUNS/$R:fp8_kv_fp8" --markdown $Q05/gate$([ $R = r05-128k ] && echo -128k).md
    done
    compare "$RUNS/r05-32k" --baseline bf16 --out $Q05/compare "${M[@]}"
    compare "$RUNS/r05-128k" --baseline bf16 --out $Q05/compare-128k "${M[@]}"
    link_runs qwen-0.5b-32k qwen-0.5b-128k qwen-0.5b-latency
    report md runs/qwen-0.5b-32k runs/qwen-0.5b-latency --out $Q05/report
    report md runs/qwen-0.5b-128k runs/qwen-0.5b-latency --out $Q05/report-128k
    "$PY" lab/quote_report.py $Q05.md >/dev/null
}

page_claims() {  # claims-2026-12-02: the command at the bottom of its page; claim 5 reads the 1.5B's accuracy
    rundir $Q15/scores $CFG/qwen-1.5b-accuracy.yaml qwen15 --variant bf16 --variant fp8  # what claim 5 reads
    link_runs qwen15
    local rc=0
    evalsuite check configs/claims/long-context-128k.yaml $CLAIMS/runs/* runs/qwen15 \
        --markdown $CLAIMS/claims.md --json $CLAIMS/claims.json >/dev/null || rc=$?
    case $rc in 0|1) echo "check: exit $rc" ;; *) echo "check failed with exit $rc" >&2; exit "$rc" ;; esac
}

page_q1130() {  # h200-2026-11-30-qwen2.5-coder-1.5b: today's gate of its runs (the page's gate.md is of that date)
    q15_folders
    gate --baseline "$RUNS/rebuilt-1130:bf16" --candidate "$RUNS/rebuilt-1130:fp8" --candidate "$RUNS/rebuilt-1130:awq" \
        --rules configs/gates/default.yaml --markdown $Q1130/gate.md
}

page_h1129() {  # h200-2026-11-29: today's compare and gate of its run folders (the page's files are of that date)
    local out
    out=$(evalsuite compare $H1129 --format markdown)
    printf '%s\n' "$out" >$H1129/compare.md
    gate --baseline $H1129/smollm2:bf16 --candidate $H1129/smollm2 --rules configs/gates/default.yaml \
        --markdown $H1129/smollm2/gate.md
}

page_l1207() {  # h100-2026-12-07-qwen2.5-coder-1.5b-latency: the page's commands (its RESULT line printed)
    "$PY" bench/latency_isolation.py $CFG/qwen-1.5b-latency-isolation.yaml -w $L1207/work --busy busy_triton \
        --report | tail -1
    local p
    p=$(ls -d $L1207/work/packed-1/*/)
    p=${p%/}
    gate --baseline "$p:bf16" --candidate "$p:fp8" --candidate "$p:kv_fp8" --control "$p:bf16_repeat" \
        --rules evalsuite/verdict/gate_rules.yaml --markdown $L1207/gate.md
}

ALL=(h200-2026-12-01-qwen2.5-coder-1.5b h200-2026-12-01-qwen2.5-coder-0.5b claims-2026-12-02
     h200-2026-11-30-qwen2.5-coder-1.5b h200-2026-11-29 h100-2026-12-07-qwen2.5-coder-1.5b-latency)
PAGES=("$@")
[[ ${#PAGES[@]} -gt 0 ]] || PAGES=("${ALL[@]}")
for page in "${PAGES[@]}"; do  # the data each page's commands read
    case $page in
        h200-2026-12-01-qwen2.5-coder-1.5b) need=("$Q15" "$Q1130") ;;
        h200-2026-12-01-qwen2.5-coder-0.5b) need=("$Q05") ;;
        claims-2026-12-02) need=("$CLAIMS" "$Q15") ;;
        h200-2026-11-30-qwen2.5-coder-1.5b) need=("$Q1130") ;;
        h200-2026-11-29) need=("$H1129") ;;
        h100-2026-12-07-qwen2.5-coder-1.5b-latency) need=("$L1207") ;;
        *) echo "lab/regen_results.sh: $page: not a page it recomputes (allowed: ${ALL[*]})" >&2; exit 2 ;;
    esac
    evalsuite results fetch "${need[@]/%/.md}" >/dev/null
done
for page in "${PAGES[@]}"; do
    case $page in
        h200-2026-12-01-qwen2.5-coder-1.5b) page_q15 ;;
        h200-2026-12-01-qwen2.5-coder-0.5b) page_q05 ;;
        claims-2026-12-02) page_claims ;;
        h200-2026-11-30-qwen2.5-coder-1.5b) page_q1130 ;;
        h200-2026-11-29) page_h1129 ;;
        h100-2026-12-07-qwen2.5-coder-1.5b-latency) page_l1207 ;;
    esac
done
# what moved against the commit (the runs/ links go at exit)
moved=()
for page in "${PAGES[@]}"; do moved+=("docs/results/$page.md" "docs/results/$page"); done
git status --short -- "${moved[@]}" | sed 's/^/differs: /' || true
