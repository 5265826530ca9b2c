// Memory for one graph: a liveness allocator that lets nodes whose lifetimes do not overlap share
// arena space. The persistent KV regions are not planned here: they belong to kv/kv_cache.h.
#pragma once
#include "backend/buffer_plan.h"
#include "graph/graph.h"

namespace minfer {

// Plans buffers for `g`: inputs and outputs are never shared; every other live node's buffer is
// released after its last reader runs and reused best-fit by later nodes.
BufferPlan plan_buffers(const ComputeGraph& g);

}  // namespace minfer
