#!/bin/bash
# tokenize-compare.sh LLAMA_MODEL.gguf: tokenizer throughput (MB/s) of minfer vs llama.cpp on the same
# ~1 MB of English (Debian copyright/license texts) and code (this repository's sources), same vocabulary.
# The Debian llama.cpp build ships no llama-tokenize, so llama.cpp is timed through llama-server's
# /tokenize endpoint on LLAMA_MODEL, a model carrying the vocabulary (e.g. one from
# `minfer-synth ... --vocab VOCAB`); minfer has no throughput mode, so it is timed as `minfer tokenize`
# processes. The text goes in chunks of <=100 kB (a command-line argument is limited to 128 kB); both
# engines get the same chunks, and each engine's per-call overhead (a process start with vocabulary load
# for minfer, an HTTP round trip for llama-server), measured on a one-byte input, is subtracted.
# Environment: VOCAB (default ../shared/models/qwen-vocab.gguf), MINFER (default build-perf/minfer),
# LLAMACPP (default ../shared/tools/llamacpp), REPS passes over the text (default 3, best is kept).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
VOCAB=${VOCAB:-$root/../shared/models/qwen-vocab.gguf}
MINFER=${MINFER:-$root/build-perf/minfer}
LLAMACPP=${LLAMACPP:-$root/../shared/tools/llamacpp}
REPS=${REPS:-3}
PORT=${PORT:-18181}
model=${1:?usage: tokenize-compare.sh LLAMA_MODEL.gguf}
tmp=$(mktemp -d)
server=
cleanup() {
  [ -z "$server" ] || kill "$server" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# The text: 512 kB of English, then 512 kB of code, cut into line-aligned chunks.
{ cat /usr/share/common-licenses/* /usr/share/doc/*/copyright 2>/dev/null | head -c 524288 || true
  find "$root/src" "$root/app" "$root/tests" -name '*.cpp' -o -name '*.h' | sort | xargs cat 2>/dev/null | head -c 524288 || true
} | iconv -c -f utf-8 -t utf-8 > "$tmp/text"
split -C 100000 "$tmp/text" "$tmp/chunk."
printf x > "$tmp/tiny"
chunks=("$tmp"/chunk.??)
for c in "${chunks[@]}" "$tmp/tiny"; do jq -Rs '{content: .}' < "$c" > "$c.json"; done
n_chunks=${#chunks[@]}
bytes=$(stat -c %s "$tmp/text")

minfer_call() { "$MINFER" tokenize -m "$VOCAB" --prompt="$(cat "$1")" > /dev/null; }
llama_call() {
  curl -sS --fail-with-body -o /dev/null -H 'Content-Type: application/json' --data-binary "@$1.json" \
    "http://127.0.0.1:$PORT/tokenize"
}
# Best-of-REPS seconds for one pass of `$1` over all chunks, minus n_chunks calls on the tiny input.
time_pass() {
  python3 - "$1" "$REPS" "$n_chunks" "$tmp" <<'PY'
import glob, subprocess, sys, time
call, reps, n, tmp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
chunks = sorted(glob.glob(f"{tmp}/chunk.??"))
def run(files):
    t0 = time.perf_counter()
    for f in files:
        subprocess.run(["bash", "-c", f'source {tmp}/fns; {call} "$0"', f], check=True)
    return time.perf_counter() - t0
overhead = min(run([f"{tmp}/tiny"] * n) for _ in range(reps))
full = min(run(chunks) for _ in range(reps))
print(f"{full - overhead:.4f} {full:.4f} {overhead:.4f}")
PY
}
{ declare -f minfer_call llama_call; echo "MINFER='$MINFER' VOCAB='$VOCAB' PORT=$PORT"; } > "$tmp/fns"

"$LLAMACPP" llama-server -m "$model" --port "$PORT" -t 2 -c 512 > "$tmp/server.log" 2>&1 &
server=$!
until curl -sf "http://127.0.0.1:$PORT/health" > /dev/null; do
  kill -0 "$server" 2>/dev/null || { cat "$tmp/server.log" >&2; exit 1; }
  sleep 0.5
done
read -r m_net m_full m_empty < <(time_pass minfer_call)
read -r l_net l_full l_empty < <(time_pass llama_call)
python3 - "$bytes" "$n_chunks" "$m_net" "$m_full" "$m_empty" "$l_net" "$l_full" "$l_empty" <<'PY'
import sys
b, n = int(sys.argv[1]), sys.argv[2]
m, l = [float(x) for x in sys.argv[3:6]], [float(x) for x in sys.argv[6:9]]
print(f"text {b / 1e6:.2f} MB in {n} chunks; best of passes, per-call overhead subtracted\n")
print("| engine | pass s | overhead s | tokenize s | MB/s |\n| --- | ---: | ---: | ---: | ---: |")
for name, (net, full, empty) in (("minfer", m), ("llama.cpp (llama-server /tokenize)", l)):
    print(f"| {name} | {full:.3f} | {empty:.3f} | {net:.3f} | {b / 1e6 / net:.2f} |")
print(f"\nratio minfer/llama.cpp (MB/s): {l[0] / m[0]:.2f}")
PY
