// Operations of the compute graph. Every op carries its full payload and compares by value, so two
// graphs can be checked node for node (the reuse tripwire) and a dump reads `RmsNorm { eps: 1e-06 }`.
// Positions, sequence slots and block tables are data, never structure: KV ops carry only their layer;
// the input nodes tell them where to write and how far to attend.
#pragma once
#include <cstdint>
#include <string>
#include <variant>

namespace minfer {

enum class DType : uint8_t { F32, I32 };
enum class RopeStyle : uint8_t { Normal, Neox };  // Normal: adjacent pairs; Neox: halves
// Causal: a query at position p attends to positions 0..p; SlidingWindow: to p - window + 1 .. p only.
enum class AttnMode : uint8_t { Causal, SlidingWindow };
// How a mixture-of-experts router turns its logits into expert probabilities (GGUF
// <arch>.expert_gating_func: 1 softmax, 2 sigmoid, 3 softmax over the chosen experts' logits only).
enum class ExpertGating : uint8_t { Softmax, Sigmoid, SoftmaxWeight };
// An expert's activation: SwiGLU silu(g) * u, or gpt-oss's clamped form (g = min(g, 7), u = clamp(u, -7,
// 7)): g * sigmoid(1.702 g) * (u + 1).
enum class ExpertAct : uint8_t { SwiGLU, SwiGLUOai };

namespace op {
struct Input {  // leaf filled from outside each step (token ids, positions, slots, block table, out ids)
    bool operator==(const Input&) const = default;
};
struct GetRows {  // src: [table, ids]; embedding lookups and the n_out tail selection
    // An embedding shard's first row: id i reads row i - first, and an id outside the shard's rows gives a
    // zero row (the other ranks hold it; an AllReduce follows). 0 and unused when not sharded.
    int64_t first = 0;
    bool shard = false;
    bool operator==(const GetRows&) const = default;
};
struct RmsNorm {
    float eps;
    bool operator==(const RmsNorm&) const = default;
};
struct QkNorm {  // per-head RMSNorm over nh heads of hd (Qwen3)
    int64_t hd, nh;
    float eps;
    bool operator==(const QkNorm&) const = default;
};
struct MatMul {  // weight (and optional bias) named in MatMulMeta; src: [x] or [x, residual]
    bool transpose_b = false;
    bool residual = false;  // src[1] is added to the product (set by the fuse_matmul_add pass)
    bool operator==(const MatMul&) const = default;
};
struct Rope {
    RopeStyle style;
    bool operator==(const Rope&) const = default;
};
struct Attn {  // src: [q, kv_load, positions] + [seq_slot, block_table] when paged
    AttnMode mode;
    int64_t window = 0;  // SlidingWindow: how many positions a query sees, itself included
    bool operator==(const Attn&) const = default;
    // The first position a query at `pos` attends to.
    int64_t first_position(int64_t pos) const {
        return mode == AttnMode::SlidingWindow && pos >= window ? pos - window + 1 : 0;
    }
};
struct KvcacheStore {  // src: [k, v, positions] + [seq_slot, block_table] when paged
    int layer;
    bool operator==(const KvcacheStore&) const = default;
};
struct KvcacheLoad {  // no sources: a view of the layer's region
    int layer;
    bool operator==(const KvcacheLoad&) const = default;
};
struct Add {
    bool operator==(const Add&) const = default;
};
struct Mul {
    bool operator==(const Mul&) const = default;
};
struct Silu {
    bool operator==(const Silu&) const = default;
};
struct SwiGLU {  // silu(src0) * src1: what the fusion pass turns Mul(Silu(a), b) into
    bool operator==(const SwiGLU&) const = default;
};
struct GeGLU {  // gelu(src0) * src1, GELU in its tanh form (Gemma's gelu_pytorch_tanh)
    bool operator==(const GeGLU&) const = default;
};
struct Scale {  // src0 * factor (Gemma's embedding scale)
    float factor;
    bool operator==(const Scale&) const = default;
};
// Decode fusions (chosen at build time, gated by GraphParams): one node instead of a chain.
// src: [x, positions] (+ [seq_slot, block_table] when paged)
struct FusedQKV {  // concat QK(V) matmul + biases + RoPE(Q, K) + K/V store; output is Q
    int layer;
    bool operator==(const FusedQKV&) const = default;
};
// src: [q, k, v, positions] (+ [seq_slot, block_table] when paged)
struct QkvBiasRopeStore {  // epilogue only, for Q and K of different types
    int layer;
    bool operator==(const QkvBiasRopeStore&) const = default;
};
struct FusedFFN {  // concat gate|up matmul + SwiGLU; output [n_ff, nt]
    bool operator==(const FusedFFN&) const = default;
};
struct FusedQkvNorm {  // FusedQKV plus Qwen3's per-head Q/K RMSNorm
    int layer;
    bool operator==(const FusedQkvNorm&) const = default;
};
// src: [logits [n_vocab, n_out]] -> [n_out] i32: each row's largest logit's id (the lowest on ties), so
// greedy decoding needs only the ids back from a device, not n_out rows of the vocabulary.
struct ArgMax {
    bool operator==(const ArgMax&) const = default;
};
// Tensor-parallel collectives over the ranks of a group (one graph per rank, built from its shard).
// src: [x [d, nt]] -> [d, nt]: the sum over ranks, added in rank order, so every rank holds the same bits.
struct AllReduce {
    bool operator==(const AllReduce&) const = default;
};
// src: [x [d, nt]] -> [ranks * d, nt]: each row is every rank's row, rank by rank (a vocabulary- or
// head-split product made whole).
struct AllGather {
    int ranks;
    bool operator==(const AllGather&) const = default;
};
// Mixture-of-experts FFN. src: [x [n_embd, nt], router logits [n_expert, nt]] -> [n_embd, nt]. Each token
// takes the n_used experts of highest probability (gating of its logits; the lower id on ties), their
// probabilities renormalised to sum 1 when `norm`; its output is sum_j p_j * down_j(silu(gate_j x) * up_j x),
// added in the order of the selection. Tokens are grouped by expert, so each expert's weights are read
// once per forward for all the tokens routed to it (meta::MoeFfn names the stacked expert weights).
struct MoeFfn {
    int64_t n_expert, n_used;
    ExpertGating gating;
    bool norm;
    ExpertAct act = ExpertAct::SwiGLU;
    bool operator==(const MoeFfn&) const = default;
};
}  // namespace op

using Op = std::variant<op::Input, op::GetRows, op::RmsNorm, op::QkNorm, op::MatMul, op::Rope, op::Attn,
                        op::KvcacheStore, op::KvcacheLoad, op::Add, op::Mul, op::Silu, op::SwiGLU,
                        op::FusedQKV, op::QkvBiasRopeStore, op::FusedFFN, op::FusedQkvNorm, op::ArgMax,
                        op::AllReduce, op::AllGather, op::MoeFfn, op::GeGLU, op::Scale>;

const char* op_name(const Op& op);    // "RmsNorm"
std::string op_string(const Op& op);  // "RmsNorm { eps: 1e-06 }"
const char* dtype_name(DType t);
// The layer whose KV region a node writes (KvcacheStore and the QKV fusions); -1 for other ops.
int kv_layer(const Op& op);
// Where the KV-index sources (positions, then seq_slot and block_table when paged) start in the sources
// of an Attn, KvcacheStore or QKV-fusion node; -1 for other ops.
int kv_index_src(const Op& op);
const char* rope_style_name(RopeStyle s);
const char* expert_gating_name(ExpertGating g);  // "softmax", "sigmoid", "softmax_weight"

}  // namespace minfer
