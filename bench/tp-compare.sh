#!/usr/bin/env bash
# Tensor parallelism on the GPUs of one host, minfer against llama.cpp's multi-GPU modes on the same files,
# in the same run (issue 33): for each PRESET:TYPE (written with minfer-synth when missing) and each rank
# count N, single-stream decode (tg N_GEN after a P-token prompt) and S_TG at B sequences (batched decode,
# -npp P -ntg N_GEN -npl B) of `minfer bench --device cuda -tp N` and of llama-bench / llama-batched-bench
# with -sm layer and -sm row on the first N GPUs (CUDA_VISIBLE_DEVICES). Prints one markdown table per
# model: both engines per N, minfer's speed-up over its own N = 1, and the ratio to llama.cpp's best mode.
# Usage: BIN=build LLAMA=/tmp/llamacpp-cuda/bin bench/tp-compare.sh [PRESET:TYPE ...]
# (default llama3-70b:Q4_K_M qwen2.5-7b:Q4_K_M). Env: RANKS (default: 1,2,... up to the GPUs there are,
# by doubling), B (default 64), P / N_GEN (default 128 / 128), DIR (scratch folder for the models,
# default /tmp/minfer-bench). A model too large for one GPU (F16 70B) reports only the N that hold it.
set -euo pipefail
BIN=${BIN:-build} LLAMA=${LLAMA:-/tmp/llamacpp-cuda/bin} B=${B:-64} P=${P:-128} N_GEN=${N_GEN:-128}
DIR=${DIR:-/tmp/minfer-bench}
VOCAB=${VOCAB:-$(cd "$(dirname "$0")/.." && pwd)/models/qwen2-mini-Q8_0.gguf}
export NCCL_NVLS_ENABLE=0  # no NVLink multicast on shared hosts
gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
if [ -z "${RANKS:-}" ]; then
  RANKS=1
  for ((n = 2; n <= gpus; n *= 2)); do RANKS+=",$n"; done
fi
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(llama3-70b:Q4_K_M qwen2.5-7b:Q4_K_M)
ctx=$((B * (P + N_GEN) + 256))
mkdir -p "$DIR"
visible() { seq -s, 0 $(($1 - 1)); }
# One JSON line per measurement: {engine, mode, n, tg, stg} (NaN where the run failed, e.g. out of memory).
measure() {
  local file=$1 n=$2 tg stg
  tg=$("$BIN/minfer" bench -m "$file" --device cuda -tp "$n" -p "$P" -n "$N_GEN" -r 3 --json 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]]["mean"])' "tg$N_GEN" || echo NaN)
  stg=$("$BIN/minfer" bench -m "$file" --device cuda -tp "$n" --parallel "$B" -p "$P" -n "$N_GEN" --json \
    2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["speed_tg"])' || echo NaN)
  echo "{\"engine\": \"minfer\", \"mode\": \"tp\", \"n\": $n, \"tg\": $tg, \"stg\": $stg}"
  for sm in layer row; do
    tg=$(CUDA_VISIBLE_DEVICES=$(visible "$n") "$LLAMA/llama-bench" -m "$file" -ngl 99 -sm "$sm" -p 0 \
      -n "$N_GEN" -r 3 -o jsonl 2>/dev/null | python3 -c \
      'import json,sys; print([json.loads(l) for l in sys.stdin if l.startswith("{")][-1]["avg_ts"])' ||
      echo NaN)
    stg=$(CUDA_VISIBLE_DEVICES=$(visible "$n") "$LLAMA/llama-batched-bench" -m "$file" -ngl 99 -sm "$sm" \
      -c "$ctx" -b 2048 -ub 512 -npp "$P" -ntg "$N_GEN" -npl "$B" --output-format jsonl 2>/dev/null |
      python3 -c 'import json,sys; print([json.loads(l) for l in sys.stdin if l.startswith("{")][-1]["speed_tg"])' ||
      echo NaN)
    echo "{\"engine\": \"llama.cpp\", \"mode\": \"$sm\", \"n\": $n, \"tg\": $tg, \"stg\": $stg}"
  done
}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
for m in "${models[@]}"; do
  preset=${m%%:*} type=${m##*:} file="$DIR/$preset-$type.gguf"
  [ -f "$file" ] || "$BIN/minfer-synth" --vocab "$VOCAB" "$preset" "$type" "$file" >/dev/null
  rows=$(for n in ${RANKS//,/ }; do if [ "$n" -le "$gpus" ]; then measure "$file" "$n"; fi; done)
  python3 - "$preset" "$type" "$B" "$N_GEN" "$rows" <<'PY'
import json, math, sys
preset, typ, b, ngen = sys.argv[1:5]
rows = [json.loads(l) for l in sys.argv[5].splitlines() if l.strip()]
ours = {r["n"]: r for r in rows if r["engine"] == "minfer"}
base = ours.get(1, {})
print(f"\n{preset} {typ}: single stream tg{ngen} and S_TG at B = {b} (tok/s)\n")
print("| N | minfer tg | vs N=1 | llama.cpp layer / row tg | ratio | minfer S_TG | vs N=1 "
      "| llama.cpp layer / row S_TG | ratio |")
print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
nan = float("nan")
for n in sorted(ours):
    o = ours[n]
    ll = [r for r in rows if r["engine"] == "llama.cpp" and r["n"] == n]
    cells = []
    for key in ("tg", "stg"):
        best = max((r[key] for r in ll if not math.isnan(r[key])), default=nan)
        modes = " / ".join(f"{r[key]:.0f}" for r in ll)
        cells += [f"{o[key]:.0f}", f"{o[key] / base.get(key, nan):.2f}", modes, f"{o[key] / best:.2f}"]
    print(f"| {n} | " + " | ".join(cells) + " |")
PY
done
