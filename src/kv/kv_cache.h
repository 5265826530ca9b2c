// The paged KV cache's memory on the host: one K and one V region per layer, each [n_slots][n_embd] f32,
// split into blocks of kv_block token slots that sequences own through their block tables (kv/
// block_pool.h hands the blocks out). Regions are declared by a graph's kv_store / kv_load nodes on first
// sight of a layer and survive every rebuild (a rebuild declaring another shape is an error); their
// memory is allocated when a host backend first touches the layer.
#pragma once
#include <cstdint>
#include <vector>

#include "graph/graph.h"

namespace minfer {

// The KV region a graph node declares (kv_store, kv_load): layer and shape [n_embd, n_slots].
struct KvShape {
    int layer;
    int64_t n_embd, n_ctx;
};
std::vector<KvShape> kv_shapes(const ComputeGraph& g);

class KvCache {
  public:
    struct Region {
        std::vector<float> k, v;  // [n_ctx][n_embd]: n_ctx token slots
        int64_t n_embd = 0, n_ctx = 0;
    };
    // Declares the regions of g's KV nodes that do not exist yet.
    void reserve(const ComputeGraph& g);
    Region& layer(int il);              // allocates the layer's memory on first use
    const Region& layer(int il) const;  // shape, and memory if allocated
    size_t n_layers() const { return regions_.size(); }
    size_t bytes() const;  // allocated host memory
    // Copies slots [src * block, src * block + n) to dst's block in every allocated layer: the
    // copy-on-write of a shared partial block before a sequence writes into it.
    void copy_block(int32_t src, int32_t dst, int64_t block, int64_t n);

  private:
    std::vector<Region> regions_;
};

}  // namespace minfer
