// The paged KV cache's memory on the host: one K and one V region per layer, each [n_slots] rows of
// n_embd elements of the KV type (f32, f16 or q8_0 blocks of 32; kv_row_bytes), split into blocks of kv_block
// token slots that sequences own through their block tables (kv/ block_pool.h hands the blocks out). Regions
// are declared by a graph's kv_store / kv_load nodes on first sight of a layer and survive every rebuild (a
// rebuild declaring another shape is an error); their memory is allocated when a host backend first touches
// the layer.
#pragma once
#include <cstdint>
#include <vector>

#include "graph/graph.h"

namespace minfer {

// The KV region a graph node declares (kv_store, kv_load): layer, shape [n_embd, n_slots], element type.
struct KvShape {
    int layer;
    int64_t n_embd, n_ctx;
    GgmlType type;
};
std::vector<KvShape> kv_shapes(const ComputeGraph& g);
// Bytes of one row of n_embd elements of `type` (F32, F16 or Q8_0; Error for others).
size_t kv_row_bytes(GgmlType type, int64_t n_embd);

class KvCache {
  public:
    struct Region {
        std::vector<uint8_t> k, v;  // [n_ctx] token slots of row_bytes each
        int64_t n_embd = 0, n_ctx = 0;
        GgmlType type = GgmlType::F32;
        size_t row_bytes = 0;
        uint8_t* k_row(int64_t slot) { return k.data() + size_t(slot) * row_bytes; }
        uint8_t* v_row(int64_t slot) { return v.data() + size_t(slot) * row_bytes; }
        const uint8_t* k_row(int64_t slot) const { return k.data() + size_t(slot) * row_bytes; }
        const uint8_t* v_row(int64_t slot) const { return v.data() + size_t(slot) * row_bytes; }
    };
    // Declares the regions of g's KV nodes that do not exist yet.
    void reserve(const ComputeGraph& g);
    Region& layer(int il);              // allocates the layer's memory on first use
    const Region& layer(int il) const;  // shape, and memory if allocated
    size_t n_layers() const { return regions_.size(); }
    size_t bytes() const;  // allocated host memory
    // Copies slots [src * block, src * block + n) to dst's block in every allocated layer whose region
    // holds n_slots slots (the layers of the block's pool: every layer, or the global or the window
    // ones, CParams::window_ctx): the copy-on-write of a shared partial block before a sequence writes
    // into it.
    void copy_block(int32_t src, int32_t dst, int64_t block, int64_t n, int64_t n_slots);

  private:
    std::vector<Region> regions_;
};

}  // namespace minfer
