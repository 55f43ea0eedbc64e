# Sourced by the RULER plans (qwen-1.5b-ruler.sh, qwen-1.5b-ruler-rest.sh, qwen-1.5b-ruler-long.sh) with
# their T0 BUDGET_S: the repository root, the lanes' deadline DL (END_MARGIN_S before the budget ends,
# for the last poll), the 4K-32K config S, the 64K and 128K configs M and L, the 1.5B's results folder D
# (its kept per-item scores, which `seed` resumes from) and the items folder I.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
DL=$(($1 + $2 - ${END_MARGIN_S:-150}))
S=lab/configs/h200/qwen-1.5b-ruler.yaml
M=lab/configs/h200/qwen-1.5b-ruler-64k.yaml
L=lab/configs/h200/qwen-1.5b-ruler-128k.yaml
D=docs/results/h200-2026-12-01-qwen2.5-coder-1.5b
I=runs/h200/items
mkdir -p $I
# Items are built once, on every core, before any lane: a run builds what the cache lacks, and runs
# started side by side would each build the same ones.
short_items() { bash lab/device.sh py lab/ruler_items.py $S > $I/items-short.log 2>&1; }
