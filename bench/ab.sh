#!/usr/bin/env bash
# ab.sh A B MODEL.gguf...: decode (tgN) speed of two minfer binaries on the same files, interleaved.
# Each round runs `A bench` then `B bench` on every model (-p 0 -n N -r R), so both binaries see the same
# machine state; a round's result is its mean tok/s. Prints one markdown table: model | A per round |
# B per round | B / A (ratio of the round means' medians). Machines differ by a few percent between calls,
# so only pairs measured in one run compare.
# Environment: ROUNDS (default 3), R (repetitions per bench, default 3), N (tokens, default 128),
# DEVICE (cpu or cuda, default cuda), T (threads, default: minfer's), ENV_A / ENV_B (extra environment
# for A / B, e.g. ENV_B="MINFER_NO_TILES=1" to compare a switch on one binary).
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: ab.sh A B MODEL.gguf..." >&2; exit 2; }
a=$1 b=$2
shift 2
ROUNDS=${ROUNDS:-3} R=${R:-3} N=${N:-128} DEVICE=${DEVICE:-cuda} T=${T:-0}
for bin in "$a" "$b"; do [ -x "$bin" ] || { echo "ab.sh: $bin is not executable" >&2; exit 2; }; done
for m in "$@"; do [ -f "$m" ] || { echo "ab.sh: no model $m" >&2; exit 2; }; done

# tok/s of one bench run: the "mean" of its JSON line.
rate() {
  local env_vars=$1 bin=$2 model=$3
  env $env_vars "$bin" bench -m "$model" --device "$DEVICE" -t "$T" -p 0 -n "$N" -r "$R" --json |
    python3 -c 'import json, sys; print(json.loads(sys.stdin.readlines()[-1])[sys.argv[1]]["mean"])' "tg$N"
}

declare -A ra rb
for ((round = 0; round < ROUNDS; ++round)); do
  for m in "$@"; do
    ra[$m]+="$(rate "${ENV_A:-}" "$a" "$m") "
    rb[$m]+="$(rate "${ENV_B:-}" "$b" "$m") "
  done
done

echo "| model | A tg$N tok/s | B tg$N tok/s | B / A |"
echo "| --- | ---: | ---: | ---: |"
for m in "$@"; do
  python3 - "$(basename "$m")" "${ra[$m]}" "${rb[$m]}" <<'PY'
import statistics, sys
name, a, b = sys.argv[1], [float(v) for v in sys.argv[2].split()], [float(v) for v in sys.argv[3].split()]
fmt = lambda xs: " / ".join(f"{x:,.1f}" for x in xs)
print(f"| {name} | {fmt(a)} | {fmt(b)} | {statistics.median(b) / statistics.median(a):.3f} |")
PY
done
