#include "graph/op.h"

#include <sstream>
#include <type_traits>

#include "util/overload.h"

namespace minfer {

const char* op_name(const Op& o) {
    static constexpr const char* names[] = {
        "Input",     "GetRows",      "RmsNorm",          "QkNorm",   "MatMul",       "RoPE",
        "Attn",      "KvcacheStore", "KvcacheLoad",      "Add",      "Mul",          "Silu",
        "SwiGLU",    "FusedQKV",     "QkvBiasRopeStore", "FusedFFN", "FusedQkvNorm", "ArgMax",
        "AllReduce", "AllGather",    "MoeFfn",           "GeGLU",    "Scale"};
    static_assert(std::size(names) == std::variant_size_v<Op>);
    return names[o.index()];
}

int kv_layer(const Op& o) {
    return std::visit(
        Overload{[](const op::FusedQKV& p) { return p.layer; },
                 [](const op::FusedQkvNorm& p) { return p.layer; },
                 [](const op::QkvBiasRopeStore& p) { return p.layer; },
                 [](const op::KvcacheStore& p) { return p.layer; }, [](const auto&) { return -1; }},
        o);
}

int kv_index_src(const Op& o) {
    return std::visit(
        Overload{[](const op::Attn&) { return 2; }, [](const op::KvcacheStore&) { return 2; },
                 [](const op::FusedQKV&) { return 1; }, [](const op::FusedQkvNorm&) { return 1; },
                 [](const op::QkvBiasRopeStore&) { return 3; }, [](const auto&) { return -1; }},
        o);
}

const char* dtype_name(DType t) {
    return t == DType::F32 ? "f32" : "i32";
}
const char* rope_style_name(RopeStyle s) {
    return s == RopeStyle::Normal ? "Normal" : "Neox";
}
const char* expert_gating_name(ExpertGating g) {
    switch (g) {
        case ExpertGating::Softmax:
            return "softmax";
        case ExpertGating::Sigmoid:
            return "sigmoid";
        case ExpertGating::SoftmaxWeight:
            return "softmax_weight";
    }
    return "";
}

std::string op_string(const Op& o) {
    std::ostringstream s;
    s << op_name(o);
    std::visit(Overload{
                   [&](const op::GetRows& p) {
                       if (p.shard) s << " { first: " << p.first << " }";
                   },
                   [&](const op::AllGather& p) { s << " { ranks: " << p.ranks << " }"; },
                   [&](const op::RmsNorm& p) { s << " { eps: " << p.eps << " }"; },
                   [&](const op::QkNorm& p) {
                       s << " { hd: " << p.hd << ", nh: " << p.nh << ", eps: " << p.eps << " }";
                   },
                   [&](const op::MatMul& p) {
                       s << " { transpose_b: " << (p.transpose_b ? "true" : "false")
                         << ", residual: " << (p.residual ? "true" : "false") << " }";
                   },
                   [&](const op::Rope& p) { s << " { style: " << rope_style_name(p.style) << " }"; },
                   [&](const op::Attn& p) {
                       if (p.mode == AttnMode::Causal)
                           s << " { mode: Causal }";
                       else
                           s << " { mode: SlidingWindow, window: " << p.window << " }";
                   },
                   [&](const op::Scale& p) { s << " { factor: " << p.factor << " }"; },
                   [&](const op::KvcacheStore& p) { s << " { layer: " << p.layer << " }"; },
                   [&](const op::KvcacheLoad& p) { s << " { layer: " << p.layer << " }"; },
                   [&](const op::FusedQKV& p) { s << " { layer: " << p.layer << " }"; },
                   [&](const op::QkvBiasRopeStore& p) { s << " { layer: " << p.layer << " }"; },
                   [&](const op::FusedQkvNorm& p) { s << " { layer: " << p.layer << " }"; },
                   [&](const op::MoeFfn& p) {
                       s << " { n_expert: " << p.n_expert << ", n_used: " << p.n_used
                         << ", gating: " << expert_gating_name(p.gating)
                         << ", norm: " << (p.norm ? "true" : "false")
                         << (p.act == ExpertAct::SwiGLUOai ? ", act: swiglu_oai" : "") << " }";
                   },
                   [&](const auto&) {},
               },
               o);
    return s.str();
}

}  // namespace minfer
