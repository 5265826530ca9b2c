// The compute-graph IR: nodes in build order (which is a topological order by construction), the
// input leaves filled each step, and the outputs. No buffers, no data, no numbers: structure and shape
// only. Shapes are [d, nt, 1, 1]: feature width first, then token count; memory is token-major [nt][d].
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "gguf/ggml_type.h"
#include "graph/op.h"
#include "util/overload.h"

namespace minfer {

using NodeId = int32_t;
using Shape = std::array<int64_t, 4>;

enum class BackendKind : uint8_t { Cpu, Cuda };
const char* backend_name(BackendKind b);

// A weight referenced by its GGUF name; the executor resolves the name to data.
struct WeightRef {
    std::string name;  // "" when the model has no such tensor
    GgmlType type = GgmlType::F32;
    int64_t n_in = 0, n_out = 0;  // GGUF dims [in, out]; 1-D tensors have n_out = 1
    bool present() const { return !name.empty(); }
    bool operator==(const WeightRef&) const = default;
};

namespace meta {
struct None {
    bool operator==(const None&) const = default;
};
struct Weight {  // embedding table, norm weight
    WeightRef weight;
    bool operator==(const Weight&) const = default;
};
struct MatMul {
    WeightRef weight;  // [n_in, n_out]
    WeightRef bias;    // [n_out], optional: applied inline by the kernel
    bool operator==(const MatMul&) const = default;
};
// YaRN RoPE scaling (Peng et al.): pair i's frequency blends the scaled one (base^(-2i/n_rot) * freq_scale)
// with the unscaled one, the latter's weight 1 - clamp((i - low) / (high - low), 0, 1); cos and sin are
// multiplied by mscale. Off when high <= 0. In double: the angles' error grows with the position.
struct Yarn {
    double low = 0.0, high = 0.0, mscale = 1.0;
    bool on() const { return high > 0.0; }
    bool operator==(const Yarn&) const = default;
};
struct Rope {
    int64_t n_head, head_dim, n_rot;
    float freq_base;
    float freq_scale = 1.0f;  // positions are multiplied by it (linear RoPE scaling: 1 / factor)
    Yarn yarn{};
    bool operator==(const Rope&) const = default;
};
// How a token's KV slot is found: slot = block_table[seq_slot * max_blocks + pos / block] * block +
// pos % block.
struct Paging {
    int64_t block, max_blocks;
    // log2 of the block size, at least min_shift (a backend's smallest block). Blocks are powers of
    // two, or the one block of the unpaged layout (max_blocks 1), whose rows are then all below
    // 2^shift. Throws for a paged block size that is not a power of two of at least 2^min_shift.
    int32_t shift(int32_t min_shift = 0) const;
    int64_t n_pos() const { return block * max_blocks; }  // positions a sequence can reach
    bool operator==(const Paging&) const = default;
};
struct Attn {
    int layer;
    int64_t n_head, n_head_kv, hd, hd_kv;
    int64_t nkt;  // KV row stride = n_head_kv * hd_kv
    float scale;  // 1/sqrt(hd)
    Paging paging;
    GgmlType kv_type = GgmlType::F32;  // element type of the K/V rows
    WeightRef sinks{};  // optional [n_head]: each head's sink logit, in the softmax's sum only (gpt-oss)
    bool operator==(const Attn&) const = default;
};
struct Kv {
    int64_t n_embd, n_ctx;  // region shape [n_embd, n_ctx]
    Paging paging;
    GgmlType type = GgmlType::F32;  // element type of the rows: F32, F16 or Q8_0
    bool operator==(const Kv&) const = default;
};
struct FusedQkv {  // the three projections and everything their epilogue needs
    MatMul q, k, v;
    WeightRef q_norm, k_norm;  // Qwen3 only
    float norm_eps;
    Rope rope;
    int64_t n_head_kv;
    RopeStyle style;
    Kv kv;
    bool operator==(const FusedQkv&) const = default;
};
struct FusedFfn {
    WeightRef gate, up;  // [n_embd, n_ff] each
    bool operator==(const FusedFfn&) const = default;
};
// A mixture of experts' stacked FFN weights, each GGUF tensor [n_in, n_out, n_expert] named as the 2-D
// matrix [n_in, n_out * n_expert] it is in memory: expert e's rows are e * n_out .. (e + 1) * n_out - 1.
struct MoeFfn {
    WeightRef gate, up;      // [n_embd, n_ff_exp * n_expert] each
    WeightRef down;          // [n_ff_exp, n_embd * n_expert]
    WeightRef gate_b, up_b;  // optional [n_ff_exp, n_expert] each: per-expert biases (gpt-oss)
    WeightRef down_b;        // optional [n_embd, n_expert]
    bool operator==(const MoeFfn&) const = default;
};
}  // namespace meta

using NodeMeta = std::variant<meta::None, meta::Weight, meta::MatMul, meta::Rope, meta::Attn, meta::Kv,
                              meta::FusedQkv, meta::FusedFfn, meta::MoeFfn>;

// f(w) for every weight that a node's metadata names, present or not: the one list of which metadata
// carry weights, one case per alternative, so that a new one does not compile until it is listed here.
template <class F>
void for_each_weight(const NodeMeta& meta, F&& f) {
    std::visit(Overload{
                   [](const meta::None&) {},
                   [](const meta::Rope&) {},
                   [&](const meta::Attn& m) { f(m.sinks); },
                   [](const meta::Kv&) {},
                   [&](const meta::Weight& m) { f(m.weight); },
                   [&](const meta::MatMul& m) { f(m.weight), f(m.bias); },
                   [&](const meta::FusedQkv& m) {
                       for (const meta::MatMul* p : {&m.q, &m.k, &m.v}) f(p->weight), f(p->bias);
                       f(m.q_norm), f(m.k_norm);
                   },
                   [&](const meta::FusedFfn& m) { f(m.gate), f(m.up); },
                   [&](const meta::MoeFfn& m) {
                       f(m.gate), f(m.up), f(m.down), f(m.gate_b), f(m.up_b), f(m.down_b);
                   },
               },
               meta);
}

struct CNode {
    NodeId id = 0;
    std::string name;
    Op op;
    std::vector<NodeId> src;  // the edges: ids of the nodes this one reads
    Shape shape{};            // output shape [d, nt, 1, 1]
    DType dtype = DType::F32;
    std::optional<BackendKind> backend;  // filled by backend assignment (sched/)
    NodeMeta meta;
    int layer = -1;  // the decoder layer the node belongs to; -1 outside the layers (graph/builder.h)
    int64_t n_elements() const { return shape[0] * shape[1] * shape[2] * shape[3]; }
};

struct ComputeGraph {
    std::vector<CNode> nodes;     // build order = execution order
    std::vector<NodeId> inputs;   // leaves filled from outside each step
    std::vector<NodeId> outputs;  // logits
    uint64_t uid = 0;             // set when the graph is cached; CUDA-graph replay keys on it

    const CNode& operator[](NodeId id) const { return nodes[size_t(id)]; }
    CNode& operator[](NodeId id) { return nodes[size_t(id)]; }
    NodeId find_input(const std::string& name) const;  // -1 when absent
    // Validates that every edge points to an earlier-existing node and there is no cycle (Kahn);
    // returns a stable topological order. Throws Error on a dangling id or a cycle.
    std::vector<NodeId> topo_order() const;
    // consumers[i] = ids of the nodes that read node i.
    std::vector<std::vector<NodeId>> consumers() const;
};

// Node-for-node comparison of op, payload, meta, edges, shape and dtype; on the first difference
// returns a description of it ("node 12: op Attn != Add"), std::nullopt when identical.
std::optional<std::string> structural_diff(const ComputeGraph& a, const ComputeGraph& b);

// The graph's attention layers by kind: the largest window of those attending within one (op::Attn's
// SlidingWindow; 0 without such layers), how many do, and how many attend to the whole past.
struct AttnLayers {
    int64_t window = 0;
    int n_window = 0, n_global = 0;
};
AttnLayers attn_layers(const ComputeGraph& g);

}  // namespace minfer
