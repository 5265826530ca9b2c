#!/usr/bin/env bash
# Where a decode step's time goes on the GPU as it really runs (kernels overlapped by programmatic
# dependent launch, replayed from a CUDA graph): records every kernel's start and end with CUPTI
# (libminfer_cuda_timeline.so, built with -DMINFER_BENCH=ON where CUPTI is found) during `minfer bench`,
# then splits the timeline into steps at the host's copies between them and prints, per kernel and
# launch shape, its share of the critical path: the time from the previous kernel's end to its own end.
# Also the step's wall time (boundary copy to boundary copy) against its kernel span: the difference
# is the host, the launch and the copies, whose count, bytes and time per step it prints by direction.
# CUPTI slows the host side, so the wall time here exceeds `minfer bench`'s.
# Usage: bench/cuda-timeline.sh MODEL.gguf [N (tokens, default 64)]
# Env: BIN (folder holding minfer and the library, default build), TOP (rows shown, default 16),
# B (sequences decoding together, default 1: with B > 1 each first prefills P tokens, default 128; the
# steps kept are those with the decode graph's kernel count).
set -euo pipefail
BIN=${BIN:-build} TOP=${TOP:-16} B=${B:-1} P=${P:-128}
model=$1
n=${2:-64}
batch=(-p 0)
[ "$B" -le 1 ] || batch=(-p "$P" --parallel "$B")
csv=$(mktemp)
trap 'rm -f "$csv"' EXIT
MINFER_TIMELINE="$csv" LD_PRELOAD="$BIN/libminfer_cuda_timeline.so" \
  "$BIN/minfer" bench -m "$model" --device cuda -n "$n" -r 1 "${batch[@]}" >/dev/null
python3 - "$csv" "$TOP" <<'PY'
import collections, statistics, sys
path, top = sys.argv[1], int(sys.argv[2])
rows = []
for line in open(path):
    kind, start, end, a, b, name = line.rstrip("\n").split(",", 5)
    rows.append((int(start), int(end), kind, int(a), int(b), name))
rows.sort()
# Step boundaries: the first copy (the host's uploads of ids and positions, or a logits download) after
# a step's kernels; the kernels between two boundaries are one step.
ends, seen_kernel = [], True
for r in rows:
    if r[2] == "K":
        seen_kernel = True
    elif seen_kernel:
        ends.append(r)
        seen_kernel = False
steps = []
for prev, cur in zip(ends, ends[1:]):
    ks = [r for r in rows if r[2] == "K" and r[0] > prev[1] and r[1] <= cur[0]]
    if ks:
        steps.append((prev, cur, ks))
steps = steps[len(steps) // 2:]  # the timed repetition's steps, graphs replayed
if steps:  # decode steps only: the most common kernel count (prefill chunks differ)
    mode = collections.Counter(len(ks) for _, _, ks in steps).most_common(1)[0][0]
    steps = [st for st in steps if len(st[2]) == mode]
if not steps:
    sys.exit("no decode steps found in the timeline")
us = lambda ns: ns / 1e3
wall = statistics.median(us(c[1] - p[1]) for p, c, _ in steps)
span = statistics.median(us(ks[-1][1] - ks[0][0]) for _, _, ks in steps)
print(f"{len(steps)} steps, {len(steps[0][2])} kernels each; median per step: wall {wall:.1f} us, "
      f"kernel span {span:.1f} us")
kinds = {1: "host to device", 2: "device to host"}
for kind, label in kinds.items():  # the copies from a step's first boundary copy to the next
    per = [[r for r in rows if r[2] == "M" and r[4] == kind and p[0] <= r[0] < c[0]] for p, c, _ in steps]
    if any(per):
        print(f"copies {label} per step (median): {statistics.median(len(x) for x in per):g}, "
              f"{statistics.median(sum(r[3] for r in x) for x in per) / 1e6:.3f} MB, "
              f"{statistics.median(sum(us(r[1] - r[0]) for r in x) for x in per):.1f} us")
share, calls = collections.defaultdict(float), collections.Counter()
for _, _, ks in steps:
    last = ks[0][0]
    for k in ks:
        key = (k[5][:90], k[3] * max(k[4], 1))
        share[key] += us(k[1] - last)
        calls[key] += 1
        last = k[1]
print("| us per step | share | calls per step | us per call | kernel | blocks |")
print("| ---: | ---: | ---: | ---: | --- | ---: |")
for key, t in sorted(share.items(), key=lambda kv: -kv[1])[:top]:
    per = t / len(steps)
    print(f"| {per:.1f} | {100 * per / span:.1f}% | {calls[key] / len(steps):g} | {t / calls[key]:.2f} "
          f"| {key[0]} | {key[1]} |")
PY
