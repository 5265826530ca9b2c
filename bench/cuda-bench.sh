#!/usr/bin/env bash
# GPU benchmarks, meant for a machine with an NVIDIA GPU and no llama.cpp (the device machine): writes
# full-size random models with minfer-synth, then runs `minfer bench --device cuda` on each and prints
# one markdown table, then the per-kernel-class matvec bandwidth (bench_cuda_matvec, when built with
# -DMINFER_BENCH=ON). Usage: BIN=build bench/cuda-bench.sh [PRESET:TYPE ...]
# (default: qwen2.5-0.5b:Q4_K_M qwen2.5-0.5b:Q8_0 qwen2.5-0.5b:F16 qwen2.5-7b:Q4_K_M)
# Env: BIN (folder holding minfer and minfer-synth, default build), R (repetitions, default 3),
#      P / N (prompt and generated tokens, default 512 / 128), D (context depth before each test, default 0),
#      DIR (scratch folder, default /tmp/minfer-bench).
set -euo pipefail
BIN=${BIN:-build} R=${R:-3} P=${P:-512} N=${N:-128} D=${D:-0} DIR=${DIR:-/tmp/minfer-bench}
mkdir -p "$DIR"
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(qwen2.5-0.5b:Q4_K_M qwen2.5-0.5b:Q8_0 qwen2.5-0.5b:F16 qwen2.5-7b:Q4_K_M)
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader || true
at=""
[ "$D" -eq 0 ] || at=" @ d$D"
echo "| model | type | size GiB | pp$P$at tok/s | tg$N$at tok/s | decode GB/s (weights) |"
echo "| --- | --- | ---: | ---: | ---: | ---: |"
for m in "${models[@]}"; do
  preset=${m%%:*} type=${m##*:} file="$DIR/$preset-$type.gguf"
  [ -f "$file" ] || "$BIN/minfer-synth" "$preset" "$type" "$file" >/dev/null
  json=$("$BIN/minfer" bench -m "$file" --device cuda -p "$P" -n "$N" -d "$D" -r "$R" --json)
  bytes=$(stat -c %s "$file")
  python3 - "$preset" "$type" "$bytes" "$json" "$P" "$N" <<'PY'
import json, sys
preset, typ, size, js, p, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4]), sys.argv[5], sys.argv[6]
pp, tg = js[f"pp{p}"], js[f"tg{n}"]
# Decode reads every weight once per token (tied embeddings: the table is read as the lm_head).
print(f"| {preset} | {typ} | {size / 2**30:.2f} | {pp['mean']:.0f} ± {pp['sd']:.0f} | {tg['mean']:.0f} ± {tg['sd']:.0f} "
      f"| {tg['mean'] * size / 1e9:.0f} |")
PY
done
if [ -x "$BIN/bench_cuda_matvec" ]; then echo; "$BIN/bench_cuda_matvec"; fi
