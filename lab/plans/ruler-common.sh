# Sourced by the RULER plans (qwen-1.5b-ruler*.sh) with their T0 BUDGET_S: the repository root, the
# lanes' deadline DL (END_MARGIN_S before the budget ends, for the last poll), the 4K-32K config S, the
# 64K and 128K configs M and L, the 1.5B's results folder D (its kept per-item scores, which `seed`
# resumes from), the items folder I, and the steps that build items and seed lanes.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
DL=$(($1 + $2 - ${END_MARGIN_S:-150}))
S=lab/configs/h200/qwen-1.5b-ruler.yaml
M=lab/configs/h200/qwen-1.5b-ruler-64k.yaml
L=lab/configs/h200/qwen-1.5b-ruler-128k.yaml
D=${RESULTS_DIR:-docs/results/h200-2026-12-01-qwen2.5-coder-1.5b}  # RESULTS_DIR: a test's kept scores
I=runs/h200/items
# The configs' 16 GiB pools are for four lanes on a 141 GB card; on an 80 GB one (an H100) four
# engines fit with 8 GiB pools, which still hold two 128K items' bf16 caches (3.5 GiB each) at once.
# Edited in this private copy only: the run records carry the pool each engine had. A plan with at
# most two engines at once sets KEEP_POOLS=1 first: its pools stay 16 GiB, fixed alike on both cards,
# so that the gate compares their KV capacity with the H200 baseline's (core.types.pools_comparable).
gpu_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
if [ -z "${KEEP_POOLS:-}" ] && [ -n "$gpu_mib" ] && [ "$gpu_mib" -lt 100000 ]; then
  sed -i 's/^\(    kv_cache_memory_bytes:\) 17179869184 .*/\1 8589934592   # 8 GiB each: four engines on an 80 GB card/' $S $L
fi
# Items are built once, on every core, before any lane: a run builds what the cache lacks, and runs
# started side by side would each build the same ones.
short_items() { mkdir -p $I; bash lab/device.sh py lab/ruler_items.py $S > $I/items-short.log 2>&1; }
items() {  # CONFIG NAME: build one config's items, then keep a copy for the polls to bring back
  mkdir -p $I
  bash lab/device.sh py lab/ruler_items.py "$1" > $I/items-$2.log 2>&1
  mkdir -p $I/ruler && cp "${EVALSUITE_DEVICE_ROOT:-/root}"/cache/ruler/*-len"$2"-* $I/ruler/ 2>/dev/null
  touch $I/$2.done
}
seeds() {  # SCORES CONFIG NAME VARIANT...: the seed step of a lane, for those VARIANTs kept in SCORES:
  # one step for them all, since a seed refuses a folder that already holds a run (a second would
  # find the first's)
  local scores=$1 config=$2 name=$3 kept=()
  shift 3
  for v in "$@"; do [ -d "$scores/$v" ] && kept+=("$v"); done
  [ ${#kept[@]} -gt 0 ] && printf 'seed %s %s %s %s; ' "$scores" "$config" "$name" "${kept[*]}"
}
