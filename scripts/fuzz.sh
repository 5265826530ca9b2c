#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time: scripts/fuzz.sh gguf|tokenizer|jinja|request|grammar SECONDS [ARGS...]
# Builds build-fuzz/ with clang (ASan + UBSan + libFuzzer; scripts/setup-clang.sh installs it) on first
# use, or uses the build MINFER_FUZZ_BUILD names (CI: build-asan/, configured with MINFER_FUZZ=ON). New coverage goes to
# build-fuzz/corpus/TARGET (seeded from tests/fuzz/corpus/TARGET); a crash, leak or timeout is written
# to build-fuzz/findings/TARGET: minimise it (-minimize_crash=1), fix the bug, and check the input in
# under tests/fuzz/regressions/TARGET, which ctest replays (fuzz_replay_TARGET) in every build.
set -euo pipefail
target=${1:?usage: scripts/fuzz.sh gguf|tokenizer|jinja|request|grammar SECONDS [libFuzzer args...]}
seconds=${2:?usage: scripts/fuzz.sh gguf|tokenizer|jinja|request|grammar SECONDS [libFuzzer args...]}
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MINFER_FUZZ_BUILD:-$root/build-fuzz}
"$root/scripts/setup-clang.sh"
if [ ! -f "$build/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DMINFER_FUZZ=ON -DMINFER_SANITIZE=address,undefined -DMINFER_TESTS=OFF -DMINFER_CUDA=OFF > /dev/null
fi
cmake --build "$build" --target "fuzz_$target" -j "${MINFER_FUZZ_JOBS:-2}"
mkdir -p "$build/corpus/$target" "$build/findings/$target"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
# Inputs of real size (models' templates are a few KiB); the regression corpus (large, slow hostile
# inputs) is replayed by ctest, not mutated here.
case $target in gguf) max_len=65536 ;; *) max_len=8192 ;; esac
exec "$build/tests/fuzz/fuzz_$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -max_len="$max_len" -print_final_stats=1 -artifact_prefix="$build/findings/$target/" "$@" \
  "$build/corpus/$target" "$root/tests/fuzz/corpus/$target"
