#!/bin/bash
# batched-compare.sh MODEL.gguf [B,B,...]: batched decode throughput of minfer vs llama.cpp's server.
# For each B (default 1,8,32,64), on the same file and thread count, runs
#   minfer bench --parallel B -p P -n N --json     (llama-batched-bench's meaning: S_TG = B*N / t_tg)
# then Debian's llama-server with B slots and a unified KV cache of B*(P+N+64) tokens, loaded by
#   serve-load --concurrency B --requests B --max-tokens N --prompt-tokens P
# (B distinct prompts of about P tokens at once, every one generating N tokens). The two alternate per B
# so that both see the same machine load. Prints one table per B: minfer S_TG, minfer B*N/T, the server's
# aggregate generated tok/s, and the ratios. serve-load's rate is generated tokens over the wall time of the
# whole load, prefill and HTTP included: minfer's B*N/T (T = t_pp + t_tg) is the like-for-like figure,
# S_TG the decode-only one.
# Environment: T threads (default 2), P prompt tokens (default 128), N generated tokens (default 128),
# BUILD (default build-perf), MINFER (default $BUILD/minfer), LLAMACPP (default ../shared/tools/llamacpp),
# SERVE_LOAD (default ../shared/tools/serve-load).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
T=${T:-2}
P=${P:-128}
N=${N:-128}
BUILD=${BUILD:-$root/build-perf}
MINFER=${MINFER:-$BUILD/minfer}
LLAMACPP=${LLAMACPP:-$root/../shared/tools/llamacpp}
SERVE_LOAD=${SERVE_LOAD:-$root/../shared/tools/serve-load}
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: batched-compare.sh MODEL.gguf [B,B,...]" >&2
  exit 2
fi
model=$1
IFS=, read -r -a batches <<< "${2:-1,8,32,64}"
tmp=$(mktemp -d)
server=""
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Starts llama-server with $1 slots on a free loopback port, waits for /health; sets $server and $port.
start_server() {
  port=$(free_port)
  "$LLAMACPP" llama-server -m "$model" -np "$1" -kvu -c $(($1 * (P + N + 64))) -t "$T" -tb "$T" \
    --host 127.0.0.1 --port "$port" --no-webui > "$tmp/server-$1.log" 2>&1 &
  server=$!
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$port/health" > /dev/null 2>&1 && return 0
    kill -0 "$server" 2>/dev/null || break
    sleep 0.5
  done
  echo "llama-server with -np $1 did not become healthy; its log:" >&2
  tail -20 "$tmp/server-$1.log" >&2
  exit 1
}

stop_server() {
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  server=""
}

for b in "${batches[@]}"; do
  echo "B=$b: minfer" >&2
  "$MINFER" bench -m "$model" --parallel "$b" -p "$P" -n "$N" -t "$T" --json >> "$tmp/minfer.jsonl"
  echo "B=$b: llama-server" >&2
  start_server "$b"
  # An untimed round first at B, as minfer's warm-up pass (its full prefill, then 2 tokens): pages in the
  # weights and sizes the server's buffers. --offset gives it other prompts than the timed round's.
  "$SERVE_LOAD" --url "http://127.0.0.1:$port" --concurrency "$b" --requests "$b" --max-tokens 2 \
    --prompt-tokens "$P" --offset 50000 --json > /dev/null
  "$SERVE_LOAD" --url "http://127.0.0.1:$port" --concurrency "$b" --requests "$b" --max-tokens "$N" \
    --prompt-tokens "$P" --json >> "$tmp/server.jsonl"
  stop_server
done

python3 - "$tmp" "$model" "$T" "$P" "$N" <<'PY'
import json, os, sys
tmp, model, threads, pp, tg = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
ours = [json.loads(line) for line in open(f"{tmp}/minfer.jsonl")]
theirs = [json.loads(line)[0] for line in open(f"{tmp}/server.jsonl")]
print(f"{os.path.basename(model)}, threads {threads}, P {pp}, N {tg}\n")
print("| B | minfer S_TG t/s | minfer B*N/T t/s | llama-server gen t/s | server ok/req "
      "| S_TG / server | (B*N/T) / server |")
print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for o, s in zip(ours, theirs):
    gen = o["pl"] * o["tg"] / o["t"] if o["t"] > 0 else 0.0
    ref = s["gen_tok_s"]
    r1, r2 = (f"{o['speed_tg'] / ref:.2f}", f"{gen / ref:.2f}") if ref > 0 else ("n/a", "n/a")
    print(f"| {o['pl']} | {o['speed_tg']:.2f} | {gen:.2f} | {ref:.2f} | {s['ok']}/{s['requests']} | {r1} | {r2} |")
    if s["errors"]:
        print(f"llama-server, B={o['pl']}: {s['errors']} failed requests, first: {s['first_error']}",
              file=sys.stderr)
PY
