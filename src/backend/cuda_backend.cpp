// The CUDA backend: construction and the per-node dispatch to the kernels (products by width:
// matrix-vector, int8 or f16 tensor cores, cuBLAS). Decode segments captured into CUDA graphs are in
// cuda_backend_capture.cpp, weight upload and scratch planning in cuda_backend_setup.cpp, profiling in
// cuda_backend_profile.cpp; the state they share in cuda_backend_impl.h.
#include "backend/cuda_backend_impl.h"

namespace minfer {

CudaBackend::CudaBackend(const GgufFile& file, const WeightSet& weights, const CudaOptions& options)
    : impl_(std::make_unique<Impl>(file, options)) {
    if (cuda::device_count() == 0) throw Error("--device cuda: no CUDA device is available");
    cuda::use_device(options.device);
    MINFER_CUDA_CHECK(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking));
    blas_check(cuda::cublas().create(&impl_->blas), "cublasCreate");
    blas_check(cuda::cublas().set_stream(impl_->blas, impl_->stream), "cublasSetStream");
    impl_->blas_ws.reserve(size_t(32) << 20);  // a fixed workspace: no allocation inside captures
    blas_check(cuda::cublas().set_workspace(impl_->blas, impl_->blas_ws.ptr, impl_->blas_ws.bytes),
               "cublasSetWorkspace");
    impl_->upload_all(weights);
}

CudaBackend::~CudaBackend() = default;

size_t CudaBackend::half_copies() const {
    return impl_->halves.size();
}

bool CudaBackend::supports(const CNode& n) const {
    // Tensor-parallel collectives run here through NCCL when the rank has a device group, otherwise on the
    // host (the CPU backend's communicator); vocabulary-shard lookups on the host: the executor moves their
    // few rows across.
    if (std::holds_alternative<op::AllReduce>(n.op) || std::holds_alternative<op::AllGather>(n.op))
        return impl_->opt.nccl != nullptr;
    if (const auto* rows = std::get_if<op::GetRows>(&n.op); rows && rows->shard) return false;
    // The KV regions on the device hold f32 rows.
    if (const auto* a = std::get_if<meta::Attn>(&n.meta)) return a->kv_type == GgmlType::F32;
    if (const auto* kv = std::get_if<meta::Kv>(&n.meta)) return kv->type == GgmlType::F32;
    if (const auto* f = std::get_if<meta::FusedQkv>(&n.meta)) return f->kv.type == GgmlType::F32;
    // The fused gate/up kernel is a matvec: at most kMaxMatvecTokens columns.
    if (std::holds_alternative<op::FusedFFN>(n.op)) return n.shape[1] <= cuda::kMaxMatvecTokens;
    if (std::holds_alternative<op::MoeFfn>(n.op)) return impl_->opt.moe && impl_->moe_supported(n);
    const auto* mm = std::get_if<meta::MatMul>(&n.meta);
    return !mm || cuda::quant_supported(mm->weight.type);
}

void CudaBackend::prepare(const ComputeGraph& g) {
    const bool paged = g.find_input("seq_slot") >= 0;
    impl_->gemm_tokens = impl_->opt.invariant ? INT64_MAX : paged ? 2 : cuda::kMaxMatvecTokens + 1;
    impl_->reserve_kv(g);  // new layers' regions leave the captured ones in place
    // Captured graphs (of this graph and of the other buckets) hold device addresses: they stay valid
    // until a buffer they read moves. Each keeps the gemm_tokens, host outputs and kernel choices of
    // its own graph, which prepare recomputes identically when that graph is active again.
    const bool moved = impl_->reserve_scratch(g);
    if (impl_->reserve_rope_table(g) || moved) impl_->drop_graphs();
    impl_->choose_host_outputs(g);
    const NodeId tok = g.find_input("token_ids");
    // Decode steps, and every step of a paged (batched) graph, whose attention reads only device data;
    // unpaged prefill may take attention_gemm, which reads the positions on the host.
    impl_->capturable = (tok >= 0 && g[tok].shape[0] == 1) || paged;
}

void CudaBackend::bind(const BufferPlan& plan) {
    impl_->offset = plan.offset;  // captures of other graphs keep their own plan's offsets
    if (impl_->arena.reserve(size_t(plan.arena_floats) * sizeof(float))) impl_->drop_graphs();
}

float* CudaBackend::host_arena(int64_t n_floats) {
    Impl& im = *impl_;
    if (n_floats > im.pinned_floats) {
        MINFER_CUDA_CHECK(cudaStreamSynchronize(im.stream));
        im.drop_graphs();  // their host outputs point into the old arena
        cudaFreeHost(im.pinned);
        im.pinned = nullptr;
        MINFER_CUDA_CHECK(cudaMallocHost(&im.pinned, size_t(n_floats) * sizeof(float)));
        im.pinned_floats = n_floats;
        void* mapped = nullptr;  // kernels write outputs there (choose_host_outputs)
        MINFER_CUDA_CHECK(cudaHostGetDevicePointer(&mapped, im.pinned, 0));
        if (mapped != im.pinned) throw Error("CUDA backend: pinned host memory has another device address");
    }
    return im.pinned;
}

void CudaBackend::upload(const NodeBuffers& bufs, NodeId id, int64_t n_floats) {
    MINFER_CUDA_CHECK(cudaMemcpyAsync(impl_->dev(id), bufs.data(id), size_t(n_floats) * sizeof(float),
                                      cudaMemcpyHostToDevice, impl_->stream));
}

void CudaBackend::download(const NodeBuffers& bufs, NodeId id, int64_t n_floats) {
    if (impl_->dev(id) != bufs.data(id))  // else its kernel wrote it in place (choose_host_outputs)
        MINFER_CUDA_CHECK(cudaMemcpyAsync(bufs.data(id), impl_->dev(id), size_t(n_floats) * sizeof(float),
                                          cudaMemcpyDeviceToHost, impl_->stream));
    MINFER_CUDA_CHECK(cudaStreamSynchronize(impl_->stream));
}

// Products wider than the matrix-vector and tensor-core kernels take: the weights in half (their copy kept
// by keep_half, else dequantized here; f32 for F32 weights) and one cuBLAS GEMM. Weights that are exact in
// half (F16, BF16) get their activations split into two halves, hi and lo, so that the product keeps f32
// accuracy.
void CudaBackend::Impl::gemm(const QMatrix& w, const float* x, int64_t nt, float* y, XNode x_node) {
    const float one = 1.0f, zero = 0.0f;
    const int m = int(w.n_out), n = int(nt), k = int(w.n_in);
    if (w.type == GgmlType::F32) {
        blas_check(cuda::cublas().sgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one,
                                        static_cast<const float*>(w.data), k, x, k, &zero, y, m),
                   "cublasSgemm");
        return;
    }
    void* hi = gemm_x.ptr;
    void* lo = exact_in_half(w.type) ? gemm_x.as<uint16_t>() + nt * w.n_in : nullptr;
    const void* wh = half_of(w);
    if (!wh) cuda::dequant_f16(w, gemm_w.ptr, stream);
    // gate and up (and Q|K and V apart) read one x: its halves are split once.
    if (x_node.node < 0 || x_node != gemm_x_holds || (lo && !gemm_x_lo))
        cuda::split_f16(x, hi, lo, nt * w.n_in, stream);
    gemm_x_holds = x_node;
    gemm_x_lo = lo != nullptr;
    for (void* part : {hi, lo}) {
        if (!part) continue;
        blas_check(cuda::cublas().gemm_ex(blas, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, wh ? wh : gemm_w.ptr,
                                          CUDA_R_16F, k, part, CUDA_R_16F, k, part == hi ? &zero : &one, y,
                                          CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx");
    }
}

// Which tensor-core product takes nt columns of w. The int8 one: every width in the invariant mode, 2 to
// mma_tokens columns otherwise (one column takes the matrix-vector kernels), twice that for matrices of
// at least kMmaWideDims rows and columns that the f16 one cannot take. The f16 one: wider products of
// those matrices up to mma_f16_tokens columns, never in the invariant mode. The bounds are where each
// kernel stopped beating the next on the H200 (bench/STANDING-GPU-BATCHED.md, sessions 16-17 and 21-22):
// the int8 kernel beats dequantization + cuBLAS on 7B's matrices at 32 columns but not on 0.5B's; the
// f16 kernel, each weight dequantized once, beats the int8 one on 7B's matrices from 24 columns and
// cuBLAS up to 64, and loses beyond and on 0.5B's. Those figures include cuBLAS's dequantization: a
// matrix with a kept half copy (keep_half) gives cuBLAS every width the int8 kernel does not take, up
// to mma_tokens columns on wide matrices and up to kHalfGemmFrom - 1 on the others (or up to where
// the GEMM starts, gemm_tokens). With the copies, cuBLAS beat the f16 kernel on 7B's matrices at 32 and
// 64 columns, and the int8 one on 0.5B's at 8 and 16 (bench/STANDING-GPU-BATCHED.md, twenty-sixth session);
// at 4 too, by 4%, but there the int8 kernel keeps x 31x finer than the GEMM's half.
CudaBackend::Impl::Mma CudaBackend::Impl::mma_path(const QMatrix& w, int64_t nt) const {
    constexpr int64_t kMmaWideDims = 2048, kHalfGemmFrom = 8;
    if (!cuda::mma_fits(w)) return Mma::None;
    const bool wide = w.n_in >= kMmaWideDims && w.n_out >= kMmaWideDims;
    if (!opt.invariant && half_of(w)) {
        const int64_t int8_to =
            std::min(opt.mma_tokens, wide ? INT64_MAX : std::max(kHalfGemmFrom, gemm_tokens) - 1);
        return nt >= 2 && nt <= int8_to ? Mma::Int8 : Mma::None;
    }
    const bool f16 = !opt.invariant && wide && nt <= opt.mma_f16_tokens && cuda::mma_f16_fits(w);
    const int64_t int8_to = (wide && !f16 ? 2 : 1) * opt.mma_tokens;
    if (opt.mma_tokens > 0 && (opt.invariant || (nt >= 2 && nt <= int8_to))) return Mma::Int8;
    if (f16 && nt >= 2) return Mma::F16;
    return Mma::None;
}

void CudaBackend::Impl::matmul(const QMatrix& w, const float* bias, const float* x, const float* res,
                               int64_t nt, float* y, XNode x_node) {
    switch (mma_path(w, nt)) {
        case Mma::Int8:
            if (x_node.node < 0 || x_node != mma_x_holds)
                cuda::quantize_x_mma(x, w.n_in, nt, mma_x.ptr, stream);
            mma_x_holds = x_node;
            return cuda::matmul_mma(w, mma_x.ptr, nt, y, bias, res, mma_part.as<float>(), stream);
        case Mma::F16:
            mma_x_holds = {};
            cuda::split_f16(x, mma_x.ptr, nullptr, nt * w.n_in, stream);
            return cuda::matmul_mma_f16(w, mma_x.ptr, nt, y, bias, res, mma_part.as<float>(),
                                        mma_tickets.as<unsigned>(), stream);
        case Mma::None:
            break;
    }
    if (opt.invariant && nt > 1) {  // every column as a one-token product
        for (int64_t t = 0; t < nt; ++t)
            matmul(w, bias, x + t * w.n_in, res ? res + t * w.n_out : nullptr, 1, y + t * w.n_out);
        return;
    }
    if (cuda::matvec_int8_x(w, nt)) {
        cuda::quantize_x8(x, w.n_in, w.xq, x8.ptr, stream);
        return cuda::matvec_x8(w, x8.ptr, y, bias, res, stream);
    }
    if (nt < gemm_tokens) return cuda::matvec(w, x, nt, y, bias, res, stream);
    gemm(w, x, nt, y, x_node);
    if (bias) cuda::add_bias(y, bias, w.n_out, nt, stream);
    if (res) cuda::add(y, res, y, w.n_out * nt, stream);
}

void CudaBackend::Impl::fused_qkv(const ComputeGraph& g, const CNode& n) {
    const auto& m = std::get<meta::FusedQkv>(n.meta);
    const int64_t nt = n.shape[1], nq = m.q.weight.n_out, nkv = m.kv.n_embd;
    cuda::QkvEpilogue e{rope_shape(m.rope, m.style == RopeStyle::Neox),
                        m.n_head_kv,
                        vec(m.q.bias),
                        vec(m.k.bias),
                        vec(m.v.bias),
                        vec(m.q_norm),
                        vec(m.k_norm),
                        m.norm_eps,
                        nq,
                        nkv,
                        nkv,
                        rope_table_for(m.rope)};
    const float *q = dev(n.src[0]), *k = nullptr, *v = nullptr;
    if (std::holds_alternative<op::QkvBiasRopeStore>(n.op)) {  // the projections ran as their own nodes
        k = dev(n.src[1]);
        v = dev(n.src[2]);
    } else {
        const auto it = qkv.find(m.q.weight.name);
        if (it == qkv.end()) throw Error("CUDA backend: no concatenated QKV weight for " + m.q.weight.name);
        const QMatrix& cat = it->second;  // [nq + nkv (+ nkv)] rows: Q, K (and V when of the same type)
        float* rows = fused.as<float>();
        const XNode x{g.uid, n.src[0]};
        matmul(cat, nullptr, q, nullptr, nt, rows, x);
        e.q_stride = e.k_stride = e.v_stride = cat.n_out;
        k = rows + nq, v = rows + nq + nkv;
        if (m.v.weight.type != m.q.weight.type) {  // uploaded apart (upload_all): V runs after the concat
            float* v_rows = rows + nt * cat.n_out;
            matmul(mat(m.v.weight), nullptr, q, nullptr, nt, v_rows, x);
            v = v_rows, e.v_stride = nkv;
        }
        q = rows;
    }
    cuda::qkv_epilogue(q, k, v, slots(n), nt, e, dev(n.id), region(kv_layer(n.op)), stream);
}

// Prefill attention as three steps over all heads: scores = scale * Q K^T (one strided-batched f32 GEMM),
// causal softmax, out = P V. With grouped-query attention, K and V are first copied with each KV head
// repeated for its query heads, so that both products are one batched call instead of one per KV head.
// The key count is read from the host copy of the positions: prefill graphs run eagerly, never from a
// capture.
void CudaBackend::Impl::attention_gemm(const ComputeGraph& g, const CNode& n, const NodeBuffers& bufs) {
    const auto& m = std::get<meta::Attn>(n.meta);
    const cuda::KvRegion& r = region(m.layer);
    const int64_t nt = n.shape[1], hd = m.hd, group = m.n_head / m.n_head_kv;
    const int64_t n_kv = std::min<int64_t>(int64_t(ids_host(bufs, n.src[2])[nt - 1]) + 1, r.n_ctx);
    const int64_t q_stride = g[n.src[0]].shape[0], out_stride = n.shape[0];
    const float *k = r.k, *v = r.v;
    int64_t kv_stride = r.n_embd;
    if (group > 1) {
        float* wide = kv_wide.as<float>();
        cuda::expand_kv_heads(r, n_kv, m.n_head, group, hd, wide, wide + n_kv * m.n_head * hd, stream);
        k = wide, v = wide + n_kv * m.n_head * hd, kv_stride = m.n_head * hd;
    }
    const float zero = 0.0f, one = 1.0f;
    float* s = scores.as<float>();
    blas_check(cuda::cublas().sgemm_strided_batched(
                   blas, CUBLAS_OP_T, CUBLAS_OP_N, int(n_kv), int(nt), int(hd), &m.scale, k, int(kv_stride),
                   hd, dev(n.src[0]), int(q_stride), hd, &zero, s, int(n_kv), nt * n_kv, int(m.n_head)),
               "attention scores");
    cuda::causal_softmax(s, ids(n.src[2]), nt, m.n_head, n_kv, stream, std::get<op::Attn>(n.op).window,
                         vec(m.sinks));
    blas_check(cuda::cublas().sgemm_strided_batched(
                   blas, CUBLAS_OP_N, CUBLAS_OP_N, int(hd), int(nt), int(n_kv), &one, v, int(kv_stride), hd,
                   s, int(n_kv), nt * n_kv, &zero, dev(n.id), int(out_stride), hd, int(m.n_head)),
               "attention values");
}

void* CudaBackend::Impl::half_out(const ComputeGraph& g, const CNode& n) {
    if (size_t(n.id) >= half_x.size() || !half_x[size_t(n.id)]) return nullptr;
    gemm_x_holds = {g.uid, n.id};
    gemm_x_lo = false;
    return gemm_x.ptr;
}

// The quantized and half x (mma_x, gemm_x) stay claimed across products and the nodes that fill them;
// any other node forgets them.
void CudaBackend::Impl::run(const ComputeGraph& g, const CNode& n, const NodeBuffers& bufs) {
    if (!std::holds_alternative<meta::MatMul>(n.meta) && !std::holds_alternative<meta::FusedQkv>(n.meta))
        mma_x_holds = gemm_x_holds = {};
    float* out = dev(n.id);
    auto in = [&](size_t i) { return dev(n.src[i]); };
    const int64_t d = n.shape[0], nt = n.shape[1], numel = n.n_elements();
    cudaStream_t s = stream;
    std::visit(
        Overload{
            [&](const op::GetRows&) {
                if (const auto* w = std::get_if<meta::Weight>(&n.meta))  // embedding: src = [ids]
                    return cuda::get_rows(mat(w->weight), ids(n.src[0]), nt, out, s);
                cuda::get_rows_f32(in(0), d, ids(n.src[1]), nt, out, s);
            },
            [&](const op::RmsNorm& o) {
                cuda::rms_norm(in(0), vec(std::get<meta::Weight>(n.meta).weight), out, d, nt, o.eps, s,
                               half_out(g, n));
            },
            [&](const op::QkNorm& o) {
                cuda::rms_norm(in(0), vec(std::get<meta::Weight>(n.meta).weight), out, o.hd, nt * o.nh, o.eps,
                               s);
            },
            [&](const op::MatMul& o) {
                const auto& m = std::get<meta::MatMul>(n.meta);
                matmul(mat(m.weight), vec(m.bias), in(0), o.residual ? in(1) : nullptr, nt, out,
                       {g.uid, n.src[0]});
            },
            [&](const op::Rope& o) {
                const auto& m = std::get<meta::Rope>(n.meta);
                cuda::rope(in(0), out, ids(n.src[1]), nt, rope_shape(m, o.style == RopeStyle::Neox), s);
            },
            [&](const op::Attn& o) {
                const bool prefill = nt > cuda::kMaxMatvecTokens;
                const auto& m = std::get<meta::Attn>(n.meta);
                if (prefill && gemm_attention && !opt.invariant && n.src.size() == 3)
                    return attention_gemm(g, n, bufs);  // unpaged
                const cuda::AttnShape a{m.n_head, m.n_head_kv,   m.hd,     g[n.src[0]].shape[0],
                                        m.scale,  opt.invariant, o.window, vec(m.sinks)};
                const cuda::KvSlots at = slots(n);
                if (!prefill || opt.invariant)
                    return cuda::attention(in(0), region(m.layer), at, nt, a, out, s);
                const bool mma = opt.mma_attention && cuda::attention_prefill_mma_fits(a, nt) &&
                                 cuda::attention_prefill_mma_fills(a, nt);
                const auto tiled = [&](cuda::AttnRows rows) {
                    if (mma)
                        return cuda::attention_prefill_mma(in(0), region(m.layer), at, nt, a, out, s, rows);
                    cuda::attention_prefill(in(0), region(m.layer), at, nt, a, out, s, rows);
                };
                if (!at.table) return tiled(cuda::AttnRows::kAll);
                // A paged batch: decode tokens row by row, prefill chunks query-tiled.
                cuda::attention(in(0), region(m.layer), at, nt, a, out, s, cuda::AttnRows::kSingle);
                tiled(cuda::AttnRows::kChunked);
            },
            [&](const op::KvcacheStore& o) {
                cuda::kv_store(in(0), in(1), slots(n), g[n.src[0]].shape[1], region(o.layer), s);
            },
            [&](const op::Add&) { cuda::add(in(0), in(1), out, numel, s); },
            [&](const op::Mul&) { cuda::mul(in(0), in(1), out, numel, s); },
            [&](const op::Silu&) { cuda::silu(in(0), out, numel, s); },
            [&](const op::SwiGLU&) { cuda::swiglu(in(0), in(1), out, numel, s, half_out(g, n)); },
            [&](const op::GeGLU&) { cuda::geglu(in(0), in(1), out, numel, s); },
            [&](const op::Scale& o) { cuda::scale(in(0), o.factor, out, numel, s); },
            [&](const op::ArgMax&) {
                cuda::argmax_rows(in(0), g[n.src[0]].shape[0], d, reinterpret_cast<int32_t*>(out), s);
            },
            [&](const op::AllReduce&) { opt.nccl->all_reduce(opt.rank, in(0), out, numel, s); },
            [&](const op::AllGather& o) {
                opt.nccl->all_gather(opt.rank, in(0), out, d / o.ranks, nt, gather.as<float>(), s);
            },
            [&](const op::FusedFFN&) {
                const auto& m = std::get<meta::FusedFfn>(n.meta);
                if (nt > cuda::kMaxMatvecTokens)
                    throw Error("CUDA FusedFFN: more tokens than one matvec serves");
                cuda::matvec_swiglu(mat(m.gate), mat(m.up), in(0), nt, out, s);
            },
            [&](const op::MoeFfn&) { moe_ffn(n); },
            [&](const op::Input&) {},
            [&](const op::KvcacheLoad&) {},
            [&](const op::FusedQKV&) { fused_qkv(g, n); },
            [&](const op::FusedQkvNorm&) { fused_qkv(g, n); },
            [&](const op::QkvBiasRopeStore&) { fused_qkv(g, n); },
        },
        n.op);
}

void CudaBackend::compute(const ComputeGraph& g, const CNode& n, const NodeBuffers& bufs) {
    impl_->mma_x_holds = impl_->gemm_x_holds = {};  // a node alone: its x may have been computed again since
    impl_->run(g, n, bufs);
}

}  // namespace minfer
