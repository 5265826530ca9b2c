#!/usr/bin/env bash
# Layering check: a stage may include headers from its own folder and from stages earlier in the
# pipeline, never later, so that each stage builds, tests and reads without the ones after it. Scans
# every #include "..." in src/, viz/ and app/, prints each backwards include and exits 1 if there is any.
# Usage: scripts/check-layers.sh [repository root]   (ctest runs it as the `layering` test)
set -euo pipefail
root=$(cd "${1:-$(dirname "$0")/..}" && pwd)
cd "$root"

# Pipeline order, earliest first; a file's stage is the longest of these folders that holds it.
# viz/ and app/ are top-level folders, the others under src/.
stages="util gguf quant tokenizer grammar graph models kv backend/cpu backend/cuda backend sched runtime server viz app"

# Backwards includes accepted on purpose, as "<stage> <included path>", each with its reason (none
# today: the quant traits table, which models/ and the backends both read, has its own stage, quant/).
allowed=""

# Stages that run graphs, whatever model built them: they never include models/ although it comes
# earlier. A backend that needs a model's weights up front takes a WeightSet (graph/weights.h).
graph_only="kv backend/cpu backend/cuda backend sched"

mapfile -t files < <(find src viz app -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) | sort)
awk -v stages="$stages" -v allowed="$allowed" -v graph_only="$graph_only" '
  function stage_of(path,   i, best, dir) {
    best = ""
    for (i = 1; i <= nstage; i++) {
      dir = order[i] == "app" || order[i] == "viz" ? order[i] "/" : "src/" order[i] "/"
      if (index(path, dir) == 1 && length(order[i]) > length(best)) best = order[i]
    }
    return best
  }
  function exists(path,   line, r) {
    r = (getline line < path) >= 0
    close(path)
    return r
  }
  BEGIN {
    nstage = split(stages, order, " ")
    for (i = 1; i <= nstage; i++) rank[order[i]] = i
    n = split(allowed, lines, "\n")
    for (i = 1; i <= n; i++) ok[lines[i]] = 1
    n = split(graph_only, lines, " ")
    for (i = 1; i <= n; i++) no_models[lines[i]] = 1
  }
  FNR == 1 {
    dir = FILENAME
    sub(/\/[^\/]*$/, "", dir)
    from = stage_of(FILENAME)
    if (from == "") {
      printf "%s: in no pipeline stage; add its folder to scripts/check-layers.sh\n", FILENAME
      bad++
    }
  }
  /^[ \t]*#[ \t]*include[ \t]*"/ {
    inc = $0
    sub(/^[^"]*"/, "", inc)
    sub(/".*$/, "", inc)
    # A quoted include resolves beside the including file first (app/), then from src/, then from the
    # root (viz/).
    to = stage_of(exists(dir "/" inc) ? dir "/" inc : exists("src/" inc) ? "src/" inc : inc)
    if (from == "" || to == "" || (from " " inc) in ok) next
    if (rank[to] > rank[from]) {
      printf "%s:%d: %s includes %s (%s), which is later in the pipeline\n", FILENAME, FNR, from, inc, to
      bad++
    } else if (from in no_models && to == "models") {
      printf "%s:%d: %s includes %s (%s), which a stage that runs graphs may not see\n", FILENAME, FNR,
             from, inc, to
      bad++
    }
  }
  END {
    if (bad) {
      printf "%d layering violation(s); pipeline order: %s\n", bad, stages
      exit 1
    }
  }' "${files[@]}"
