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

// The KV regions a graph declares (through its kv_store and kv_load nodes), one entry per such node.
struct KvShape {
    int layer;
    int64_t n_embd, n_ctx;
};
std::vector<KvShape> kv_shapes(const ComputeGraph& g);

// One K and one V region per layer in host memory, each [n_ctx][n_embd] f32. Regions are declared on
// first sight of a layer's kv_store or kv_load and kept across rebuilds (a rebuild declaring a different
// shape is an error); their memory is allocated when a host backend first touches the layer.
class KvCache {
  public:
    struct Region {
        std::vector<float> k, v;  // [n_ctx][n_embd]
        int64_t n_embd = 0, n_ctx = 0;
    };
    // Declares the regions of g's KV nodes that do not exist yet.
    void reserve(const ComputeGraph& g);
    Region& layer(int il);              // allocates the layer's memory on first use
    const Region& layer(int il) const;  // shape, and memory if allocated
    size_t n_layers() const { return regions_.size(); }
    size_t bytes() const;  // allocated host memory

  private:
    std::vector<Region> regions_;
};

}  // namespace minfer
