#!/bin/bash
# compare-llamacpp.sh MODEL.gguf...: prefill (pp512) and decode (tg128) speed of minfer vs llama.cpp.
# For each model, runs `minfer bench` and `llama-bench` alternately R times (one repetition each, so both
# engines see the same machine load), then prints one markdown table: engine | model | test |
# tok/s mean ± sd | ratio minfer/llama.cpp. Also measures DRAM read bandwidth (membw) and prints the
# decode roofline fraction = tg tok/s × model tensor bytes / bandwidth (each token reads every weight once;
# at a depth it also reads the KV cache, which the fraction leaves out).
# Environment: R (default 3), T threads (default 2), D context depth (default 0: both engines' -d, the
# tests then run after D prefilled tokens), BUILD (default build-perf: minfer, membw),
# MINFER (default $BUILD/minfer), LLAMACPP (default ../shared/tools/llamacpp).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
R=${R:-3}
T=${T:-2}
D=${D:-0}
BUILD=${BUILD:-$root/build-perf}
MINFER=${MINFER:-$BUILD/minfer}
LLAMACPP=${LLAMACPP:-$root/../shared/tools/llamacpp}
[ $# -gt 0 ] || { echo "usage: compare-llamacpp.sh MODEL.gguf..." >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for model in "$@"; do
  for i in $(seq "$R"); do
    echo "$(basename "$model"): run $i/$R" >&2
    "$MINFER" bench -m "$model" -p 512 -n 128 -d "$D" -t "$T" -r 1 --json >> "$tmp/minfer.jsonl"
    "$LLAMACPP" llama-bench -m "$model" -p 512 -n 128 -d "$D" -t "$T" -r 1 -o json 2>/dev/null |
      python3 -c 'import json, sys; print(json.dumps({"model": sys.argv[1], "runs": json.load(sys.stdin)}))' \
        "$model" >> "$tmp/llama.jsonl"
  done
done
bw=$("$BUILD/membw" "$T" 2>/dev/null | awk '{print $2}')

python3 - "$tmp" "$bw" "$T" "$D" <<'PY'
import json, os, statistics, sys
tmp, bw, threads, depth = sys.argv[1], float(sys.argv[2]), sys.argv[3], int(sys.argv[4])
at = f" @ d{depth}" if depth else ""
rates, size = {}, {}  # (engine, model, test) -> [tok/s]; model -> tensor bytes
for line in open(f"{tmp}/minfer.jsonl"):
    j = json.loads(line)
    for test in ("pp512", "tg128"):
        rates.setdefault(("minfer", j["model"], test), []).append(j[test]["mean"])
for line in open(f"{tmp}/llama.jsonl"):
    j = json.loads(line)
    for run in j["runs"]:
        test = f"pp{run['n_prompt']}" if run["n_prompt"] else f"tg{run['n_gen']}"
        rates.setdefault(("llama.cpp", j["model"], test), []).append(run["avg_ts"])
        size[j["model"]] = run["model_size"]
def stat(v):
    return statistics.mean(v), statistics.stdev(v) if len(v) > 1 else 0.0
print(f"threads {threads}, read bandwidth {bw:.2f} GB/s (membw)\n")
print("| engine | model | test | tok/s mean ± sd | ratio minfer/llama.cpp |")
print("| --- | --- | --- | ---: | ---: |")
models = list(dict.fromkeys(m for _, m, _ in rates))
for m in models:
    for test in ("pp512", "tg128"):
        ref = stat(rates[("llama.cpp", m, test)])[0]
        for engine in ("minfer", "llama.cpp"):
            mean, sd = stat(rates[(engine, m, test)])
            ratio = f"{mean / ref:.2f}" if engine == "minfer" else ""
            print(f"| {engine} | {os.path.basename(m)} | {test}{at} | {mean:.2f} ± {sd:.2f} | {ratio} |")
print(f"\n| engine | model | tensor MB | tg128{at} tok/s | decode roofline fraction |")
print("| --- | --- | ---: | ---: | ---: |")
for m in models:
    for engine in ("minfer", "llama.cpp"):
        tg = stat(rates[(engine, m, "tg128")])[0]
        print(f"| {engine} | {os.path.basename(m)} | {size[m] / 1e6:.0f} | {tg:.2f} | {tg * size[m] / (bw * 1e9):.2f} |")
PY
