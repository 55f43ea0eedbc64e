#!/usr/bin/env bash
# Runs ON the H200 while lab/lanes.sh works: waits up to WAIT seconds (less if the lanes
# end), prints where each lane is, then packs the run folders under runs/h200 that changed since
# they were last sent and copies into $OUT as many as one call returns (8 files, 64 MiB), the ones
# sent longest ago first. Call it again, back to back, until it reports nothing left to send.
#   poll.sh WAIT
set -uo pipefail
wait_s=${1:-0}
cd "$(dirname "$0")/.."
# /root/lanes.log: the start call's plan has begun, and a poll in the same call may come before it
# has made runs/h200
if [ ! -d runs/h200 ] && [ ! -f "${LANES_LOG:-/root/lanes.log}" ]; then
  # a fresh machine (the one with the lanes was given back in a gap between calls): waiting would
  # only spend the budget left on nothing
  echo "poll: $(pwd) holds no lanes (runs/h200): this machine is a fresh start, not the one the lanes ran on"
  exit 3
fi
end=$((SECONDS + wait_s))
while [ $SECONDS -lt $end ] && [ ! -f runs/h200/lanes.done ]; do sleep 5; done
for log in runs/h200/lane*.log; do echo "== $log: $(tr '\n' ' ' < "$log")"; done
for d in runs/h200/*/; do
  c=$(ls -t "$d"console-*.log "$d"bench.log 2>/dev/null | head -1)
  [ -n "$c" ] && echo "-- $d: $(tail -c 400 "$c" | tr '\r' '\n' | grep -av '^\s*$' | tail -2 | tr '\n' ' ')"
done
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
mkdir -p /root/sent /root/packs
files=0 bytes=0 left=0
for d in $(ls -d runs/h200/*/ | while read -r x; do n=$(basename "$x"); \
           echo "$(stat -c %Y /root/sent/"$n" 2>/dev/null || echo 0) $n"; done | sort -n | cut -d' ' -f2); do
  sent=/root/sent/$d
  if [ -f "$sent" ] && [ -z "$(find "runs/h200/$d" -newer "$sent" -type f | head -1)" ]; then continue; fi
  rm -f /root/packs/"$d".tar.zst.*
  touch "$sent.new"
  PYTHONPATH=/root/zst python3 lab/pack.py "runs/h200/$d" "/root/packs/$d.tar.zst" >/dev/null
  n=$(ls /root/packs/"$d".tar.zst.* | wc -l)
  b=$(cat /root/packs/"$d".tar.zst.* | wc -c)
  if [ $((files + n)) -le 8 ] && [ $((bytes + b)) -le $((62 * 1024 * 1024)) ]; then
    cp /root/packs/"$d".tar.zst.* "$OUT"/ && mv "$sent.new" "$sent"
    files=$((files + n)) bytes=$((bytes + b))
  else
    left=$((left + 1)); rm -f "$sent.new"
  fi
done
echo "sent $files files ($bytes bytes); folders still to send: $left"
ls -la "$OUT"
