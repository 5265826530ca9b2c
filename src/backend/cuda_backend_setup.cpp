// The CUDA backend's setup: weights uploaded in their layouts, KV regions, the RoPE table and scratch sized
// for a graph, and which outputs kernels write straight into host memory.
#include "backend/cuda_backend_impl.h"

namespace minfer {

// Fewest rows of a matrix uploaded tiled: only output heads (vocabulary rows). The tiled kernels win on
// the lm_head alone; on every layer matrix, the FFN's included, the block-layout kernels (their layouts
// chosen by measurement) are faster, and so is the 7B with its FFN in the block layout
// (bench/STANDING-GPU.md, tenth session).
constexpr int64_t kTiledMinRows = 65536;

// Which Q4_K / padded Q6_K matrices that fit take one token's x as int8 (dp4a, QMatrix::xq). The FFN's
// gate and up go through matvec_swiglu, whose thread blocks each quantize x as they stage it; every other
// product reads x quantized once by its own kernel (cuda::quantize_x8, then matvec_x8). Every such
// matrix takes it, in either format: in the model that beat the per-matrix choice that cold, one-kernel
// timings suggest (taking int8x2 only where it won alone measured slower; the cause is not measured).
// The tables: bench/STANDING-GPU.md, eleventh session.

// Uploads matrices of one type into one allocation, back to back, so that a product with all of them
// is one product with the concatenation (their rows are output features). Where every part fits the
// tiled layout and the whole is large enough (and may_tile: not for embeddings, which get_rows reads, nor for
// expert stacks, which matvec_experts reads), the concatenation is tiled; Q6_K is padded (pad_matrix). Every
// copy is ordered on `stream`: a plain cudaMemcpy from pageable memory may return before its DMA lands, and
// the non-blocking stream's tile kernel would then read the staging buffer's previous matrix (CudaVsCpu
// failed 2 runs in 3 that way).
void CudaBackend::Impl::upload_matrices(std::initializer_list<const WeightRef*> ws, bool may_tile) {
    size_t total = 0, stored = 0;
    int64_t rows = 0;
    bool tiled = may_tile && tiling, padded = padding, int8_x = decode_x != cuda::XQuant::kF32;
    for (const WeightRef* w : ws) {
        total += bytes_of(*w);
        rows += w->n_out;
        tiled = tiled && cuda::tiles_fit(w->type, w->n_in, w->n_out);
        padded = padded && cuda::pads_fit(w->type);
        int8_x = int8_x && cuda::dp4a_fits(w->type, w->n_in);
    }
    const WeightRef& first = **ws.begin();
    tiled = tiled && !int8_x && rows >= kTiledMinRows;
    padded = padded && !tiled;
    int8_x = int8_x && (first.type != GgmlType::Q6_K || padded);  // the int8 kernels read Q6_K padded
    const cuda::XQuant xq = int8_x ? decode_x : cuda::XQuant::kF32;
    if (int8_x) x8.reserve(cuda::int8_x_bytes(xq, first.n_in));
    const auto stored_bytes = [&](const WeightRef& w) {
        return padded ? size_t(cuda::padded_row_bytes(w.type, w.n_in) * w.n_out) : bytes_of(w);
    };
    for (const WeightRef* w : ws) stored += stored_bytes(*w);
    uint8_t* base = allocate(stored);
    if (tiled || padded) upload_stage.reserve(total);
    uint8_t* raw = tiled || padded ? upload_stage.as<uint8_t>() : base;
    size_t off = 0, at = 0;
    for (const WeightRef* w : ws) {
        MINFER_CUDA_CHECK(
            cudaMemcpyAsync(raw + off, tensor(*w).data, bytes_of(*w), cudaMemcpyHostToDevice, stream));
        mats[w->name] = QMatrix{w->type, base + at, w->n_in, w->n_out, tiled, padded, xq};
        off += bytes_of(*w);
        at += stored_bytes(*w);
    }
    if (tiled) cuda::tile_matrix(QMatrix{first.type, raw, first.n_in, rows}, base, stream);
    if (padded) cuda::pad_matrix(QMatrix{first.type, raw, first.n_in, rows}, base, stream);
    if (tiled || padded) MINFER_CUDA_CHECK(cudaStreamSynchronize(stream));
    if (ws.size() > 1) qkv[first.name] = QMatrix{first.type, base, first.n_in, rows, tiled, padded, xq};
}

void CudaBackend::Impl::upload_vector(const WeightRef& w) {
    if (!w.present() || vecs.count(w.name)) return;
    const GgufTensor& t = tensor(w);
    std::vector<float> host(size_t(w.n_in * w.n_out));
    quant_traits(t.type)->to_float(t.data, host.data(), w.n_in * w.n_out);
    auto* d = reinterpret_cast<float*>(allocate(host.size() * sizeof(float)));
    MINFER_CUDA_CHECK(
        cudaMemcpyAsync(d, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice, stream));
    vecs[w.name] = d;
}

void CudaBackend::Impl::upload_all(const WeightSet& w) {
    for (const WeightSet::Layer& l : w.layers) {
        if (l.q.type == l.k.type && l.k.type == l.v.type) {
            upload_matrices({&l.q, &l.k, &l.v});
        } else if (l.q.type == l.k.type) {  // V of another type: its own product in FusedQKV
            upload_matrices({&l.q, &l.k});
            upload_matrices({&l.v});
        } else {
            for (const WeightRef* m : {&l.q, &l.k, &l.v}) upload_matrices({m});
        }
        for (const WeightRef& m : l.matrices) upload_matrices({&m});
        if (opt.moe)
            for (const WeightRef& m : l.experts) upload_matrices({&m}, false);  // matvec_experts: not tiled
        for (const WeightRef& v : l.vectors) upload_vector(v);
    }
    upload_matrices({&w.tok_embd}, false);
    if (!mats.count(w.output.name)) upload_matrices({&w.output});
    upload_vector(w.output_norm);
    MINFER_CUDA_CHECK(cudaStreamSynchronize(stream));
    upload_stage.release();
}

void CudaBackend::Impl::reserve_kv(const ComputeGraph& g) {
    for (const KvShape& s : kv_shapes(g)) {
        if (size_t(s.layer) >= kv.size()) kv.resize(size_t(s.layer) + 1, cuda::KvRegion{});
        cuda::KvRegion& r = kv[size_t(s.layer)];
        if (r.k && r.n_embd == s.n_embd && r.n_ctx == s.n_ctx) continue;  // persists across rebuilds
        if (r.k)
            throw Error("KV region of layer " + std::to_string(s.layer) +
                        " was declared with a different shape");
        const size_t bytes = size_t(s.n_embd * s.n_ctx) * sizeof(float);
        for (int i = 0; i < 2; ++i) {
            kv_mem.push_back(std::make_unique<DeviceBuffer>());
            kv_mem.back()->reserve(bytes);
            MINFER_CUDA_CHECK(cudaMemset(kv_mem.back()->ptr, 0, bytes));
        }
        r = {kv_mem[kv_mem.size() - 2]->as<float>(), kv_mem.back()->as<float>(), s.n_embd, s.n_ctx};
    }
}

// The RoPE table the QKV fusions' epilogues read (cuda::RopeTable), for every position of the context: the
// epilogue kernel then loads its angles instead of evaluating them in double precision, which measured
// 1.5-1.9% of a decode step (0.5B / 1.5B Q4_K_M tg128).
bool CudaBackend::Impl::reserve_rope_table(const ComputeGraph& g) {
    for (const CNode& n : g.nodes) {
        const auto* f = std::get_if<meta::FusedQkv>(&n.meta);
        if (!f) continue;
        const int64_t n_pos = f->kv.paging.n_pos();  // a window layer's region may hold fewer slots
        if (rope_tab.cs && same_angles(rope_key, f->rope) && rope_tab.n_pos >= n_pos) return false;
        rope_cs.reserve(size_t(n_pos * f->rope.n_rot) * sizeof(float));
        cuda::rope_table(rope_shape(f->rope, false), n_pos, rope_cs.as<float>(), stream);
        MINFER_CUDA_CHECK(cudaStreamSynchronize(stream));  // kernels read it before their first wait
        rope_tab = {rope_cs.as<float>(), n_pos};
        rope_key = f->rope;
        return true;
    }
    return false;
}

// Free device memory a half copy leaves at least: the activation arena and scratch of wider graphs, and
// cuBLAS, allocate after it.
constexpr size_t kHalfWeightsSlack = size_t(4) << 30;

// A GEMM matrix's half copy, made once (opt.half_weights) when free memory allows: dequant_f16 into a
// buffer of its own, the halves that gemm would otherwise make before every product. F16 weights are
// their own halves.
void CudaBackend::Impl::keep_half(const QMatrix& w) {
    if (half_of(w) || !opt.half_weights || w.type == GgmlType::F32) return;
    const size_t bytes = size_t(w.n_in * w.n_out) * 2;
    if (size_t(std::max<int64_t>(cuda::device_free_bytes(), 0)) < bytes + kHalfWeightsSlack) return;
    auto& copy = halves[{w.data, w.n_out}] = std::make_unique<DeviceBuffer>();
    copy->reserve(bytes);
    cuda::dequant_f16(w, copy->ptr, stream);
}

const void* CudaBackend::Impl::half_of(const QMatrix& w) const {
    if (w.type == GgmlType::F16 && !w.tiled && !w.padded) return w.data;
    const auto it = halves.find({w.data, w.n_out});
    return it == halves.end() ? nullptr : it->second->ptr;
}

// Scratch sized for the graph: prefill attention's scores and expanded K/V (gemm_attention
// only), fused-QKV rows, the GEMM's half-precision weight and activation tiles, and the tensor-core
// products' quantized x and partial sums.
bool CudaBackend::Impl::reserve_scratch(const ComputeGraph& g) {
    size_t score_floats = 0, wide_floats = 0, fused_floats = 0, w_halves = 0, x_halves = 0;
    size_t mma_bytes = 0, mma_floats = 0, mma_tickets_n = 0, gather_floats = 0, moe_floats = 0;
    const auto need_mma = [&](const QMatrix& w, int64_t nt) {
        const Mma path = mma_path(w, nt);
        if (path == Mma::None) return false;
        const bool f16 = path == Mma::F16;
        mma_bytes = std::max(mma_bytes, f16 ? size_t(nt * w.n_in) * 2 : cuda::mma_x_bytes(w.n_in, nt));
        mma_floats =
            std::max(mma_floats, f16 ? cuda::mma_f16_scratch_floats(w, nt) : cuda::mma_scratch_floats(w, nt));
        if (f16) mma_tickets_n = std::max(mma_tickets_n, cuda::mma_f16_tickets(w, nt));
        return true;
    };
    const auto need_gemm = [&](const QMatrix& w, int64_t nt, NodeId x) {
        if (nt < gemm_tokens) return;
        if (!half_of(w)) w_halves = std::max(w_halves, size_t(w.n_in * w.n_out));
        x_halves = std::max(x_halves, size_t(2 * nt * w.n_in));
        if (w.type != GgmlType::F32 && !exact_in_half(w.type)) half_x[size_t(x)] = true;
    };
    const auto need_product = [&](const QMatrix& w, int64_t nt, NodeId x) {
        if (nt >= gemm_tokens) keep_half(w);  // before mma_path, which routes by it
        if (!need_mma(w, nt)) need_gemm(w, nt, x);
    };
    half_x.assign(g.nodes.size(), false);
    for (const CNode& n : g.nodes) {
        const int64_t nt = n.shape[1];
        const auto* a = std::get_if<meta::Attn>(&n.meta);
        if (a && nt > cuda::kMaxMatvecTokens && gemm_attention) {
            const size_t n_ctx = size_t(region(a->layer).n_ctx);
            score_floats = std::max(score_floats, size_t(a->n_head * nt) * n_ctx);
            if (a->n_head > a->n_head_kv) wide_floats = std::max(wide_floats, 2 * n_ctx * a->n_head * a->hd);
        }
        if (const auto* f = std::get_if<meta::FusedQkv>(&n.meta))
            fused_floats = std::max(fused_floats, size_t(nt * (f->q.weight.n_out + 2 * f->kv.n_embd)));
        if (std::holds_alternative<op::MoeFfn>(n.op))
            moe_floats = std::max(moe_floats, moe_scratch_floats(n));
        if (opt.nccl && std::holds_alternative<op::AllGather>(n.op))
            gather_floats = std::max(gather_floats, size_t(n.n_elements()));
        if (const auto* m = std::get_if<meta::MatMul>(&n.meta); m && mats.count(m->weight.name))
            need_product(mats.at(m->weight.name), nt, n.src[0]);
        if (const auto* f = std::get_if<meta::FusedQkv>(&n.meta)) {
            if (const auto it = qkv.find(f->q.weight.name); it != qkv.end())
                need_product(it->second, nt, n.src[0]);
            if (mats.count(f->v.weight.name)) need_product(mats.at(f->v.weight.name), nt, n.src[0]);
        }
    }
    bool moved = scores.reserve(score_floats * sizeof(float));
    moved |= kv_wide.reserve(wide_floats * sizeof(float));
    moved |= fused.reserve(fused_floats * sizeof(float));
    moved |= gemm_w.reserve(w_halves * 4);  // f32 when the weights are read in single precision
    moved |= gemm_x.reserve(x_halves * 2);
    moved |= mma_x.reserve(mma_bytes);
    moved |= mma_part.reserve(mma_floats * sizeof(float));
    if (mma_tickets.reserve(mma_tickets_n * sizeof(unsigned))) {
        MINFER_CUDA_CHECK(cudaMemsetAsync(mma_tickets.ptr, 0, mma_tickets.bytes, stream));  // launches keep 0
        moved = true;
    }
    moved |= gather.reserve(gather_floats * sizeof(float));
    moved |= moe.reserve(moe_floats * sizeof(float));
    return moved;
}

namespace {

// Whether n's kernels write its values once and never read them back: no second GEMM over the lo halves
// (weights exact in half), no bias or residual added afterwards.
bool writes_once(const CNode& n) {
    if (std::holds_alternative<op::ArgMax>(n.op)) return true;
    const auto* mm = std::get_if<meta::MatMul>(&n.meta);
    const auto* o = std::get_if<op::MatMul>(&n.op);
    return mm && o && !o->residual && !mm->bias.present() && !exact_in_half(mm->weight.type);
}

}  // namespace

// A graph that runs wholly on the GPU has its outputs of fewer than gemm_tokens columns (the decode
// logits) written by their matrix-vector kernel straight into the pinned host arena, which unified
// addressing maps at the same address on the device: no device-to-host copy and no second launch follow
// the graph. Wider outputs too (opt.host_outputs) where their kernels write them once: a batch's logits
// then cross PCIe while the GEMM runs instead of after it. The others are copied.
void CudaBackend::Impl::choose_host_outputs(const ComputeGraph& g) {
    host_out.assign(g.nodes.size(), false);
    for (const CNode& n : g.nodes)
        if (!std::holds_alternative<op::Input>(n.op) && n.backend != BackendKind::Cuda) return;
    for (NodeId out : g.outputs)
        host_out[size_t(out)] = g[out].shape[1] < gemm_tokens || (opt.host_outputs && writes_once(g[out]));
}

}  // namespace minfer
