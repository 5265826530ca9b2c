#include "graph/builder.h"

#include "util/error.h"

namespace minfer {

std::string node_name(std::string_view stem, int layer) {
    std::string name(stem);
    if (layer >= 0) name += "-" + std::to_string(layer);
    return name;
}

std::string_view node_stem(const CNode& n) {
    const std::string_view name = n.name;
    if (n.layer < 0) return name;
    const size_t dash = name.rfind('-');
    return dash == std::string_view::npos ? name : name.substr(0, dash);
}

std::string weight_stem(const std::string& weight) {
    std::string_view s = weight;
    if (s.starts_with("blk.")) {
        const size_t dot = s.find('.', 4);
        s = dot == std::string_view::npos ? s : s.substr(dot + 1);
    }
    if (s.ends_with(".weight")) s.remove_suffix(7);
    return std::string(s);
}

int node_kv_layer(const CNode& n) {
    if (const int l = kv_layer(n.op); l >= 0) return l;
    if (const auto* load = std::get_if<op::KvcacheLoad>(&n.op)) return load->layer;
    if (const auto* a = std::get_if<meta::Attn>(&n.meta)) return a->layer;
    return -1;
}

NodeId GraphBuilder::node(std::string stem, Op op, std::vector<NodeId> src, Shape shape, NodeMeta meta,
                          DType dtype) {
    const auto id = NodeId(g_.nodes.size());
    for (NodeId s : src)
        if (s < 0 || s >= id)
            throw Error("graph builder: node '" + stem + "' references unknown id " + std::to_string(s));
    CNode n{id, "", op, std::move(src), shape, dtype, std::nullopt, std::move(meta)};
    const int own = node_kv_layer(n);  // a KV op or attention belongs to its KV layer
    n.layer = own >= 0 ? own : layer_;
    n.name = node_name(stem, n.layer);
    g_.nodes.push_back(std::move(n));
    return id;
}

const CNode& GraphBuilder::at(NodeId x) const {
    if (x < 0 || size_t(x) >= g_.nodes.size())
        throw Error("graph builder: unknown node id " + std::to_string(x));
    return g_[x];
}

NodeId GraphBuilder::input(const std::string& name, Shape shape, DType dtype) {
    const NodeId id = node(name, op::Input{}, {}, shape, meta::None{}, dtype);
    g_.inputs.push_back(id);
    return id;
}

NodeId GraphBuilder::embedding(NodeId ids, const WeightRef& table) {
    // The table is not a node: weights are referenced by name and resolved at execution.
    return node("embed", op::GetRows{}, {ids}, {table.n_in, at(ids).shape[0], 1, 1}, meta::Weight{table});
}

NodeId GraphBuilder::embedding_shard(NodeId ids, const WeightRef& table, int64_t first) {
    return node("embed", op::GetRows{first, true}, {ids}, {table.n_in, at(ids).shape[0], 1, 1},
                meta::Weight{table});
}

NodeId GraphBuilder::all_reduce(NodeId x) {
    return node(std::string(node_stem(at(x))) + "_reduce", op::AllReduce{}, {x}, at(x).shape);
}

NodeId GraphBuilder::all_gather(NodeId x, int ranks) {
    const Shape& s = at(x).shape;
    return node(std::string(node_stem(at(x))) + "_gather", op::AllGather{ranks}, {x},
                {s[0] * ranks, s[1], 1, 1});
}

NodeId GraphBuilder::get_rows(NodeId x, NodeId ids) {
    return node("get_rows", op::GetRows{}, {x, ids}, {at(x).shape[0], at(ids).shape[0], 1, 1});
}

NodeId GraphBuilder::rms_norm(NodeId x, const WeightRef& w, float eps) {
    return node(weight_stem(w.name), op::RmsNorm{eps}, {x}, at(x).shape, meta::Weight{w});
}

NodeId GraphBuilder::qk_norm(NodeId x, const WeightRef& w, int64_t nh, int64_t hd, float eps) {
    return node(weight_stem(w.name), op::QkNorm{hd, nh, eps}, {x}, at(x).shape, meta::Weight{w});
}

NodeId GraphBuilder::matmul(NodeId x, const WeightRef& w, const WeightRef& bias) {
    if (at(x).shape[0] != w.n_in)
        throw Error("graph builder: matmul " + w.name + " expects width " + std::to_string(w.n_in) +
                    ", got " + std::to_string(at(x).shape[0]));
    return node(weight_stem(w.name), op::MatMul{}, {x}, {w.n_out, nt(x), 1, 1}, meta::MatMul{w, bias});
}

NodeId GraphBuilder::rope(NodeId x, NodeId pos, RopeStyle style, const meta::Rope& m) {
    return node(std::string(node_stem(at(x))) + "_rope", op::Rope{style}, {x, pos}, at(x).shape, m);
}

NodeId GraphBuilder::silu(NodeId x) {
    return node("silu", op::Silu{}, {x}, at(x).shape);
}
NodeId GraphBuilder::mul(NodeId a, NodeId b) {
    return node("mul", op::Mul{}, {a, b}, at(a).shape);
}
NodeId GraphBuilder::add(NodeId a, NodeId b) {
    return node("add", op::Add{}, {a, b}, at(a).shape);
}
NodeId GraphBuilder::swiglu(NodeId gate, NodeId up) {
    return node("swiglu", op::SwiGLU{}, {gate, up}, at(gate).shape);
}
NodeId GraphBuilder::geglu(NodeId gate, NodeId up) {
    return node("geglu", op::GeGLU{}, {gate, up}, at(gate).shape);
}
NodeId GraphBuilder::scale(NodeId x, float factor) {
    return node("scale", op::Scale{factor}, {x}, at(x).shape);
}
NodeId GraphBuilder::argmax(NodeId x) {
    return node("argmax", op::ArgMax{}, {x}, {nt(x), 1, 1, 1}, meta::None{}, DType::I32);
}

namespace {
std::vector<NodeId> with_kv_index(std::vector<NodeId> src, const KvIndex& at) {
    src.push_back(at.positions);
    if (at.seq_slot >= 0) src.insert(src.end(), {at.seq_slot, at.block_table});
    return src;
}
}  // namespace

NodeId GraphBuilder::kvcache_store(int layer, NodeId k, NodeId v, const KvIndex& at, const meta::Kv& m) {
    // The declared shape sizes the persistent region.
    return node("kv_store", op::KvcacheStore{layer}, with_kv_index({k, v}, at), {m.n_embd, m.n_ctx, 1, 1}, m);
}

NodeId GraphBuilder::kvcache_load(int layer, const meta::Kv& m) {
    return node("kv_load", op::KvcacheLoad{layer}, {}, {m.n_embd, m.n_ctx, 1, 1}, m);
}

NodeId GraphBuilder::attn(NodeId q, NodeId kv, const KvIndex& at, const meta::Attn& m, int64_t window) {
    const op::Attn o = window > 0 ? op::Attn{AttnMode::SlidingWindow, window} : op::Attn{AttnMode::Causal};
    // The output width comes from the metadata, not from q: with FusedQKV, q is a wider concat buffer.
    return node("attn", o, with_kv_index({q, kv}, at), {m.n_head * m.hd, nt(q), 1, 1}, m);
}

NodeId GraphBuilder::fused_qkv(int layer, NodeId x, const KvIndex& at, const meta::FusedQkv& m) {
    return node("fused_qkv", op::FusedQKV{layer}, with_kv_index({x}, at), {m.q.weight.n_out, nt(x), 1, 1}, m);
}

NodeId GraphBuilder::fused_qkv_norm(int layer, NodeId x, const KvIndex& at, const meta::FusedQkv& m) {
    return node("fused_qkv_norm", op::FusedQkvNorm{layer}, with_kv_index({x}, at),
                {m.q.weight.n_out, nt(x), 1, 1}, m);
}

NodeId GraphBuilder::qkv_bias_rope_store(int layer, NodeId q, NodeId k, NodeId v, const KvIndex& kv,
                                         const meta::FusedQkv& m) {
    return node("qkv_bias_rope_store", op::QkvBiasRopeStore{layer}, with_kv_index({q, k, v}, kv), at(q).shape,
                m);
}

NodeId GraphBuilder::fused_ffn(NodeId x, const meta::FusedFfn& m) {
    return node("fused_ffn", op::FusedFFN{}, {x}, {m.gate.n_out, nt(x), 1, 1}, m);
}

NodeId GraphBuilder::moe_ffn(NodeId x, NodeId router, const op::MoeFfn& o, const meta::MoeFfn& m) {
    const int64_t n_embd = at(x).shape[0];
    if (at(router).shape[0] != o.n_expert || nt(router) != nt(x) || o.n_used < 1 || o.n_used > o.n_expert)
        throw Error("moe_ffn: router logits " + std::to_string(at(router).shape[0]) + " x " +
                    std::to_string(nt(router)) + " for " + std::to_string(o.n_expert) + " experts (" +
                    std::to_string(o.n_used) + " used) and " + std::to_string(nt(x)) + " tokens");
    if (m.gate.n_in != n_embd || m.down.n_out != n_embd * o.n_expert || m.gate.n_out != m.up.n_out ||
        m.gate.n_out != m.down.n_in * o.n_expert)
        throw Error("moe_ffn: expert weights do not match n_embd " + std::to_string(n_embd) + " and " +
                    std::to_string(o.n_expert) + " experts");
    return node("ffn_moe", o, {x, router}, {n_embd, nt(x), 1, 1}, m);
}

}  // namespace minfer
