#!/usr/bin/env bash
# One command from a fresh Debian 12 machine: install, build, and generate text with the embedded model.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec build/minfer run -p "${1:-The list type}" -n "${2:-64}"
