#!/usr/bin/env bash
# Install, build and run the whole test suite (what CI runs). Golden tests read ../shared, or
# $MINFER_TEST_DATA, and skip with a message when it is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ctest --test-dir build --output-on-failure -j "$(nproc)"
