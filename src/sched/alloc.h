// Memory for one graph: a liveness allocator that lets nodes whose lifetimes do not overlap share
// arena space. The persistent KV regions are not planned here: they belong to kv/kv_cache.h.
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

// Plans buffers for `g`: inputs and outputs are never shared; every other live node's buffer is
// released after its last reader runs and reused best-fit by later nodes.
BufferPlan plan_buffers(const ComputeGraph& g);

}  // namespace minfer
