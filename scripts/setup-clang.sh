#!/usr/bin/env bash
# Installs what the sanitizer and fuzz builds need beyond scripts/setup.sh (Debian 12): clang (14),
# the compiler-rt runtimes of ASan, UBSan, TSan and libFuzzer (libclang-rt-dev, only a Recommends of
# clang), and llvm (llvm-symbolizer, for readable reports). Called by ci-sanitize.sh and fuzz.sh.
set -euo pipefail
packages=(clang libclang-rt-dev llvm)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" > /dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi
