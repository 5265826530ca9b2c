#!/usr/bin/env bash
# Per-kernel GPU time of one `minfer bench` run under Nsight Compute (ncu), summed per kernel and launch
# shape and sorted: where a token's time goes. Kernels run serialized under ncu (launch gaps excluded),
# caches kept warm between them as in a real run.
# Usage: bench/cuda-kernel-profile.sh MODEL.gguf [-p 512 -n 0 | -p 0 -n 4]   (default: -p 0 -n 4)
# The totals are per generated token for -n runs and per prompt for -p runs (warm-up run included in the
# count, then divided out). Env: BIN (folder holding minfer, default build), TOP (rows shown, default 20).
set -euo pipefail
BIN=${BIN:-build} TOP=${TOP:-20}
model=$1
shift
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(-p 0 -n 4)
csv=$(mktemp)
trap 'rm -f "$csv"' EXIT
ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --print-summary per-kernel --csv \
  "$BIN/minfer" bench -m "$model" --device cuda -r 1 "${args[@]}" >"$csv"
python3 - "$csv" "$TOP" "${args[@]}" <<'PY'
import csv, re, sys
path, top, args = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
opt = dict(zip(args[::2], args[1::2]))
n_gen, n_prompt = int(opt.get("-n", 0)), int(opt.get("-p", 0))
# bench runs each test once to warm up, then once timed (-r 1): 2 prompts, or 2 * n_gen tokens.
per, unit = (2 * n_gen, "token") if n_gen else (2, f"pp{n_prompt} run")
tot = {}
for r in csv.reader(open(path)):
    if len(r) < 15 or r[0] == "Process ID":
        continue
    name = re.sub(r"\(.*", "", re.sub(r"^void ", "", r[3]))
    key = (re.sub(r"^(minfer::)?(cuda::)?<?unnamed>::", "", name), r[5])
    inv, avg = int(r[8]), float(r[14].replace(",", ""))
    t = tot.setdefault(key, [0, 0.0])
    t[0] += inv
    t[1] += inv * avg / 1e3
total = sum(v[1] for v in tot.values())
print(f"GPU time per {unit}: {total / per:.1f} us")
print("| us | share | calls | kernel | grid |\n| ---: | ---: | ---: | --- | --- |")
for (name, grid), (inv, us) in sorted(tot.items(), key=lambda kv: -kv[1][1])[:top]:
    print(f"| {us / per:.1f} | {100 * us / total:.1f}% | {inv / per:g} | {name[:100]} | {grid} |")
PY
