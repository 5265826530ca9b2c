#!/usr/bin/env bash
# Installs the Debian 12 packages minfer needs and builds it (Release, Ninja, ccache) into build/.
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(build-essential cmake ninja-build ccache pkg-config git libpcre2-dev libutf8proc-dev libcli11-dev
  nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev graphviz)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi
# Paths under the checkout's parent are hashed relative to it, so another clone reuses the objects.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(cd .. && pwd)}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMINFER_BENCH=ON
cmake --build build -j "$(nproc)"
