#!/usr/bin/env bash
# Decode speed of -t 1 and -t 2, on a quiet machine and beside one busy process (issue 32, defect 11):
#   bench/threads-busy.sh [MODEL] [ROUNDS]
# Each cell is the median over ROUNDS (default 5) of `minfer bench -p 0 -n 128 -r 3` (tg128 tok/s); the
# conditions alternate round by round, so a slow drift of the machine's load hits all of them alike.
# The busy process is `yes > /dev/null`, unpinned (MINFER_BUSY_CPU=N pins it with taskset). MINFER
# picks the binary (default build/minfer). Run it on an otherwise idle machine (see uptime).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
model=${1:-$root/../shared/models/qwen2-mini-Q8_0.gguf}
rounds=${2:-5}
minfer=${MINFER:-$root/build/minfer}
[ -f "$model" ] || { echo "error: no model at $model" >&2; exit 1; }

tok_s() {  # tok_s THREADS: tg128 mean of one bench run
  "$minfer" bench -m "$model" -p 0 -n 128 -r 3 -t "$1" --json 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["tg128"]["mean"])'
}

busy_pid=""
start_busy() {
  if [ -n "${MINFER_BUSY_CPU:-}" ]; then taskset -c "$MINFER_BUSY_CPU" yes > /dev/null &
  else yes > /dev/null & fi
  busy_pid=$!
  sleep 0.2
}
stop_busy() {
  [ -z "$busy_pid" ] || kill "$busy_pid" 2> /dev/null || true
  wait "$busy_pid" 2> /dev/null || true
  busy_pid=""
}
trap stop_busy EXIT

declare -A runs
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for ((r = 0; r < rounds; ++r)); do
  for cond in quiet busy; do
    [ "$cond" = busy ] && start_busy
    for t in 1 2; do runs[$cond,$t]+="$(tok_s "$t") "; done
    stop_busy
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

median() { tr ' ' '\n' <<< "$1" | grep . | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo "model: $(basename "$model"), tg128 tok/s, median of $rounds rounds"
echo "| condition | -t 1 | -t 2 | -t 2 / -t 1 | all -t 1 runs | all -t 2 runs |"
echo "|---|---:|---:|---:|---|---|"
for cond in quiet busy; do
  m1=$(median "${runs[$cond,1]}"); m2=$(median "${runs[$cond,2]}")
  printf '| %s | %.0f | %.0f | %.2f | %s | %s |\n' "$cond" "$m1" "$m2" "$(echo "$m2 / $m1" | bc -l)" \
    "$(printf '%.0f ' ${runs[$cond,1]})" "$(printf '%.0f ' ${runs[$cond,2]})"
done
