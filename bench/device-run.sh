#!/usr/bin/env bash
# On the GPU machine, from the repository root (the device tool's command: `bash bench/device-run.sh
# SECTION...`, carry ["carry"]): unpacks bench/device-pack.sh's archives into W (default /tmp/w) and runs
# the sections in order, each under a timeout that also keeps the whole call within BUDGET seconds
# (default 540, under the tool's 600-second limit). Everything goes to $OUT/log.
# Sections:
#   tests    every bin/test_cuda* (FILTER: a gtest filter; TEST_LIMIT seconds each, default 220),
#            summary and failures; the full logs in $OUT
#   engine   every bin/test_engine*'s CUDA goldens, batch, session and invariance tests (needs DATA=1's
#            archive)
#   mma      every bin/bench_cuda_mma* at 20 iterations, 32 and 64 columns
#   matvec   every bin/bench_cuda_matvec* at 20 iterations, the int8 rows (one token's products)
#   batched  every bin/minfer* : bench --parallel $B (default 24,32,64) -p 128 -n 128 on each synthetic
#            PRESET:TYPE of BATCH_MODELS (default qwen2.5-7b:Q4_K_M; ROUNDS rounds, default 2, interleaved);
#            with SWITCH set, bin/minfer runs again with that variable 1 (the others as they are); BASE
#            (VAR=VALUE) is set for the runs but SWITCH's; FLAGS are added to every bench (e.g.
#            --deterministic)
#   timeline bench/cuda-timeline.sh with B=${TL_B:-8} on TL_MODEL (default qwen2.5-0.5b:Q4_K_M); needs
#            libminfer_cuda_timeline.so packed beside bin/minfer
#   peer     nothing: starts llama.cpp's build (carry/peer) for compare or serve in a later call
#   compare  bench/cuda-batched-compare.sh (MODELS, default qwen2.5-7b:Q4_K_M) against llama.cpp, whose
#            build from carry/peer (../shared/tools/llamacpp-src; bench/peer-trim.sh shrinks it) starts
#            with the call
#   prefill  every bin/minfer* : bench -p P -n 0 for each P of PP (default 512,4096) on each BATCH_MODELS
#            file, with SWITCH (default MINFER_NO_HALF_WEIGHTS: the GEMM's half weight copies) 0 and 1
#   peerpp   llama-bench -p P -n 0 -r 3 -ngl 99 of compare's build for each P of PP on each BATCH_MODELS file
#   serve    bench/serve-compare.sh on SERVE_MODEL (default qwen2.5-7b:Q4_K_M) with bin/minfer and the
#            llama-server of compare's build, NP 64, -c CTX (default 65536), 128-word prompts, 128
#            generated, CONC 8,64 (needs carry/serve-load, a copy of ../shared/tools/serve-load)
# VARIANT (a glob, default *) picks the branch builds packed beside main's as bin/NAME_VARIANT: tests,
# engine and matvec run bin/NAME$VARIANT (VARIANT= : main's alone; VARIANT=_all: the combined build's
# alone), batched and prefill run bin/minfer and bin/minfer$VARIANT.
# The synthetic files take VOCAB's tokenizer (default the embedded mini's; the server's text needs a real
# one: carry ../shared/models/qwen-vocab.gguf and set VOCAB=carry/qwen-vocab.gguf), written once per
# machine and vocabulary under /tmp/minfer-bench/VOCAB-NAME/ (compare's files too). compare and serve run
# bin/minfer: AS_MINFER=NAME makes it a copy of bin/NAME after unpacking (every call unpacks again).
set -uo pipefail
R=$PWD W=${W:-/tmp/w} BUDGET=${BUDGET:-540} T0=$(date +%s)
exec >"$OUT/log" 2>&1
lim() { local l=$((T0 + BUDGET - $(date +%s))); echo $((l < $1 ? (l > 1 ? l : 1) : $1)); }
mkdir -p "$W" && cd "$W" || exit 1
tar xJf "$R/carry/pack.tar.xz"
[ -f "$R/carry/data.tar.xz" ] && tar xJf "$R/carry/data.tar.xz"
[ -n "${AS_MINFER:-}" ] && cp "bin/$AS_MINFER" bin/minfer
# The test binaries find the repository's minis through the source path they were built from (this
# machine's checkout, /work/main): point it at the working tree here.
[ -e /work/main ] || { mkdir -p /work && ln -sfn "$R" /work/main; }
export LD_LIBRARY_PATH=$W/lib:/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
export PATH=/usr/local/cuda/bin:$PATH
VOCAB=$R/${VOCAB:-models/qwen2-mini-Q8_0.gguf}
D=/tmp/minfer-bench/$(basename "$VOCAB" .gguf)
mkdir -p "$D"
# llama.cpp's build starts with a call that compares or serves, unless an earlier call on this machine
# started it (the section `peer` starts it alone, for a later call).
if [[ " $* " =~ " "(compare|serve|peer|peerpp)" " && -d $R/carry/peer && ! -e /tmp/llamacpp-cuda ]]; then
  setsid nice -n 10 bash "$R/carry/peer/build-llamacpp.sh" >/dev/null 2>&1 &
fi
peer_built() {
  while ! grep -q "build rc" /tmp/llamacpp-cuda/build.log 2>/dev/null && [ "$(lim 999)" -gt 150 ]; do sleep 5; done
  tail -1 /tmp/llamacpp-cuda/build.log
}
# The file of PRESET:TYPE $1, written with minfer-synth when missing.
synth() {
  local f=$D/${1%%:*}-${1##*:}.gguf
  [ -f "$f" ] || bin/minfer-synth --vocab "$VOCAB" "${1%%:*}" "${1##*:}" "$f" >/dev/null
  echo "$f"
}
# bin/minfer, then the variants VARIANT picks (no minfer-synth), each once.
variants() {
  local b
  echo bin/minfer
  for b in bin/minfer${VARIANT-*}; do [[ $b == bin/minfer || $b == bin/minfer-* ]] || echo "$b"; done
}
PP=${PP:-512,4096}
for section in "$@"; do
  echo "== $section $(date +%T)"
  case $section in
    tests)
      for b in bin/test_cuda${VARIANT-*}; do
        echo "-- $b"
        timeout "$(lim ${TEST_LIMIT:-220})" "$b" --gtest_filter="${FILTER:-*}" >"$OUT/${b#bin/}.txt" 2>&1
        tail -2 "$OUT/${b#bin/}.txt"; grep -E "FAILED|Failure" "$OUT/${b#bin/}.txt" | head -20
      done ;;
    engine)
      for b in bin/test_engine${VARIANT-*}; do
        echo "-- $b"
        MINFER_TEST_DATA=$W/shared MINFER_TEST_DEVICE=cuda timeout "$(lim 120)" "$b" \
          --gtest_filter='CudaSession.*:CudaBatch.*:CudaVsCpu.*:CudaMoe.*:*Golden*:BatchInvariance.*' 2>&1 |
          grep -E "^\[  PASSED|^\[  FAILED|Failure" | head -20
      done ;;
    mma)
      for b in bin/bench_cuda_mma*; do echo "-- $b"; timeout "$(lim 60)" "$b" 20 32,64; done ;;
    matvec)
      for b in bin/bench_cuda_matvec${VARIANT-*}; do
        echo "-- $b"; timeout "$(lim 90)" "$b" 20 | grep -E "copy|shape|/i|/o"
      done ;;
    batched)
      for m in ${BATCH_MODELS:-qwen2.5-7b:Q4_K_M}; do
        f=$(synth "$m")
        for ((i = 0; i < ${ROUNDS:-2}; ++i)); do
          for b in $(variants) ${SWITCH:+"$SWITCH=1 bin/minfer"}; do
            [ -x "${b#* }" ] || continue
            e=${BASE:-}; [[ $b == *" "* ]] && e=${b% *}
            echo "-- $m $b: $(env $e timeout "$(lim 60)" "${b#* }" bench -m "$f" --device cuda \
              --parallel "${B:-24,32,64}" -p 128 -n 128 ${FLAGS:-} --json | python3 -c 'import json, sys
rows = map(json.loads, sys.stdin)
print(" ".join("B=%d S_PP %.0f S_TG %.0f" % (r["pl"], r["speed_pp"], r["speed_tg"]) for r in rows))')"
          done
        done
      done ;;
    timeline)
      f=$(synth "${TL_MODEL:-qwen2.5-0.5b:Q4_K_M}")
      B=${TL_B:-8} BIN=bin TOP=${TOP:-24} timeout "$(lim 120)" bash "$R/bench/cuda-timeline.sh" "$f" 32 ;;
    peer) ;;
    compare)
      peer_built
      BIN=bin DIR=$D VOCAB=$VOCAB timeout "$(lim 300)" bash "$R/bench/cuda-batched-compare.sh" \
        ${MODELS:-qwen2.5-7b:Q4_K_M} ;;
    prefill)
      for m in ${BATCH_MODELS:-qwen2.5-7b:Q4_K_M}; do
        f=$(synth "$m")
        for b in $(variants); do
          [ -x "$b" ] || continue
          for off in 0 1; do
            for p in ${PP//,/ }; do
              echo "-- $m $b ${SWITCH:-MINFER_NO_HALF_WEIGHTS}=$off: $(env "${SWITCH:-MINFER_NO_HALF_WEIGHTS}=$off" \
                timeout "$(lim 60)" "$b" bench -m "$f" \
                --device cuda -p "$p" -n 0 -r 3 --json | python3 -c 'import json, sys
print(" ".join("%s %.0f" % (k, v["mean"]) for k, v in json.load(sys.stdin).items() if k.startswith("pp")))')"
            done
          done
        done
      done ;;
    peerpp)
      peer_built
      for m in ${BATCH_MODELS:-qwen2.5-7b:Q4_K_M}; do
        f=$(synth "$m")
        echo "-- $m llama-bench"
        timeout "$(lim 200)" /tmp/llamacpp-cuda/bin/llama-bench -m "$f" -p "$PP" -n 0 -r 3 -ngl 99 2>&1 | grep -E "pp|error"
      done ;;
    serve)
      f=$(synth "${SERVE_MODEL:-qwen2.5-7b:Q4_K_M}")
      peer_built
      printf '#!/bin/sh\nt=$1; shift; exec /tmp/llamacpp-cuda/bin/$t "$@"\n' >"$W/llamacpp" && chmod +x "$W/llamacpp"
      NP=64 CTX=${CTX:-65536} CONC=${CONC:-8,64} REQ=${REQ:-128} PROMPT=128 GEN=128 DEVICE=cuda T=4 \
        MINFER=$W/bin/minfer LLAMACPP=$W/llamacpp LOAD=$R/carry/serve-load \
        timeout "$(lim 400)" bash "$R/bench/serve-compare.sh" "$f" ;;
    *) echo "device-run.sh: unknown section $section" ;;
  esac
done
echo "== done $(date +%T)"
