#!/usr/bin/env bash
# Installs the Debian 12 packages minfer needs and builds it (Release, Ninja, ccache) into build/.
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(build-essential cmake ninja-build ccache pkg-config git libpcre2-dev libutf8proc-dev libcli11-dev
  nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev graphviz libgraphviz-dev libcpp-httplib-dev
  chromium)  # libgraphviz-dev: minfer viz lays graphs out in-process; chromium: its browser test
# nodejs and npm run the server's tests with the official openai client; a machine that already has a
# node (e.g. from NodeSource) keeps it.
command -v node >/dev/null 2>&1 || packages+=(nodejs)
command -v npm >/dev/null 2>&1 || packages+=(npm)
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
# The openai and @anthropic-ai/sdk npm packages for tests/server/openai_client.test.mjs and
# anthropic_client.test.mjs, puppeteer-core (which drives the system chromium, downloading no browser)
# for tests/viz/browser.test.mjs, and ajv + ajv-formats for tests/grammar/validate_samples.mjs, in an
# ignored folder (the tests skip without them). A failed install (no network) is reported, not fatal.
for pkg in openai@4 @anthropic-ai/sdk@1 puppeteer-core@24 ajv@8 ajv-formats@3; do
  if [ ! -d "build/node/node_modules/${pkg%@*}" ]; then
    mkdir -p build/node
    (cd build/node && npm install --no-audit --no-fund --loglevel=error "$pkg") ||
      echo "setup: could not install the npm package $pkg; its test will be skipped" >&2
  fi
done
