// Memory for one graph: a liveness allocator that lets nodes whose lifetimes do not overlap share
// arena space, and the persistent per-layer KV regions, sized from the kv_store nodes' declared
// shapes of the kv_store / kv_load nodes, that survive graph rebuilds (only ordinary buffers are
// recycled).
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

// One K and one V region per layer, each [n_ctx][n_embd] f32. Regions are created on first sight of
// a layer's kv_store and kept across rebuilds; a rebuild declaring a different shape is an error.
class KvCache {
  public:
    struct Region {
        std::vector<float> k, v;  // [n_ctx][n_embd]
        int64_t n_embd = 0, n_ctx = 0;
    };
    // Creates the regions declared by g's kv_store nodes that do not exist yet.
    void reserve(const ComputeGraph& g);
    Region& layer(int il);
    const Region& layer(int il) const;
    size_t n_layers() const { return regions_.size(); }
    size_t bytes() const;

  private:
    std::vector<Region> regions_;
};

}  // namespace minfer
