#!/usr/bin/env bash
# Batched decode on the GPU, minfer against llama.cpp's llama-batched-bench on the same files, in the same
# run: for each PRESET:TYPE (written with minfer-synth when missing), B sequences prefill P tokens each,
# then N steps decode one token per sequence (llama-batched-bench's -npp P -ntg N -npl B; S_TG = B*N /
# t_tg). Prints one markdown table per model: S_PP and S_TG of both engines per B, and the S_TG ratio.
# Usage: BIN=build LLAMA=/tmp/llamacpp-cuda/bin bench/cuda-batched-compare.sh [PRESET:TYPE ...]
# (default qwen2.5-0.5b:Q4_K_M qwen2.5-7b:Q4_K_M). Env: B (default 1,8,32,64), P / N (default 128 / 128),
# DIR (scratch folder for the models, default /tmp/minfer-bench), MINFER_FLAGS (extra flags for minfer
# bench, e.g. --deterministic).
set -euo pipefail
BIN=${BIN:-build} LLAMA=${LLAMA:-/tmp/llamacpp-cuda/bin} B=${B:-1,8,32,64} P=${P:-128} N=${N:-128}
DIR=${DIR:-/tmp/minfer-bench}
# llama.cpp loads only files with a tokenizer: the synthetic models take the embedded model's.
VOCAB=${VOCAB:-$(cd "$(dirname "$0")/.." && pwd)/models/qwen2-mini-Q8_0.gguf}
mkdir -p "$DIR"
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(qwen2.5-0.5b:Q4_K_M qwen2.5-7b:Q4_K_M)
max_b=$(tr , '\n' <<< "$B" | sort -n | tail -1)
ctx=$((max_b * (P + N) + 256))
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
for m in "${models[@]}"; do
  preset=${m%%:*} type=${m##*:} file="$DIR/$preset-$type.gguf"
  [ -f "$file" ] || "$BIN/minfer-synth" --vocab "$VOCAB" "$preset" "$type" "$file" >/dev/null
  ours=$("$BIN/minfer" bench -m "$file" --device cuda --parallel "$B" -p "$P" -n "$N" \
    ${MINFER_FLAGS:-} --json)
  theirs=$("$LLAMA/llama-batched-bench" -m "$file" -ngl 99 -c "$ctx" -b 2048 -ub 512 -npp "$P" -ntg "$N" \
    -npl "$B" --output-format jsonl 2>/dev/null | grep '^{')
  python3 - "$preset" "$type" "$ours" "$theirs" <<'PY'
import json, sys
preset, typ = sys.argv[1], sys.argv[2]
ours = {r["pl"]: r for r in map(json.loads, sys.argv[3].split("\n")) if r}
theirs = {r["pl"]: r for r in map(json.loads, sys.argv[4].split("\n")) if r}
print(f"\n{preset} {typ}\n")
print("| B | minfer S_PP | llama.cpp S_PP | minfer S_TG | llama.cpp S_TG | S_TG ratio |")
print("| ---: | ---: | ---: | ---: | ---: | ---: |")
for b in sorted(ours):
    o, t = ours[b], theirs.get(b, {})
    ratio = o["speed_tg"] / t["speed_tg"] if t else float("nan")
    print(f"| {b} | {o['speed_pp']:.0f} | {t.get('speed_pp', float('nan')):.0f} | {o['speed_tg']:.0f} "
          f"| {t.get('speed_tg', float('nan')):.0f} | {ratio:.2f} |")
PY
done
