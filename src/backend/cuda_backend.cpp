#include "backend/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/buffer_plan.h"
#include "backend/cuda/cublas_lib.h"
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/nccl_comm.h"
#include "backend/cuda/ops_cuda.h"
#include "backend/cuda/quant_cuda.h"
#include "backend/cuda/quant_mma.h"
#include "backend/cuda/quant_mma_f16.h"
#include "gguf/gguf.h"
#include "graph/weights.h"
#include "kv/kv_cache.h"
#include "quant/quants.h"
#include "util/error.h"
#include "util/overload.h"

namespace minfer {

using cuda::QMatrix;

namespace {

void blas_check(cublasStatus_t st, const char* what) {
    if (st != CUBLAS_STATUS_SUCCESS)
        throw Error(std::string("cuBLAS error in ") + what + ": " + cuda::cublas().status_string(st));
}

// One device allocation, freed with its owner.
struct DeviceBuffer {
    void* ptr = nullptr;
    size_t bytes = 0;
    DeviceBuffer() = default;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    ~DeviceBuffer() { cudaFree(ptr); }
    // Grows to at least `n` bytes (contents are not kept); true when the storage moved.
    bool reserve(size_t n) {
        if (n <= bytes) return false;
        cudaFree(ptr);
        ptr = nullptr;
        MINFER_CUDA_CHECK(cudaMalloc(&ptr, n));
        bytes = n;
        return true;
    }
    void release() {
        cudaFree(ptr);
        ptr = nullptr;
        bytes = 0;
    }
    template <class T>
    T* as() const {
        return static_cast<T*>(ptr);
    }
};

// How decode products of Q4_K and Q6_K take x, as on the CPU: by default as two int8 levels per element
// (the CPU's int8x2, within max|x| / 64516 of each 32-element block), Int8 as one (llama.cpp's
// arithmetic: faster, no longer exact), F32 in f32.
cuda::XQuant decode_x_format(CudaOptions::DecodeX x) {
    switch (x) {
        case CudaOptions::DecodeX::F32:
            return cuda::XQuant::kF32;
        case CudaOptions::DecodeX::Int8:
            return cuda::XQuant::kInt8;
        case CudaOptions::DecodeX::Int8x2:
            return cuda::XQuant::kInt8x2;
    }
    throw Error("CUDA backend: unknown decode activation format");
}

const meta::Paging& paging_of(const CNode& n) {
    if (const auto* a = std::get_if<meta::Attn>(&n.meta)) return a->paging;
    if (const auto* f = std::get_if<meta::FusedQkv>(&n.meta)) return f->kv.paging;
    return std::get<meta::Kv>(n.meta).paging;
}

}  // namespace

struct CudaBackend::Impl {
    const GgufFile& file;
    const CudaOptions opt;
    cudaStream_t stream = nullptr;
    cublasHandle_t blas = nullptr;
    std::vector<std::unique_ptr<DeviceBuffer>> owned;    // weight storage
    std::unordered_map<std::string, QMatrix> mats;       // 2-D weights by name
    std::unordered_map<std::string, const float*> vecs;  // 1-D weights as f32
    std::unordered_map<std::string, QMatrix> qkv;        // concatenated Q|K|V, keyed by the Q weight's name

    DeviceBuffer arena, scores, kv_wide, fused, gemm_w, gemm_x, blas_ws;
    DeviceBuffer x8;               // one token's x as int8 (cuda::quantize_x8), for the matrices that take it
    DeviceBuffer mma_x, mma_part;  // x quantized for cuda::matmul_mma, and its split partial sums
    DeviceBuffer gather;           // NCCL's rank-major all-gather result before cuda::interleave_ranks
    float* pinned = nullptr;       // the executor's host arena, page-locked for fast transfers
    int64_t pinned_floats = 0;
    std::vector<bool> host_out;  // by node: its kernel writes into `pinned` (choose_host_outputs)
    std::vector<int64_t> offset;
    std::vector<cuda::KvRegion> kv;  // by layer; k == nullptr until declared
    std::vector<std::unique_ptr<DeviceBuffer>> kv_mem;

    struct Captured {
        cudaGraphExec_t exec = nullptr;
        int runs = 0;
    };
    std::map<std::pair<uint64_t, NodeId>, Captured> graphs;  // (graph uid, first node) of a segment
    bool replay = opt.graphs;
    bool capturable = false;  // the graph's segments may be captured (no kernel reads host data)
    // Products of at least this many tokens run as dequantization + cuBLAS GEMM, fewer as matrix-vector
    // kernels. A paged (batched) graph takes the GEMM from 2 tokens: the matrix-vector kernels' f32 path
    // for 2..8 tokens measured 7x slower than one GEMM (H200, Qwen2.5-7B Q4_K_M, B = 8: 262 tok/s S_TG).
    int64_t gemm_tokens = cuda::kMaxMatvecTokens + 1;
    DeviceBuffer rope_cs;  // cuda::RopeTable of the QKV fusions
    cuda::RopeTable rope_tab{};
    std::pair<int64_t, float> rope_key{};  // n_rot and freq_base the table was filled for
    uint64_t launches = 0, captures = 0;

    // opt.profile: every node timed alone with CUDA events; a per-op table at exit.
    struct OpTime {
        double ms = 0, weight_bytes = 0;
        int64_t calls = 0;
    };
    bool profile = opt.profile;
    // Prefill attention as the query-tiled kernel (cuda::attention_prefill), or with
    // opt.gemm_attention as cuBLAS products around a score matrix (attention_gemm), which needs
    // n_head * tokens * n_ctx floats of scratch. H200 pp512 (tok/s, gemm -> flash, same call): 0.5B
    // Q4_K_M 96,556 -> 109,946, at depth 3584 37,298 -> 48,566; 7B Q4_K_M 20,630 -> 21,332, at depth
    // 3584 10,590 -> 10,395.
    bool gemm_attention = opt.gemm_attention;
    std::map<std::string, OpTime> op_times;
    cudaEvent_t ev[2] = {nullptr, nullptr};

    Impl(const GgufFile& f, const CudaOptions& o) : file(f), opt(o) {}
    ~Impl() {
        if (profile) print_profile();
        for (cudaEvent_t e : ev)
            if (e) cudaEventDestroy(e);
        drop_graphs();
        cudaFreeHost(pinned);
        if (blas) cuda::cublas().destroy(blas);
        if (stream) cudaStreamDestroy(stream);
    }
    void drop_graphs() {
        for (auto& [key, c] : graphs)
            if (c.exec) cudaGraphExecDestroy(c.exec);
        graphs.clear();
    }

    const GgufTensor& tensor(const WeightRef& w) const {
        const GgufTensor* t = file.find_tensor(w.name);
        if (!t) throw Error(file.path() + ": graph references tensor '" + w.name + "', which the file lacks");
        if (!cuda::quant_supported(t->type))
            throw Error(file.path() + ": tensor '" + w.name + "' has type " + ggml_type_name(t->type) +
                        ", which the CUDA backend cannot read");
        return *t;
    }
    static size_t bytes_of(const WeightRef& w) {
        return quant_row_bytes(*quant_traits(w.type), w.n_in) * size_t(w.n_out);
    }
    uint8_t* allocate(size_t bytes) {
        owned.push_back(std::make_unique<DeviceBuffer>());
        owned.back()->reserve(bytes);
        return owned.back()->as<uint8_t>();
    }
    bool tiling = opt.tiles;  // Q4_K repacked for the tensor cores (tiles_fit)
    bool padding = opt.pad;   // Q6_K blocks padded to 16-byte alignment (pads_fit)
    cuda::XQuant decode_x =
        decode_x_format(opt.decode_x);  // how Q4_K/Q6_K decode products take x (dp4a_fits)
    DeviceBuffer upload_stage;          // block-layout bytes on their way to tile_ or pad_matrix
    void upload_matrices(std::initializer_list<const WeightRef*> ws, bool may_tile = true);
    void upload_vector(const WeightRef& w);
    void upload_all(const WeightSet& w);

    float* dev(NodeId id) const {
        const int64_t off = offset[size_t(id)];
        if (off < 0) return nullptr;
        const bool host = pinned && size_t(id) < host_out.size() && host_out[size_t(id)];
        return (host ? pinned : arena.as<float>()) + off;
    }
    const int32_t* ids(NodeId id) const { return reinterpret_cast<const int32_t*>(dev(id)); }
    // The KV-index sources of a KV store, attention or QKV-fusion node, on the device.
    cuda::KvSlots slots(const CNode& n) const {
        const size_t first = size_t(kv_index_src(n.op));
        if (n.src.size() != first + 3) return {ids(n.src[first])};
        const meta::Paging& pg = paging_of(n);
        return {ids(n.src[first]), ids(n.src[first + 1]), ids(n.src[first + 2]), int32_t(pg.max_blocks),
                pg.shift()};
    }
    static const int32_t* ids_host(const NodeBuffers& bufs, NodeId id) {
        return reinterpret_cast<const int32_t*>(bufs.data(id));
    }
    const QMatrix& mat(const WeightRef& w) const {
        const auto it = mats.find(w.name);
        if (it == mats.end()) throw Error("CUDA backend: weight '" + w.name + "' was not uploaded");
        return it->second;
    }
    const float* vec(const WeightRef& w) const {
        if (!w.present()) return nullptr;
        const auto it = vecs.find(w.name);
        if (it == vecs.end()) throw Error("CUDA backend: weight '" + w.name + "' was not uploaded");
        return it->second;
    }
    const cuda::KvRegion& region(int layer) const {
        if (layer < 0 || size_t(layer) >= kv.size() || !kv[size_t(layer)].k)
            throw Error("CUDA backend: no KV region for layer " + std::to_string(layer));
        return kv[size_t(layer)];
    }

    void reserve_kv(const ComputeGraph& g);
    bool reserve_scratch(const ComputeGraph& g);     // true when a buffer moved
    bool reserve_rope_table(const ComputeGraph& g);  // true when the table was (re)filled
    void choose_host_outputs(const ComputeGraph& g);
    // The RoPE table if it was filled for these rotary parameters, else none (the angles are evaluated).
    cuda::RopeTable rope_table_for(const meta::Rope& r) const {
        return rope_key == std::pair{r.n_rot, r.freq_base} ? rope_tab : cuda::RopeTable{};
    }
    void matmul(const QMatrix& w, const float* bias, const float* x, const float* res, int64_t nt, float* y,
                bool exact_weights);
    void gemm(const QMatrix& w, const float* x, int64_t nt, float* y, bool split_activations);
    enum class Mma : uint8_t { None, Int8, F16 };  // which tensor-core product takes a matmul, if any
    Mma mma_path(const QMatrix& w, int64_t nt) const;
    void fused_qkv(const CNode& n);
    void attention_gemm(const ComputeGraph& g, const CNode& n, const NodeBuffers& bufs);
    void run(const ComputeGraph& g, const CNode& n, const NodeBuffers& bufs);
    void run_captured(const ComputeGraph& g, std::span<const NodeId> nodes, const NodeBuffers& bufs,
                      Captured& c);
    void run_profiled(const ComputeGraph& g, const CNode& n, const NodeBuffers& bufs);
    double node_weight_bytes(const CNode& n) const;
    void print_profile() const;
};

// Fewest rows of a matrix uploaded tiled: only output heads (vocabulary rows). By measurement
// (bench_cuda_matvec, block layout -> tiled, us, same call): 7b.lm_head 132.9 -> 108.5, but 7b.gate_up
// (18944 rows each) 34.0 -> 35.5, 7b.o 5.7 -> 6.9, 7b.qkv 8.5 -> 10.2, 0.5b.down 3.9 -> 5.3, since the
// block-layout kernels' layouts were chosen by measurement; 7B Q4_K_M tg128 390.7 -> 397.1-398.5 tok/s
// with its FFN in the block layout.
constexpr int64_t kTiledMinRows = 65536;

// Which Q4_K / padded Q6_K matrices that fit take one token's x as int8 (dp4a, QMatrix::xq). The FFN's
// gate and up go through matvec_swiglu, whose thread blocks each quantize x as they stage it; every other
// product reads x quantized once by its own kernel (cuda::quantize_x8, then matvec_x8). By measurement
// (bench_cuda_matvec, us, same call), f32 -> int8 staged / once -> int8x2 staged / once:
// - 7b.gate_up Q4_K 33.2 -> 26.9 / - -> 32.0 / -; 7b.qkv 8.4 -> 7.0 / 8.1 -> 9.7 / 8.5;
// - 7b.o 5.7 -> 6.7 / 7.6 -> 6.8 / 6.2; 7b.down 20.1 -> 28.1 / 20.1 -> 33.1 / 21.2;
// - 7b.lm_head 131.3 (109.0 tiled) -> 94.5 / 107.6 -> 115.5 / 115.2;
// - Q6_K (padded f32): 7b.down 29.7 -> 35.3 / 25.8 -> 37.9 / 27.4, 7b.lm_head 151.8 -> 137.4 / 134.4 ->
//   143.4 / 142.1.
// Every such matrix takes it, in either format: in the model that beat the per-matrix choice these cold,
// one-kernel numbers suggest (the cause is not measured). H200 tg128 (ab.sh, f32 -> int8 / int8x2):
// 7B Q4_K_M 401 -> 479-483 / 433, 1.5B 931 -> 1,026-1,041 / 921, 0.5B 1,728 -> 1,790-1,811 / 1,794.
// Taking int8x2 only where it won alone (Q6_K, and the FFN's gate and up) measured slower in the model:
// 7B 423, 1.5B 909, 0.5B 1,742.

// Uploads matrices of one type into one allocation, back to back, so that a product with all of them
// is one product with the concatenation (their rows are output features). Where every part fits the
// tiled layout and the whole is large enough (and may_tile: not for embeddings, which get_rows reads),
// the concatenation is tiled; Q6_K is padded (pad_matrix). Every copy is ordered on `stream`: a plain
// cudaMemcpy from pageable memory may return before its DMA lands, and the non-blocking stream's tile
// kernel would then read the staging buffer's previous matrix (CudaVsCpu failed 2 runs in 3 that way).
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
    std::vector<float> host(size_t(w.n_in));
    quant_traits(t.type)->to_float(t.data, host.data(), w.n_in);
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
        for (const WeightRef& v : l.vectors) upload_vector(v);
    }
    upload_matrices({&w.tok_embd}, false);
    if (!mats.count(w.output.name)) upload_matrices({&w.output});
    upload_vector(w.output_norm);
    MINFER_CUDA_CHECK(cudaStreamSynchronize(stream));
    upload_stage.release();
}

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

uint64_t CudaBackend::graph_launches() const {
    return impl_->launches;
}

uint64_t CudaBackend::graph_captures() const {
    return impl_->captures;
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
    const auto* mm = std::get_if<meta::MatMul>(&n.meta);
    return !mm || cuda::quant_supported(mm->weight.type);
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

// The RoPE table the QKV fusions' epilogues read (cuda::RopeTable), for the graph's context size: the
// epilogue kernel then loads its angles instead of evaluating them in double precision, which measured
// 1.5-1.9% of a decode step (0.5B / 1.5B Q4_K_M tg128).
bool CudaBackend::Impl::reserve_rope_table(const ComputeGraph& g) {
    for (const CNode& n : g.nodes) {
        const auto* f = std::get_if<meta::FusedQkv>(&n.meta);
        if (!f) continue;
        const std::pair key{f->rope.n_rot, f->rope.freq_base};
        if (rope_tab.cs && key == rope_key && rope_tab.n_pos >= f->kv.n_ctx) return false;
        rope_cs.reserve(size_t(f->kv.n_ctx * f->rope.n_rot) * sizeof(float));
        cuda::rope_table({0, f->rope.head_dim, f->rope.n_rot, f->rope.freq_base, false}, f->kv.n_ctx,
                         rope_cs.as<float>(), stream);
        MINFER_CUDA_CHECK(cudaStreamSynchronize(stream));  // kernels read it before their first wait
        rope_tab = {rope_cs.as<float>(), f->kv.n_ctx};
        rope_key = key;
        return true;
    }
    return false;
}

// Scratch sized for the graph: prefill attention's scores and expanded K/V (gemm_attention
// only), fused-QKV rows, the GEMM's half-precision weight and activation tiles, and the tensor-core
// products' quantized x and partial sums.
bool CudaBackend::Impl::reserve_scratch(const ComputeGraph& g) {
    size_t score_floats = 0, wide_floats = 0, fused_floats = 0, w_halves = 0, x_halves = 0;
    size_t mma_bytes = 0, mma_floats = 0, gather_floats = 0;
    const auto need_mma = [&](const QMatrix& w, int64_t nt) {
        const Mma path = mma_path(w, nt);
        if (path == Mma::None) return false;
        mma_bytes =
            std::max(mma_bytes, path == Mma::F16 ? size_t(nt * w.n_in) * 2 : cuda::mma_x_bytes(w.n_in, nt));
        mma_floats = std::max(mma_floats, cuda::mma_scratch_floats(w, nt));
        return true;
    };
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
        if (opt.nccl && std::holds_alternative<op::AllGather>(n.op))
            gather_floats = std::max(gather_floats, size_t(n.n_elements()));
        const auto* m = std::get_if<meta::MatMul>(&n.meta);
        const auto w = m ? mats.find(m->weight.name) : mats.end();
        if ((w == mats.end() || !need_mma(w->second, nt)) && m && nt >= gemm_tokens) {
            w_halves = std::max(w_halves, size_t(m->weight.n_in * m->weight.n_out));
            x_halves = std::max(x_halves, size_t(2 * nt * m->weight.n_in));
        }
        if (const auto* f = std::get_if<meta::FusedQkv>(&n.meta)) {
            if (const auto it = qkv.find(f->q.weight.name); it != qkv.end()) need_mma(it->second, nt);
            if (mats.count(f->v.weight.name)) need_mma(mats.at(f->v.weight.name), nt);
        }
    }
    bool moved = scores.reserve(score_floats * sizeof(float));
    moved |= kv_wide.reserve(wide_floats * sizeof(float));
    moved |= fused.reserve(fused_floats * sizeof(float));
    moved |= gemm_w.reserve(w_halves * 4);  // f32 when the weights are read in single precision
    moved |= gemm_x.reserve(x_halves * 2);
    moved |= mma_x.reserve(mma_bytes);
    moved |= mma_part.reserve(mma_floats * sizeof(float));
    moved |= gather.reserve(gather_floats * sizeof(float));
    return moved;
}

// A graph that runs wholly on the GPU has its outputs of fewer than gemm_tokens columns (the decode
// logits) written by their matrix-vector kernel straight into the pinned host arena, which unified
// addressing maps at the same address on the device: no device-to-host copy and no second launch follow
// the graph. Wider outputs (from cuBLAS) are still copied.
void CudaBackend::Impl::choose_host_outputs(const ComputeGraph& g) {
    host_out.assign(g.nodes.size(), false);
    for (const CNode& n : g.nodes)
        if (!std::holds_alternative<op::Input>(n.op) && n.backend != BackendKind::Cuda) return;
    for (NodeId out : g.outputs) host_out[size_t(out)] = g[out].shape[1] < gemm_tokens;
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

void CudaBackend::Impl::gemm(const QMatrix& w, const float* x, int64_t nt, float* y, bool split_activations) {
    const float one = 1.0f, zero = 0.0f;
    const int m = int(w.n_out), n = int(nt), k = int(w.n_in);
    if (w.type == GgmlType::F32) {
        blas_check(cuda::cublas().sgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one,
                                        static_cast<const float*>(w.data), k, x, k, &zero, y, m),
                   "cublasSgemm");
        return;
    }
    void* hi = gemm_x.ptr;
    void* lo = split_activations ? gemm_x.as<uint16_t>() + nt * w.n_in : nullptr;
    cuda::dequant_f16(w, gemm_w.ptr, stream);
    cuda::split_f16(x, hi, lo, nt * w.n_in, stream);
    for (void* part : {hi, lo}) {
        if (!part) continue;
        blas_check(cuda::cublas().gemm_ex(blas, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, gemm_w.ptr,
                                          CUDA_R_16F, k, part, CUDA_R_16F, k, part == hi ? &zero : &one, y,
                                          CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx");
    }
}

// Matrix-vector kernels for up to kMaxMatvecTokens rows; cuBLAS on half tiles beyond. Weights that are
// exact in half (F16, BF16) get activations split into two halves, so the product keeps f32 accuracy.
// Which tensor-core product takes nt columns of w. The int8 one: every width in the invariant mode, 2 to
// mma_tokens columns otherwise (one column takes the matrix-vector kernels), twice that for matrices of
// at least kMmaWideDims rows and columns. The f16 one: wider products of those matrices up to
// mma_f16_tokens columns, never in the invariant mode. Measured on the H200 (PERF-NOTES-GPU-BATCHED,
// sessions 16-17, 21): at 32 columns the staged kernel beat dequantization + cuBLAS on 7B's matrices
// (S_TG B=32 3,157 against 2,578 tok/s) and lost on 0.5B's (9,958 against 11,335); at 64 it lost on
// both, also with two column groups of warps (7B B=64 3,807 against 4,570). The f16 kernel beats cuBLAS
// on 7B's matrices up to 64 columns (B=48 3,925 against 3,580, B=64 4,686 against 4,584) and loses
// beyond (B=128 5,405 against 7,121) and on 0.5B's (B=64 15,502 against 17,175).
CudaBackend::Impl::Mma CudaBackend::Impl::mma_path(const QMatrix& w, int64_t nt) const {
    constexpr int64_t kMmaWideDims = 2048;
    if (!cuda::mma_fits(w)) return Mma::None;
    const bool wide = w.n_in >= kMmaWideDims && w.n_out >= kMmaWideDims;
    if (opt.mma_tokens > 0 && (opt.invariant || (nt >= 2 && nt <= (wide ? 2 : 1) * opt.mma_tokens)))
        return Mma::Int8;
    if (!opt.invariant && wide && nt >= 2 && nt <= opt.mma_f16_tokens && cuda::mma_f16_fits(w))
        return Mma::F16;
    return Mma::None;
}

void CudaBackend::Impl::matmul(const QMatrix& w, const float* bias, const float* x, const float* res,
                               int64_t nt, float* y, bool exact_weights) {
    switch (mma_path(w, nt)) {
        case Mma::Int8:
            cuda::quantize_x_mma(x, w.n_in, nt, mma_x.ptr, stream);
            return cuda::matmul_mma(w, mma_x.ptr, nt, y, bias, res, mma_part.as<float>(), stream);
        case Mma::F16:
            cuda::split_f16(x, mma_x.ptr, nullptr, nt * w.n_in, stream);
            return cuda::matmul_mma_f16(w, mma_x.ptr, nt, y, bias, res, mma_part.as<float>(), stream);
        case Mma::None:
            break;
    }
    if (opt.invariant && nt > 1) {  // every column as a one-token product
        for (int64_t t = 0; t < nt; ++t)
            matmul(w, bias, x + t * w.n_in, res ? res + t * w.n_out : nullptr, 1, y + t * w.n_out,
                   exact_weights);
        return;
    }
    if (cuda::matvec_int8_x(w, nt)) {
        cuda::quantize_x8(x, w.n_in, w.xq, x8.ptr, stream);
        return cuda::matvec_x8(w, x8.ptr, y, bias, res, stream);
    }
    if (nt < gemm_tokens) return cuda::matvec(w, x, nt, y, bias, res, stream);
    gemm(w, x, nt, y, exact_weights);
    if (bias) cuda::add_bias(y, bias, w.n_out, nt, stream);
    if (res) cuda::add(y, res, y, w.n_out * nt, stream);
}

void CudaBackend::Impl::fused_qkv(const CNode& n) {
    const auto& m = std::get<meta::FusedQkv>(n.meta);
    const int64_t nt = n.shape[1], nq = m.q.weight.n_out, nkv = m.kv.n_embd;
    cuda::QkvEpilogue e{
        {m.rope.n_head, m.rope.head_dim, m.rope.n_rot, m.rope.freq_base, m.style == RopeStyle::Neox},
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
        matmul(cat, nullptr, q, nullptr, nt, rows, false);
        e.q_stride = e.k_stride = e.v_stride = cat.n_out;
        k = rows + nq, v = rows + nq + nkv;
        if (m.v.weight.type != m.q.weight.type) {  // uploaded apart (upload_all): V runs after the concat
            float* v_rows = rows + nt * cat.n_out;
            matmul(mat(m.v.weight), nullptr, q, nullptr, nt, v_rows, false);
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
    cuda::causal_softmax(s, ids(n.src[2]), nt, m.n_head, n_kv, stream);
    blas_check(cuda::cublas().sgemm_strided_batched(
                   blas, CUBLAS_OP_N, CUBLAS_OP_N, int(hd), int(nt), int(n_kv), &one, v, int(kv_stride), hd,
                   s, int(n_kv), nt * n_kv, &zero, dev(n.id), int(out_stride), hd, int(m.n_head)),
               "attention values");
}

void CudaBackend::Impl::run(const ComputeGraph& g, const CNode& n, const NodeBuffers& bufs) {
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
                cuda::rms_norm(in(0), vec(std::get<meta::Weight>(n.meta).weight), out, d, nt, o.eps, s);
            },
            [&](const op::QkNorm& o) {
                cuda::rms_norm(in(0), vec(std::get<meta::Weight>(n.meta).weight), out, o.hd, nt * o.nh, o.eps,
                               s);
            },
            [&](const op::MatMul& o) {
                const auto& m = std::get<meta::MatMul>(n.meta);
                const bool exact = m.weight.type == GgmlType::F16 || m.weight.type == GgmlType::BF16;
                matmul(mat(m.weight), vec(m.bias), in(0), o.residual ? in(1) : nullptr, nt, out, exact);
            },
            [&](const op::Rope& o) {
                const auto& m = std::get<meta::Rope>(n.meta);
                cuda::rope(in(0), out, ids(n.src[1]), nt,
                           {m.n_head, m.head_dim, m.n_rot, m.freq_base, o.style == RopeStyle::Neox}, s);
            },
            [&](const op::Attn&) {
                const bool prefill = nt > cuda::kMaxMatvecTokens;
                const auto& m = std::get<meta::Attn>(n.meta);
                if (prefill && gemm_attention && !opt.invariant && n.src.size() == 3)
                    return attention_gemm(g, n, bufs);  // unpaged
                const cuda::AttnShape a{m.n_head, m.n_head_kv,  m.hd, g[n.src[0]].shape[0],
                                        m.scale,  opt.invariant};
                const cuda::KvSlots at = slots(n);
                if (!prefill || opt.invariant)
                    return cuda::attention(in(0), region(m.layer), at, nt, a, out, s);
                if (!at.table) return cuda::attention_prefill(in(0), region(m.layer), at, nt, a, out, s);
                // A paged batch: decode tokens row by row, prefill chunks query-tiled.
                cuda::attention(in(0), region(m.layer), at, nt, a, out, s, cuda::AttnRows::kSingle);
                cuda::attention_prefill(in(0), region(m.layer), at, nt, a, out, s, cuda::AttnRows::kChunked);
            },
            [&](const op::KvcacheStore& o) {
                cuda::kv_store(in(0), in(1), slots(n), g[n.src[0]].shape[1], region(o.layer), s);
            },
            [&](const op::Add&) { cuda::add(in(0), in(1), out, numel, s); },
            [&](const op::Mul&) { cuda::mul(in(0), in(1), out, numel, s); },
            [&](const op::Silu&) { cuda::silu(in(0), out, numel, s); },
            [&](const op::SwiGLU&) { cuda::swiglu(in(0), in(1), out, numel, s); },
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
            [&](const op::Input&) {},
            [&](const op::KvcacheLoad&) {},
            [&](const op::FusedQKV&) { fused_qkv(n); },
            [&](const op::FusedQkvNorm&) { fused_qkv(n); },
            [&](const op::QkvBiasRopeStore&) { fused_qkv(n); },
        },
        n.op);
}

void CudaBackend::compute(const ComputeGraph& g, const CNode& n, const NodeBuffers& bufs) {
    impl_->run(g, n, bufs);
}

double CudaBackend::Impl::node_weight_bytes(const CNode& n) const {
    double b = 0;
    auto add = [&](const WeightRef& w) { b += w.present() && w.n_out > 1 ? double(bytes_of(w)) : 0.0; };
    std::visit(Overload{[&](const meta::MatMul& m) { add(m.weight); },
                        [&](const meta::FusedQkv& m) { add(m.q.weight), add(m.k.weight), add(m.v.weight); },
                        [&](const meta::FusedFfn& m) { add(m.gate), add(m.up); }, [&](const auto&) {}},
               n.meta);
    if (std::holds_alternative<op::QkvBiasRopeStore>(n.op)) b = 0;  // its projections are their own nodes
    return b;
}

void CudaBackend::Impl::run_profiled(const ComputeGraph& g, const CNode& n, const NodeBuffers& bufs) {
    if (!ev[0]) {
        MINFER_CUDA_CHECK(cudaEventCreate(&ev[0]));
        MINFER_CUDA_CHECK(cudaEventCreate(&ev[1]));
    }
    MINFER_CUDA_CHECK(cudaEventRecord(ev[0], stream));
    run(g, n, bufs);
    MINFER_CUDA_CHECK(cudaEventRecord(ev[1], stream));
    MINFER_CUDA_CHECK(cudaEventSynchronize(ev[1]));
    float ms = 0;
    MINFER_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
    const bool small = n.shape[1] <= cuda::kMaxMatvecTokens;
    OpTime& t = op_times[std::string(op_name(n.op)) + (small ? " (decode)" : " (prefill)")];
    t.ms += ms;
    t.weight_bytes += node_weight_bytes(n);
    ++t.calls;
}

void CudaBackend::Impl::print_profile() const {
    std::fprintf(stderr,
                 "| op | calls | total ms | mean us | weight GB/s |\n| --- | ---: | ---: | ---: | ---: |\n");
    for (const auto& [name, t] : op_times)
        std::fprintf(stderr, "| %s | %lld | %.3f | %.2f | %.0f |\n", name.c_str(), (long long)t.calls, t.ms,
                     1e3 * t.ms / double(t.calls), t.weight_bytes > 0 ? t.weight_bytes / (t.ms * 1e6) : 0.0);
}

// Records the segment's kernels into a CUDA graph and launches it.
void CudaBackend::Impl::run_captured(const ComputeGraph& g, std::span<const NodeId> nodes,
                                     const NodeBuffers& bufs, Captured& c) {
    MINFER_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    cudaGraph_t graph = nullptr;
    try {
        for (NodeId id : nodes) run(g, g[id], bufs);
    } catch (...) {
        cudaStreamEndCapture(stream, &graph);
        if (graph) cudaGraphDestroy(graph);
        throw;
    }
    MINFER_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    const cudaError_t st = cudaGraphInstantiate(&c.exec, graph, 0);
    cudaGraphDestroy(graph);
    MINFER_CUDA_CHECK(st);
    ++captures;
}

// A reusable decode segment runs eagerly once, is captured on its second run and replayed after.
void CudaBackend::compute_segment(const ComputeGraph& g, std::span<const NodeId> nodes,
                                  const NodeBuffers& bufs, bool reusable) {
    Impl& im = *impl_;
    if (im.profile) {
        for (NodeId id : nodes) im.run_profiled(g, g[id], bufs);
        return;
    }
    if (!reusable || !im.replay || !im.capturable || nodes.empty()) {
        for (NodeId id : nodes) im.run(g, g[id], bufs);
        return;
    }
    Impl::Captured& c = im.graphs[{g.uid, nodes.front()}];
    if (!c.exec && ++c.runs < 2) {
        for (NodeId id : nodes) im.run(g, g[id], bufs);
        return;
    }
    if (!c.exec) im.run_captured(g, nodes, bufs, c);
    MINFER_CUDA_CHECK(cudaGraphLaunch(c.exec, im.stream));
    ++im.launches;
}

}  // namespace minfer
