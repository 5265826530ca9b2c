#!/usr/bin/env bash
# serve-compare.sh MODEL.gguf: `minfer serve` and llama.cpp's llama-server on the same file, the same
# threads and the same machine, in one run, under the same load harness (../shared/tools/serve-load:
# streamed completions, distinct prompts, greedy, ignore_eos). Both servers stay up (an idle one costs
# nothing) and the levels alternate, minfer then llama-server, so both see the same background load.
# Each server runs in its best configuration: minfer with -np NP over one shared KV cache; llama-server
# with -np NP and a unified KV cache (-kvu), and requests at top_k 1 (its default sampler chain is
# slower; serve-load --extra '{"top_k": 1}'), the same extra sent to both. Prints one markdown table per
# server and the aggregate tok/s ratio per level.
# Environment: T (threads, default 2), NP (sequences, default 8), CTX (KV tokens, default 4096),
# CONC (levels, default 1,4,8), REQ (requests per level, default 16), PROMPT (words, default 64),
# GEN (generated tokens, default 32), DEVICE (cpu or cuda, default cpu), MINFER (binary, default
# build/minfer), LLAMACPP (a command taking the tool name first, default ../shared/tools/llamacpp),
# LLAMA_ARGS (extra llama-server flags, e.g. "-ngl 99" for its CUDA build; with DEVICE=cuda the default),
# LOAD (default ../shared/tools/serve-load).
set -euo pipefail
[ $# -eq 1 ] && [ -f "$1" ] || { echo "usage: serve-compare.sh MODEL.gguf" >&2; exit 2; }
model=$1
here=$(cd "$(dirname "$0")/.." && pwd)
T=${T:-2} NP=${NP:-8} CTX=${CTX:-4096} CONC=${CONC:-1,4,8} REQ=${REQ:-16} PROMPT=${PROMPT:-64} GEN=${GEN:-32}
DEVICE=${DEVICE:-cpu}
if [ "$DEVICE" = cuda ]; then LLAMA_ARGS=${LLAMA_ARGS:--ngl 99}; else LLAMA_ARGS=${LLAMA_ARGS:-}; fi
MINFER=${MINFER:-$here/build/minfer}
LLAMACPP=${LLAMACPP:-$here/../shared/tools/llamacpp}
LOAD=${LOAD:-$here/../shared/tools/serve-load}
EXTRA='{"top_k": 1}'
[ -x "$MINFER" ] || { echo "serve-compare.sh: no minfer binary at $MINFER" >&2; exit 2; }

tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# Waits until GET $1/health answers 200 (at most 300 s) while process $2 lives; shows its log $3 if not.
wait_healthy() {
  for _ in $(seq 600); do
    curl -sf "$1/health" >/dev/null 2>&1 && return 0
    kill -0 "$2" 2>/dev/null || { echo "serve-compare.sh: the server for $1 exited:" >&2; tail -20 "$3" >&2; return 1; }
    sleep 0.5
  done
  echo "serve-compare.sh: $1 never became healthy:" >&2
  tail -20 "$3" >&2
  return 1
}

mport=$(free_port)
"$MINFER" serve -m "$model" --port "$mport" -t "$T" -np "$NP" -c "$CTX" --device "$DEVICE" >/dev/null 2>"$tmp/minfer.err" &
pids+=($!)
wait_healthy "http://127.0.0.1:$mport" "${pids[-1]}" "$tmp/minfer.err"
lport=$(free_port)
"$LLAMACPP" llama-server -m "$model" --port "$lport" -t "$T" -np "$NP" -c "$CTX" -kvu $LLAMA_ARGS >/dev/null 2>"$tmp/llama.err" &
pids+=($!)
wait_healthy "http://127.0.0.1:$lport" "${pids[-1]}" "$tmp/llama.err"

for c in ${CONC//,/ }; do
  for s in minfer:$mport llama-server:$lport; do
    "$LOAD" --url "http://127.0.0.1:${s#*:}" --concurrency "$c" --requests "$REQ" --max-tokens "$GEN" \
      --prompt-tokens "$PROMPT" --extra "$EXTRA" --json >"$tmp/${s%%:*}-$c.json"
  done
done

echo "model $(basename "$model"), device $DEVICE, llama-server ${LLAMA_ARGS:-(cpu)}, $T threads, -np $NP, -c $CTX, $PROMPT-word prompts, $GEN generated, $REQ requests per level"
echo
python3 - "$tmp" "$CONC" <<'PY'
import json, sys
tmp, levels = sys.argv[1], sys.argv[2].split(",")
rows = {s: [json.load(open(f"{tmp}/{s}-{c}.json"))[0] for c in levels] for s in ("minfer", "llama-server")}
for s, rs in rows.items():
    print(f"### {s}\n")
    print("| conc | ok/req | gen tok/s | req/s | TTFT p50 | TTFT p99 | ITL p50 | ITL p99 | first error |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rs:
        print(f"| {r['concurrency']} | {r['ok']}/{r['requests']} | {r['gen_tok_s']} | {r['req_s']} | "
              f"{r['ttft_p50_ms']} ms | {r['ttft_p99_ms']} ms | {r['itl_p50_ms']} ms | {r['itl_p99_ms']} ms | "
              f"{r['first_error'] or ''} |")
    print()
print("### minfer / llama-server\n")
print("| conc | minfer tok/s | llama-server tok/s | ratio | TTFT p50 minfer / llama-server |")
print("|---:|---:|---:|---:|---:|")
for x, y in zip(rows["minfer"], rows["llama-server"]):
    ratio = x["gen_tok_s"] / y["gen_tok_s"] if y["gen_tok_s"] else float("nan")
    print(f"| {x['concurrency']} | {x['gen_tok_s']} | {y['gen_tok_s']} | {ratio:.2f} | "
          f"{x['ttft_p50_ms']} / {y['ttft_p50_ms']} ms |")
PY
