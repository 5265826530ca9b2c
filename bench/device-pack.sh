#!/usr/bin/env bash
# Packs what a device-tool call needs into DIR (default carry/, git-ignored; pass it as `carry`):
# pack.tar.xz, the named binaries of build/ under bin/ (NAME or NAME=ALIAS, e.g. minfer=minfer_a) and the
# shared libraries the GPU machine lacks under lib/; with DATA=1 also data.tar.xz, the refs and the minis
# DATA_MODELS names (default the Q4_K_M ones) of $MINFER_TEST_DATA (default ../shared) as shared/. One xz
# stream with a 128 MiB dictionary: the binaries share their CUDA code, so four of them pack to about
# 13 MB (48 MB with xz's default 8 MiB).
# The device receives at most 64 MiB with the working tree (about 42 MB, counted as a tar of the files):
# minfer, minfer-synth and test_cuda pack to about 22 MB, which leaves room for a llama.cpp kit trimmed
# by bench/peer-trim.sh (SERVER=0) but not for test_engine beside both. bench/device-run.sh unpacks.
# Usage: bench/device-pack.sh minfer minfer-synth test_cuda test_engine bench_cuda_mma
set -euo pipefail
DIR=${DIR:-carry} BUILD=${BUILD:-build}
[ $# -gt 0 ] || { echo "usage: device-pack.sh NAME[=ALIAS]..." >&2; exit 2; }
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$DIR"
for spec in "$@"; do cp "$BUILD/${spec%%=*}" "$stage/bin/${spec#*=}"; done
# The libraries outside the GPU machine's base system: every one minfer loads from the system, but the
# C and C++ runtimes, OpenSSL and zlib.
ldd "$BUILD/minfer" | awk '$3 ~ /^\// {print $3}' |
  grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libssl|libcrypto|libz)\.so' | xargs -r cp -L -t "$stage/lib"
tar -C "$stage" -cf - bin lib | xz -T1 --lzma2=preset=6,dict=128MiB >"$DIR/pack.tar.xz"
if [ "${DATA:-0}" = 1 ]; then
  data=$(cd "${MINFER_TEST_DATA:-../shared}" && pwd)
  # shellcheck disable=SC2086 # DATA_MODELS is a list of globs
  (cd "$data" && tar --transform 's|^|shared/|' -cJf - refs ${DATA_MODELS:-models/*-Q4_K_M.gguf}) \
    >"$DIR/data.tar.xz"
fi
du -ch "$DIR"/*.tar.xz | tail -1
