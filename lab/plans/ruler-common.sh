# Sourced by the RULER plans (qwen-1.5b-ruler.sh, qwen-1.5b-ruler-rest.sh) with their T0 BUDGET_S:
# the repository root, the lanes' deadline DL (END_MARGIN_S before the budget ends, for the last
# poll), the 4K-32K config S, the 64K/128K config L and the short items built once on every core.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
DL=$(($1 + $2 - ${END_MARGIN_S:-150}))
S=lab/configs/h200/qwen-1.5b-ruler.yaml
L=lab/configs/h200/qwen-1.5b-ruler-128k.yaml
mkdir -p runs/h200/items && bash lab/device.sh py lab/ruler_items.py $S > runs/h200/items/items-short.log 2>&1
