#!/usr/bin/env bash
# Shrinks a llama.cpp source kit (../shared/tools/llamacpp-src DIR: DIR/llama-src.tar.xz) to what its CUDA
# build of llama-bench and llama-batched-bench needs, so that it travels beside a binaries pack within the
# device tool's 64 MiB (4.9 MB -> about 2.2 MB): the web UI's sources (LLAMA_BUILD_UI is off), the ET
# backend, CI and docs. SERVER=0 also empties vendor/miniaudio and vendor/stb (their CMakeLists kept, so
# the configure step still runs), which mtmd and so llama-server need: compare, not serve.
# Usage: bench/peer-trim.sh DIR
set -euo pipefail
dir=$(cd "$1" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -C "$work" -xJf "$dir/llama-src.tar.xz"
l=$work/llama.cpp
rm -rf "$l/tools/ui/src" "$l/tools/ui/tests" "$l/tools/ui/package-lock.json" "$l/ggml/src/ggml-et" \
  "$l/.github" "$l/.devops" "$l/docs" "$l/AUTHORS" "$l/tools/server/bench"
if [ "${SERVER:-1}" = 0 ]; then
  for d in miniaudio stb; do find "$l/vendor/$d" -type f ! -name CMakeLists.txt -delete; done
fi
tar -C "$work" -cf - llama.cpp | xz -9e -T2 >"$dir/llama-src.tar.xz.new"
mv "$dir/llama-src.tar.xz.new" "$dir/llama-src.tar.xz"
du -b "$dir/llama-src.tar.xz"
