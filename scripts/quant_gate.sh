#!/usr/bin/env bash
# The pull-request gate of .github/workflows/quant-gate.yml: every variant that ran in the baseline
# run against its namesake in the candidate run, by `evalsuite gate` under the rules the baseline run
# was made to be judged by (its config's gate_rules, resolved in the baseline's checkout when it ran,
# so a pull request cannot loosen its own gate). Writes OUT/gate.md (the PR comment), gate-V.md and
# junit-V.xml per variant, and exits with the verdict: 1 if any variant failed, else 70 on an error of
# evalsuite's own, else 2 on bad input, else 3 if any is inconclusive, else 0.
#   scripts/quant_gate.sh PYTHON BASE_RUN CAND_RUN OUT
# PYTHON: the interpreter with evalsuite installed (the candidate's .venv/bin/python).
set -u
python=$1 base=$2 cand=$3 out=$4
mkdir -p "$out"
variants=$("$python" - "$base/run.json" "$cand/run.json" <<'PY'
import json, sys
base, cand = (json.load(open(p))["variants"] for p in sys.argv[1:3])
names = {v["variant"] for v in cand}
print(" ".join(v["variant"] for v in base if v["status"] == "ok" and v["variant"] in names))
PY
)
codes=""
: > "$out/gate.md"
for v in $variants; do
  "$python" -m evalsuite gate --baseline "$base" --candidate "$cand" --variant-baseline "$v" --variant-candidate "$v" \
    --junit "$out/junit-$v.xml" --markdown "$out/gate-$v.md" > /dev/null
  rc=$?
  codes="$codes $rc"
  if [ -f "$out/gate-$v.md" ]; then cat "$out/gate-$v.md" >> "$out/gate.md"; else
    echo "evalsuite gate for \`$v\` exited $rc without a report" >> "$out/gate.md"; fi
done
if [ -z "$variants" ]; then
  echo "no variant ran in the baseline; nothing to gate" >> "$out/gate.md"
  exit 2
fi
for rc in 1 70 2 3; do
  case " $codes " in *" $rc "*) exit "$rc" ;; esac
done
for rc in $codes; do [ "$rc" -eq 0 ] || exit "$rc"; done
exit 0
