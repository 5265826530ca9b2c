// GraphBuilder: the only way to make a ComputeGraph. It is pure: it appends nodes and does integer
// shape arithmetic, nothing else: no kernel runs, no buffer exists, no weight is read. A node can
// only reference ids the builder already returned, so the node list is topologically sorted.
// Nodes are named as llama.cpp names its tensors: a stem and, inside a layer, the layer ("attn_norm-3",
// "attn_q-3", "kv_store-3"; "token_ids", "embed", "output" outside the layers). Dumps, traces and
// `minfer viz` all show these names.
#pragma once
#include <string>
#include <string_view>

#include "graph/graph.h"

namespace minfer {

// The inputs that locate each token's KV slot: positions [nt], and in a paged layout seq_slot [nt] (its
// block-table row) and block_table [max_blocks, max_seqs] (meta::Paging says how they combine; -1 when
// unpaged: the slot is the position).
struct KvIndex {
    NodeId positions, seq_slot, block_table;
};

// stem + "-" + layer inside a layer (layer >= 0), the stem alone outside.
std::string node_name(std::string_view stem, int layer);
// The name without its layer suffix ("attn_q-3" -> "attn_q").
std::string_view node_stem(const CNode& n);
// A GGUF weight name without the layer prefix and the ".weight" suffix ("blk.3.attn_q.weight" ->
// "attn_q", "output_norm.weight" -> "output_norm").
std::string weight_stem(const std::string& weight);
// The layer whose KV region a node writes or reads (KV store/load, attention, QKV fusions); -1 otherwise.
int node_kv_layer(const CNode& n);

class GraphBuilder {
  public:
    // The layer of the nodes built from now on (-1: outside the layers); KV ops and attention take the
    // layer they are given.
    void set_layer(int il) { layer_ = il; }
    // A leaf whose data arrives from outside each step (so positions never force a rebuild).
    NodeId input(const std::string& name, Shape shape, DType dtype);
    void output(NodeId id) { g_.outputs.push_back(id); }

    NodeId embedding(NodeId ids, const WeightRef& table);  // -> [n_embd, nt]
    // A vocabulary shard of the table, its rows from `first`: ids elsewhere give zero rows.
    NodeId embedding_shard(NodeId ids, const WeightRef& table, int64_t first);  // -> [n_embd, nt]
    NodeId get_rows(NodeId x, NodeId ids);                                      // -> [d, n_ids]
    NodeId rms_norm(NodeId x, const WeightRef& w, float eps);                   // -> shape of x
    NodeId qk_norm(NodeId x, const WeightRef& w, int64_t nh, int64_t hd, float eps);
    NodeId matmul(NodeId x, const WeightRef& w, const WeightRef& bias = {});  // -> [w.n_out, nt]
    NodeId rope(NodeId x, NodeId pos, RopeStyle style, const meta::Rope& m);
    NodeId silu(NodeId x);
    NodeId mul(NodeId a, NodeId b);
    NodeId add(NodeId a, NodeId b);
    NodeId swiglu(NodeId gate, NodeId up);
    NodeId geglu(NodeId gate, NodeId up);  // gelu_tanh(gate) * up
    NodeId scale(NodeId x, float factor);
    NodeId argmax(NodeId x);  // [d, n] -> [n] i32
    // Tensor-parallel collectives: the sum over the ranks ([d, nt] -> [d, nt]) and the rank-by-rank
    // concatenation of each row ([d, nt] -> [ranks * d, nt]).
    NodeId all_reduce(NodeId x);
    NodeId all_gather(NodeId x, int ranks);
    NodeId kvcache_store(int layer, NodeId k, NodeId v, const KvIndex& at,
                         const meta::Kv& m);            // [n_embd, n_ctx]
    NodeId kvcache_load(int layer, const meta::Kv& m);  // no sources: a view [n_embd, n_ctx] of the region
    // Causal attention, within a sliding window of `window` positions when window > 0.
    NodeId attn(NodeId q, NodeId kv, const KvIndex& at, const meta::Attn& m,
                int64_t window = 0);  // -> [n_head * hd, nt]

    // Decode fusions. fused_qkv: -> Q [n_head * hd, nt]; K/V go straight into the layer's region.
    NodeId fused_qkv(int layer, NodeId x, const KvIndex& at, const meta::FusedQkv& m);
    NodeId fused_qkv_norm(int layer, NodeId x, const KvIndex& at, const meta::FusedQkv& m);
    NodeId qkv_bias_rope_store(int layer, NodeId q, NodeId k, NodeId v, const KvIndex& at,
                               const meta::FusedQkv& m);
    NodeId fused_ffn(NodeId x, const meta::FusedFfn& m);  // -> [n_ff, nt], silu(gate) * up
    // Mixture of experts: x [n_embd, nt] and the router's logits [n_expert, nt] -> [n_embd, nt].
    NodeId moe_ffn(NodeId x, NodeId router, const op::MoeFfn& o, const meta::MoeFfn& m);

    const CNode& operator[](NodeId id) const { return g_[id]; }
    ComputeGraph build() && { return std::move(g_); }

  private:
    NodeId node(std::string stem, Op op, std::vector<NodeId> src, Shape shape, NodeMeta meta = meta::None{},
                DType dtype = DType::F32);
    // Node x, read for its shape before node() checks the edges: an unknown id is an Error here too.
    const CNode& at(NodeId x) const;
    int64_t nt(NodeId x) const { return at(x).shape[1]; }
    ComputeGraph g_;
    int layer_ = -1;
};

}  // namespace minfer
