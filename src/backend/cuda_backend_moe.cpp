// The CUDA backend's mixture of experts (op::MoeFfn): routing on the device, the routed pairs' products
// grouped by expert (a one-token product per pair, or in wider steps one tensor-core product per expert
// with its pairs as columns), their weighted sum (backend/cuda/moe_cuda.h). Nothing reads the host, so decode
// steps with experts are captured like the others.
#include <algorithm>

#include "backend/cuda/moe_cuda.h"
#include "backend/cuda/ops_cuda.h"
#include "backend/cuda_backend_impl.h"

namespace minfer {

namespace {

cuda::Gating gating_of(ExpertGating g) {
    switch (g) {
        case ExpertGating::Softmax:
            return cuda::Gating::kSoftmax;
        case ExpertGating::Sigmoid:
            return cuda::Gating::kSigmoid;
        case ExpertGating::SoftmaxWeight:
            return cuda::Gating::kSoftmaxChosen;
    }
    throw Error("CUDA backend: unknown expert gating");
}

// Floats of each scratch region, rounded up to whole 16-byte words (the kernels load x 16 bytes at a time).
int64_t words(int64_t floats) {
    return (floats + 3) / 4 * 4;
}

// Columns of the products per expert's tiles: about each used expert's pairs, rounded up to a width the
// kernel takes (cuda::experts_tile_fits).
int tile_cols_for(int64_t pairs, int64_t n_expert) {
    const int64_t per = (pairs + n_expert - 1) / n_expert;
    return per <= 8 ? 8 : per <= 16 ? 16 : per <= 32 ? 32 : 64;
}

// The regions of the MoE scratch for `pairs` pairs: the routing, the columns layout and quantized x of
// the products per expert (empty when each pair is its own product), then h = act(gate x, up x) and the
// experts' outputs, a row per pair or per column, and gate x and up x apart when the activation is not
// fused into the products.
struct MoeScratchLayout {
    int64_t pairs, n_ff, n_embd;
    int64_t n_cols = 0, n_tiles = 0;  // the columns layout (cuda::MoeColumns); 0: none
    int tile_cols = 0;
    int64_t rows() const { return n_cols > 0 ? n_cols : pairs; }
    int64_t col() const { return 4 * words(pairs); }
    int64_t token() const { return col() + (n_cols > 0 ? words(pairs) : 0); }
    int64_t tiles() const { return token() + words(n_cols); }
    int64_t xq() const { return tiles() + 4 * n_tiles; }
    int64_t h() const {
        const size_t bytes = n_cols > 0 ? cuda::mma_x_bytes(std::max(n_embd, n_ff), n_cols) : 0;
        return xq() + words(int64_t((bytes + 3) / 4));
    }
    int64_t out() const { return h() + words(rows() * n_ff); }
    int64_t gate() const { return out() + words(rows() * n_embd); }
    int64_t up() const { return gate() + words(rows() * n_ff); }
    int64_t floats() const { return up() + words(rows() * n_ff); }
};

// Whether the activation comes fused with the one-token products: no biases before it.
bool fused_swiglu(const op::MoeFfn& o, const meta::MoeFfn& m) {
    return o.act == ExpertAct::SwiGLU && !m.gate_b.present() && !m.up_b.present();
}

// The layout of node n's scratch: with the columns of products per expert when the step is wide enough
// and every stack fits them (never in the invariant mode, whose rows must not depend on the others).
MoeScratchLayout layout_of(const CudaBackend::Impl& im, const CNode& n) {
    const CudaOptions& opt = im.opt;
    const auto& o = std::get<op::MoeFfn>(n.op);
    const auto& m = std::get<meta::MoeFfn>(n.meta);
    MoeScratchLayout l{n.shape[1] * o.n_used, m.gate.n_out / o.n_expert, n.shape[0]};
    const bool wide = !opt.invariant && opt.moe_mma_tokens > 0 && n.shape[1] >= opt.moe_mma_tokens;
    if (!opt.moe || !wide) return l;  // without opt.moe the stacks stay on the host
    for (const WeightRef* w : {&m.gate, &m.up, &m.down})
        if (!cuda::experts_mma_fits(im.mat(*w))) return l;
    l.tile_cols = tile_cols_for(l.pairs, o.n_expert);
    l.n_cols = cuda::moe_max_columns(l.pairs, o.n_expert);
    l.n_tiles = cuda::moe_max_tiles(l.pairs, o.n_expert, l.tile_cols);
    return l;
}

// h = act(gate, up), n elements.
void activation(ExpertAct act, const float* gate, const float* up, float* h, int64_t n, cuda::Stream s) {
    switch (act) {
        case ExpertAct::SwiGLU:
            return cuda::swiglu(gate, up, h, n, s);
        case ExpertAct::SwiGLUOai:
            return cuda::swiglu_oai(gate, up, h, n, s);
    }
}

}  // namespace

bool CudaBackend::Impl::moe_supported(const CNode& n) const {
    const auto& o = std::get<op::MoeFfn>(n.op);
    const auto& m = std::get<meta::MoeFfn>(n.meta);
    return o.n_expert <= cuda::kMaxExperts && n.shape[1] <= 65535 && cuda::quant_supported(m.gate.type) &&
           cuda::quant_supported(m.up.type) && cuda::quant_supported(m.down.type);
}

size_t CudaBackend::Impl::moe_scratch_floats(const CNode& n) const {
    return size_t(layout_of(*this, n).floats());
}

void CudaBackend::Impl::moe_ffn(const CNode& n) {
    const auto& o = std::get<op::MoeFfn>(n.op);
    const auto& m = std::get<meta::MoeFfn>(n.meta);
    const MoeScratchLayout l = layout_of(*this, n);
    const int64_t nt = n.shape[1], k = o.n_used;
    float* base = moe.as<float>();
    auto* routing = reinterpret_cast<int32_t*>(base);
    cuda::MoeSlots slots{routing, base + words(l.pairs), routing + 2 * words(l.pairs),
                         routing + 3 * words(l.pairs)};
    const cuda::MoeColumns cols{
        routing + l.col(), routing + l.token(), reinterpret_cast<cuda::ExpertTile*>(routing + l.tiles()),
        l.n_cols,          l.n_tiles,           l.tile_cols};
    const cuda::MoeRouting r{o.n_expert, k, gating_of(o.gating), o.norm};
    cuda::moe_route(dev(n.src[1]), nt, r, slots, stream, l.n_cols > 0 ? &cols : nullptr);
    const float* x = dev(n.src[0]);
    float *h = base + l.h(), *out = base + l.out(), *gate = base + l.gate(), *up = base + l.up();
    if (l.n_cols > 0) {
        void* xq = base + l.xq();
        cuda::quantize_x_mma_columns(x, l.n_embd, cols.token, true, l.n_cols, xq, stream);
        cuda::matmul_mma_experts(mat(m.gate), l.n_ff, xq, cols, gate, vec(m.gate_b), stream);
        cuda::matmul_mma_experts(mat(m.up), l.n_ff, xq, cols, up, vec(m.up_b), stream);
        activation(o.act, gate, up, h, l.n_cols * l.n_ff, stream);
        cuda::quantize_x_mma_columns(h, l.n_ff, cols.token, false, l.n_cols, xq, stream);
        cuda::matmul_mma_experts(mat(m.down), l.n_embd, xq, cols, out, vec(m.down_b), stream);
        slots.where = cols.col;  // each pair's output row is its column
    } else {
        const cuda::ExpertPairs tokens{slots.order, slots.ids, l.pairs, k},
            rows{slots.order, slots.ids, l.pairs, 0};
        if (fused_swiglu(o, m)) {
            cuda::matvec_swiglu_experts(mat(m.gate), mat(m.up), l.n_ff, x, tokens, h, stream);
        } else {
            cuda::matvec_experts(mat(m.gate), l.n_ff, x, tokens, gate, vec(m.gate_b), stream);
            cuda::matvec_experts(mat(m.up), l.n_ff, x, tokens, up, vec(m.up_b), stream);
            activation(o.act, gate, up, h, l.pairs * l.n_ff, stream);
        }
        cuda::matvec_experts(mat(m.down), l.n_embd, h, rows, out, vec(m.down_b), stream);
    }
    cuda::moe_combine(out, slots, nt, k, l.n_embd, dev(n.id), stream);
}

}  // namespace minfer
