// The CUDA backend's mixture of experts (op::MoeFfn): routing on the device, the routed pairs' products
// grouped by expert, their weighted sum (backend/cuda/moe_cuda.h). Nothing reads the host, so decode steps
// with experts are captured like the others.
#include "backend/cuda/moe_cuda.h"
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

// The regions of the MoE scratch for `pairs` pairs: the routing, then h = act(gate x, up x) and the
// experts' outputs, and gate x and up x apart when the activation is not fused into the products.
struct MoeScratchLayout {
    int64_t pairs, n_ff, n_embd;
    int64_t routing() const { return 4 * words(pairs); }
    int64_t h() const { return routing(); }
    int64_t out() const { return h() + words(pairs * n_ff); }
    int64_t gate() const { return out() + words(pairs * n_embd); }
    int64_t up() const { return gate() + words(pairs * n_ff); }
    int64_t floats() const { return up() + words(pairs * n_ff); }
};

MoeScratchLayout layout_of(const CNode& n) {
    const auto& o = std::get<op::MoeFfn>(n.op);
    const auto& m = std::get<meta::MoeFfn>(n.meta);
    return {n.shape[1] * o.n_used, m.gate.n_out / o.n_expert, n.shape[0]};
}

// Whether the products take the fused SwiGLU kernel: no biases before the activation.
bool fused_swiglu(const op::MoeFfn& o, const meta::MoeFfn& m) {
    return o.act == ExpertAct::SwiGLU && !m.gate_b.present() && !m.up_b.present();
}

}  // namespace

bool CudaBackend::Impl::moe_supported(const CNode& n) const {
    const auto& o = std::get<op::MoeFfn>(n.op);
    const auto& m = std::get<meta::MoeFfn>(n.meta);
    return o.n_expert <= cuda::kMaxExperts && n.shape[1] <= 65535 && cuda::quant_supported(m.gate.type) &&
           cuda::quant_supported(m.up.type) && cuda::quant_supported(m.down.type);
}

size_t CudaBackend::Impl::moe_scratch_floats(const CNode& n) {
    return size_t(layout_of(n).floats());
}

void CudaBackend::Impl::moe_ffn(const CNode& n) {
    const auto& o = std::get<op::MoeFfn>(n.op);
    const auto& m = std::get<meta::MoeFfn>(n.meta);
    const MoeScratchLayout l = layout_of(n);
    const int64_t nt = n.shape[1], k = o.n_used;
    float* base = moe.as<float>();
    auto* routing = reinterpret_cast<int32_t*>(base);
    const cuda::MoeSlots slots{routing, base + words(l.pairs), routing + 2 * words(l.pairs),
                               routing + 3 * words(l.pairs)};
    cuda::moe_route(dev(n.src[1]), nt, {o.n_expert, k, gating_of(o.gating), o.norm}, slots, stream);
    const cuda::ExpertPairs tokens{slots.order, slots.ids, l.pairs, k},
        rows{slots.order, slots.ids, l.pairs, 0};
    const float* x = dev(n.src[0]);
    float *h = base + l.h(), *out = base + l.out();
    if (fused_swiglu(o, m)) {
        cuda::matvec_swiglu_experts(mat(m.gate), mat(m.up), l.n_ff, x, tokens, h, stream);
    } else {
        float *gate = base + l.gate(), *up = base + l.up();
        cuda::matvec_experts(mat(m.gate), l.n_ff, x, tokens, gate, vec(m.gate_b), stream);
        cuda::matvec_experts(mat(m.up), l.n_ff, x, tokens, up, vec(m.up_b), stream);
        switch (o.act) {
            case ExpertAct::SwiGLU:
                cuda::swiglu(gate, up, h, l.pairs * l.n_ff, stream);
                break;
            case ExpertAct::SwiGLUOai:
                cuda::swiglu_oai(gate, up, h, l.pairs * l.n_ff, stream);
                break;
        }
    }
    cuda::matvec_experts(mat(m.down), l.n_embd, h, rows, out, vec(m.down_b), stream);
    cuda::moe_combine(out, slots, nt, k, l.n_embd, dev(n.id), stream);
}

}  // namespace minfer
