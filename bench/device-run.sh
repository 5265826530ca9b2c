#!/usr/bin/env bash
# On the GPU machine, from the repository root (the device tool's command: `bash bench/device-run.sh
# SECTION...`, carry ["carry"]): unpacks bench/device-pack.sh's archives into W (default /tmp/w) and runs
# the sections in order, each under a timeout that also keeps the whole call within BUDGET seconds
# (default 540, under the tool's 600-second limit). Everything goes to $OUT/log.
# Sections:
#   tests    bin/test_cuda (FILTER: a gtest filter), summary and failures; the full log in $OUT
#   engine   bin/test_engine's CUDA goldens, batch, session and invariance tests (needs DATA=1's archive)
#   mma      every bin/bench_cuda_mma* at 20 iterations, 32 and 64 columns
#   batched  every bin/minfer* : bench --parallel $B (default 24,32,64) -p 128 -n 128 on the synthetic
#            qwen2.5-7b Q4_K_M (ROUNDS rounds, default 2, interleaved)
#   compare  bench/cuda-batched-compare.sh (MODELS, default qwen2.5-7b:Q4_K_M) against llama.cpp, whose
#            build from carry/peer (../shared/tools/llamacpp-src) starts with the call
set -uo pipefail
R=$PWD W=${W:-/tmp/w} BUDGET=${BUDGET:-540} T0=$(date +%s)
exec >"$OUT/log" 2>&1
lim() { local l=$((T0 + BUDGET - $(date +%s))); echo $((l < $1 ? (l > 1 ? l : 1) : $1)); }
mkdir -p "$W" && cd "$W" || exit 1
tar xJf "$R/carry/pack.tar.xz"
[ -f "$R/carry/data.tar.xz" ] && tar xJf "$R/carry/data.tar.xz"
export LD_LIBRARY_PATH=$W/lib:/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
export PATH=/usr/local/cuda/bin:$PATH
D=/tmp/minfer-bench M7=/tmp/minfer-bench/qwen2.5-7b-Q4_K_M.gguf
mkdir -p $D
[[ " $* " == *" compare "* && -d $R/carry/peer ]] && setsid nice -n 10 bash "$R/carry/peer/build-llamacpp.sh" >/dev/null 2>&1 &
synth7() { [ -f $M7 ] || bin/minfer-synth --vocab "$R/models/qwen2-mini-Q8_0.gguf" qwen2.5-7b Q4_K_M $M7 >/dev/null; }
for section in "$@"; do
  echo "== $section $(date +%T)"
  case $section in
    tests)
      timeout "$(lim 220)" bin/test_cuda --gtest_filter="${FILTER:-*}" >"$OUT/test_cuda.txt" 2>&1
      tail -2 "$OUT/test_cuda.txt"; grep -E "FAILED|Failure" "$OUT/test_cuda.txt" | head -20 ;;
    engine)
      MINFER_TEST_DATA=$W/shared MINFER_TEST_DEVICE=cuda timeout "$(lim 120)" bin/test_engine \
        --gtest_filter='CudaSession.*:CudaBatch.*:CudaVsCpu.*:*Golden*:BatchInvariance.*' 2>&1 |
        grep -E "^\[  PASSED|^\[  FAILED|Failure" | head -20 ;;
    mma)
      for b in bin/bench_cuda_mma*; do echo "-- $b"; timeout "$(lim 60)" "$b" 20 32,64; done ;;
    batched)
      synth7
      for ((i = 0; i < ${ROUNDS:-2}; ++i)); do
        for b in bin/minfer bin/minfer_*; do
          [ -x "$b" ] || continue
          echo "-- $b: $(timeout "$(lim 60)" "$b" bench -m $M7 --device cuda --parallel "${B:-24,32,64}" -p 128 -n 128 \
            --json | python3 -c 'import json, sys; print(" ".join("B=%d S_TG %.0f" % (r["pl"], r["speed_tg"])
                                                         for r in map(json.loads, sys.stdin)))')"
        done
      done ;;
    compare)
      while ! grep -q "build rc" /tmp/llamacpp-cuda/build.log 2>/dev/null && [ "$(lim 999)" -gt 150 ]; do sleep 5; done
      tail -1 /tmp/llamacpp-cuda/build.log
      BIN=bin timeout "$(lim 300)" bash "$R/bench/cuda-batched-compare.sh" ${MODELS:-qwen2.5-7b:Q4_K_M} ;;
    *) echo "device-run.sh: unknown section $section" ;;
  esac
done
echo "== done $(date +%T)"
