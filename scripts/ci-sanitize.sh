#!/usr/bin/env bash
# CI's sanitizer jobs (issue 32), CUDA off, with clang:
#   asan: build-asan/ with ASan + UBSan, the whole CPU test suite (any report fails the test);
#   tsan: build-tsan/ with ThreadSanitizer, the thread-pool and scheduler tests and the server's streaming
#         tests (the engine loop under concurrent streams and cancellations).
# scripts/ci-sanitize.sh [asan|tsan|all] (default all).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(cd .. && pwd)}"
jobs=${MINFER_JOBS:-$(nproc)}

configure() {  # configure DIR SANITIZERS
  CC=clang CXX=clang++ cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only -DNDEBUG" -DMINFER_CUDA=OFF \
    -DMINFER_BENCH=OFF -DMINFER_SANITIZE="$2" > /dev/null
}

asan() {
  configure build-asan address,undefined
  cmake --build build-asan -j "$jobs"
  ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:abort_on_error=1 \
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j "$jobs" --timeout 900
}

# TSan reports a race between two of cpp-httplib's worker threads inside the library (memcmp on a block
# another worker allocated; no frame of ours): Debian's libcpp-httplib.so is not instrumented, so TSan
# does not see its synchronisation. Until it is built from source with TSan, the one test that drives 32
# connections at once is left out here (it runs in the ASan and plain suites).
tsan_skip='^Streaming\.ThirtyTwoConcurrentGreedyStreamsEqualEachAlone$'

tsan() {
  configure build-tsan thread
  cmake --build build-tsan -j "$jobs" --target test_cpu test_engine test_server
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    ctest --test-dir build-tsan --output-on-failure -j "$jobs" --timeout 900 \
    -R '^(ThreadPool|Scheduler|Streaming)\.' -E "$tsan_skip"
}

case ${1:-all} in
  asan) asan ;;
  tsan) tsan ;;
  all) asan && tsan ;;
  *) echo "usage: scripts/ci-sanitize.sh [asan|tsan|all]" >&2; exit 2 ;;
esac
