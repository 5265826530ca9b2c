#!/usr/bin/env bash
# CI's sanitizer and fuzz jobs (issue 32), CUDA off, with clang (scripts/setup-clang.sh installs it):
#   asan: build-asan/ with ASan + UBSan and the libFuzzer targets (one -O1 build serves both), the
#         whole CPU test suite (any report fails the test; leaks on);
#   fuzz: each libFuzzer target of tests/fuzz for SECONDS (default 60) from build-asan/ (scripts/fuzz.sh);
#   tsan: build-tsan/ with ThreadSanitizer, only the test binaries it runs: the thread-pool and
#         scheduler tests and the server's streaming tests (the engine loop under concurrent streams
#         and cancellations).
# scripts/ci-sanitize.sh [asan|fuzz [SECONDS]|tsan|all] (default all: asan, fuzz, tsan). .ci/run calls `all 60`
# after the plain suite; each phase prints its wall time. Measured cold (no ccache) in a clean clone on the
# shared 2-core VM, MINFER_JOBS=2, 2026-12-02: asan build 523 s, asan suite 439 s (610 tests), fuzz 246 s,
# tsan build 215 s, tsan suite 8 s: 24 min; again from the committed script beside other builds and a
# fuzz run: 767, 606, 247, 537, 16 s (36 min wall, 42 min CPU).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(cd .. && pwd)}"
jobs=${MINFER_JOBS:-$(nproc)}
"$root/scripts/setup-clang.sh"

timed() {  # timed NAME COMMAND...: runs it, then prints how long it took (also when it failed)
  local name=$1 t0=$SECONDS rc=0
  shift
  "$@" || rc=$?
  echo "ci-sanitize: $name: $((SECONDS - t0)) s$([ $rc -eq 0 ] || echo ", failed (exit $rc)")"
  return $rc
}

configure() {  # configure DIR SANITIZERS [CMAKE ARGS...]
  local dir=$1 san=$2
  shift 2
  CC=clang CXX=clang++ cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" -DMINFER_CUDA=OFF \
    -DMINFER_BENCH=OFF -DMINFER_SANITIZE="$san" "$@" > /dev/null
}

# Load.ThousandRequestsAtConcurrency32ThenBadRequests checks that resident memory stays within 10% + 16 MiB
# over 1,000 requests; under ASan the quarantine and shadow memory grow it (136 -> 215 MiB even with
# __sanitizer_purge_allocator before each reading; 130 -> 225 MiB with ASAN_OPTIONS=quarantine_size_mb=0,
# re-checked 2026-12-02, 261 s), so it is left out here until its check is made meaningful under ASan
# (issue 32); it runs in the plain suite, and LeakSanitizer covers the other tests.
#
# StructuredOutput.EverySchemaOfTheCorpus* sample 64 answers of up to 768 tokens each from a model: minutes of
# decoding under ASan (their client's 60 s timeout ran out there on 2026-12-06) that add no code path the
# other StructuredOutput tests, GrammarCorpus and fuzz_replay_grammar do not already run under ASan. They run
# in the plain suite.
asan_skip='^(Load\.ThousandRequestsAtConcurrency32ThenBadRequests|StructuredOutput\.EverySchemaOfTheCorpus.*)$'

asan() {
  configure build-asan address,undefined -DMINFER_FUZZ=ON
  timed "asan build" cmake --build build-asan -j "$jobs"
  ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:abort_on_error=1 \
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    timed "asan suite" ctest --test-dir build-asan --output-on-failure -j "$jobs" --timeout 900 -E "$asan_skip"
}

fuzz() {  # fuzz SECONDS: every target in turn; a crash, leak or timeout fails the job
  [ -f build-asan/build.ninja ] || configure build-asan address,undefined -DMINFER_FUZZ=ON
  mkdir -p build-asan/logs
  for t in gguf tokenizer jinja request; do
    local log=build-asan/logs/fuzz_$t.log
    if ! MINFER_FUZZ_BUILD="$root/build-asan" MINFER_FUZZ_JOBS="$jobs" scripts/fuzz.sh "$t" "$1" > "$log" 2>&1; then
      tail -n 80 "$log"
      echo "fuzz_$t: failed (the input is in build-asan/findings/$t/, the log in $log)" >&2
      return 1
    fi
    echo "fuzz_$t: $(grep -a -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1)"  # libFuzzer: "#N<TAB>DONE cov: ..."
  done
}

# TSan reports a race between two of cpp-httplib's worker threads inside the library (memcmp on a block
# another worker allocated; no frame of ours): Debian's libcpp-httplib.so is not instrumented, so TSan
# does not see its synchronisation. Until it is built from source with TSan, the one test that drives 32
# connections at once is left out here (it runs in the ASan and plain suites). Re-checked 2026-12-02: the
# first report is still that one (libcpp-httplib.so.0.11, memcmp against an httplib worker's allocation);
# suppressing it (called_from_lib:libcpp-httplib.so) only brings up the next, std::regex state copied
# inside the library's client on the test's threads: the library has to be built with TSan first.
# The same report (memcmp in one httplib worker on a block another httplib worker allocated, every frame
# the library's or std::thread's) comes 4 runs in 6 (2026-12-07) from
# Streaming.DisconnectBeforeAWholeAnswerFreesBlocksWithinOneSecond, which polls /metrics on other
# connections while its raw client hangs up: it too is left out here until the library is built with
# TSan, and runs in the ASan and plain suites.
tsan_skip='^Streaming\.(ThirtyTwoConcurrentGreedyStreamsEqualEachAlone|DisconnectBeforeAWholeAnswerFreesBlocksWithinOneSecond)$'

tsan() {
  configure build-tsan thread
  timed "tsan build" cmake --build build-tsan -j "$jobs" --target test_cpu test_engine test_server
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    timed "tsan suite" ctest --test-dir build-tsan --output-on-failure -j "$jobs" --timeout 900 \
    -R '^(ThreadPool|Scheduler|Streaming)\.' -E "$tsan_skip"
}

case ${1:-all} in
  asan) asan ;;
  fuzz) timed fuzz fuzz "${2:-60}" ;;
  tsan) tsan ;;
  # One after another, not `asan && fuzz && tsan`: inside an && list bash ignores set -e in the functions,
  # so a failed build would go on to ctest.
  all)
    asan
    timed fuzz fuzz "${2:-60}"
    tsan
    ;;
  *) echo "usage: scripts/ci-sanitize.sh [asan|fuzz [SECONDS]|tsan|all]" >&2; exit 2 ;;
esac
