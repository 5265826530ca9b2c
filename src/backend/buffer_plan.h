// Where each node's buffer lies in the executor's arena: sched/alloc.h plans it, and a backend with its
// own memory mirrors the arena at the same offsets (Backend::bind). It lives here, below sched/, so that
// backends take the plan without including the scheduler that makes it.
#pragma once
#include <cstdint>
#include <vector>

#include "graph/graph.h"

namespace minfer {

// Offsets (in floats) into one arena; -1 for nodes without a buffer (orphans, KV store/load views).
struct BufferPlan {
    std::vector<int64_t> offset;  // per node
    int64_t arena_floats = 0;     // high-water mark
    int64_t naive_floats = 0;     // what one buffer per node would take (for reports)
    bool has_buffer(NodeId id) const { return offset[size_t(id)] >= 0; }
};

}  // namespace minfer
