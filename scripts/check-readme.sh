#!/usr/bin/env bash
# Clones this repository into a temporary directory and runs exactly the two commands the README gives:
# the quick start (set up + generate with the embedded model) and the test command. The clone's own run of
# this script is skipped (MINFER_README_CHECK=1) so the check does not recurse.
set -euo pipefail
[ "${MINFER_README_CHECK:-0}" = 1 ] && exit 0
src=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git clone -q "$src" "$work/minfer"
# The clone sits beside no ../shared, so point the golden tests at the same data as this checkout.
export MINFER_TEST_DATA="${MINFER_TEST_DATA:-$src/../shared}" MINFER_README_CHECK=1
mapfile -t cmds < <(awk '/^## Quick start/{on=1} on && /^    scripts\//{sub(/^    /, ""); print}' "$src/README.md")
[ "${#cmds[@]}" -eq 2 ] || { echo "README: expected 2 commands under Quick start, found ${#cmds[@]}" >&2; exit 1; }
cd "$work/minfer"
out=$(bash -c "${cmds[0]}")
echo "$out"
[ -n "$(echo "$out" | tr -d '[:space:]')" ] || { echo "quick start printed no text" >&2; exit 1; }
bash -c "${cmds[1]}"
echo "README check: both commands succeeded in a fresh clone"
