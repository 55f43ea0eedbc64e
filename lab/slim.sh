#!/usr/bin/env bash
# The repository's tracked files travel with every `device run` call and count against its 64 MiB;
# most of them are per-item scores in docs/results that a device run does not read. Moving them aside
# for the carry calls lets lab/pack.sh cut larger pieces (fewer calls, ~5 s each).
#   slim.sh aside [KEEP...]   move docs/results out of the checkout, bring back only KEEP (paths under
#                             docs/results a plan reads, e.g. the scores its lanes seed from)
#   slim.sh back              put docs/results back as it was (before any commit)
# Run `slim.sh aside` before pack.sh (it sizes pieces by the files present) and `slim.sh back` once
# the last call has started the plan; `git status` shows the moved files as deleted until then.
set -euo pipefail
cd "$(dirname "$0")/.."
stash=${EVALSUITE_SLIM_DIR:-$HOME/.cache/evalsuite/slim}/results
case ${1:-} in
  aside)
    shift
    [ -e "$stash" ] && { echo "slim.sh: $stash already holds a set-aside docs/results; run 'slim.sh back' first" >&2; exit 2; }
    for k in "$@"; do
      case $k in docs/results/*) [ -e "$k" ] || { echo "slim.sh: $k: no such path" >&2; exit 2; } ;;
        *) echo "slim.sh: $k: allowed: paths under docs/results/" >&2; exit 2 ;; esac
    done
    mkdir -p "$(dirname "$stash")"
    mv docs/results "$stash"
    for k in "$@"; do
      mkdir -p "$(dirname "$k")"
      cp -r "$stash/${k#docs/results/}" "$k"
    done
    echo "docs/results set aside in $stash (lab/pack.sh prints what travels now)"
    ;;
  back)
    [ -d "$stash" ] || { echo "slim.sh: nothing set aside in $stash" >&2; exit 2; }
    rm -rf docs/results
    mv "$stash" docs/results
    echo "docs/results back"
    ;;
  *) echo "usage: slim.sh aside [KEEP...] | slim.sh back" >&2; exit 2 ;;
esac
