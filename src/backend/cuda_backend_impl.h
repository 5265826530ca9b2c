// The CUDA backend's state (CudaBackend::Impl) and its small helpers, shared by the backend's source files:
// cuda_backend.cpp (construction, the per-node dispatch, products and capture), cuda_backend_setup.cpp
// (weight upload, KV regions and scratch planning) and cuda_backend_profile.cpp (MINFER_CUDA_PROFILE).
// Private to src/backend.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/buffer_plan.h"
#include "backend/cuda/attn_prefill_mma.h"
#include "backend/cuda/cublas_lib.h"
#include "backend/cuda/cuda_util.h"
#include "backend/cuda/nccl_comm.h"
#include "backend/cuda/ops_cuda.h"
#include "backend/cuda/quant_cuda.h"
#include "backend/cuda/quant_mma.h"
#include "backend/cuda/quant_mma_f16.h"
#include "backend/cuda_backend.h"
#include "gguf/gguf.h"
#include "graph/weights.h"
#include "kv/kv_cache.h"
#include "quant/quants.h"
#include "util/error.h"
#include "util/overload.h"

namespace minfer {

// Whether two RoPE parameter sets turn their pairs by the same angles (the heads may differ).
inline bool same_angles(const meta::Rope& a, const meta::Rope& b) {
    return a.n_rot == b.n_rot && a.freq_base == b.freq_base && a.freq_scale == b.freq_scale &&
           a.yarn == b.yarn;
}

// The kernels' shape of a RoPE node's parameters.
inline cuda::RopeShape rope_shape(const meta::Rope& r, bool neox) {
    return {r.n_head,     r.head_dim, r.n_rot,     r.freq_base,  neox,
            r.freq_scale, r.yarn.low, r.yarn.high, r.yarn.mscale};
}

using cuda::QMatrix;

inline void blas_check(cublasStatus_t st, const char* what) {
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
inline cuda::XQuant decode_x_format(CudaOptions::DecodeX x) {
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

// Weights whose values a half holds exactly: their GEMMs split the activations into two halves
// (CudaBackend::Impl::gemm), so that the product keeps f32 accuracy.
inline bool exact_in_half(GgmlType t) {
    return t == GgmlType::F16 || t == GgmlType::BF16;
}

// A product's x as a node of a graph, when the caller knows it.
struct XNode {
    uint64_t graph = 0;
    NodeId node = -1;  // -1: not known, never shared
    bool operator==(const XNode&) const = default;
};

inline const meta::Paging& paging_of(const CNode& n) {
    if (const auto* a = std::get_if<meta::Attn>(&n.meta)) return a->paging;
    if (const auto* f = std::get_if<meta::FusedQkv>(&n.meta)) return f->kv.paging;
    return std::get<meta::Kv>(n.meta).paging;
}

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
    // opt.half_weights: the GEMM's half copies (keep_half, half_of), by the matrix's device data and rows
    // (a layer's Q matrix starts where its concatenated Q|K|V does).
    std::map<std::pair<const void*, int64_t>, std::unique_ptr<DeviceBuffer>> halves;
    DeviceBuffer x8;               // one token's x as int8 (cuda::quantize_x8), for the matrices that take it
    DeviceBuffer mma_x, mma_part;  // x quantized for cuda::matmul_mma, and its split partial sums
    DeviceBuffer mma_tickets;      // cuda::matmul_mma_f16's counters, zero between its launches
    DeviceBuffer moe;              // a mixture's routing, expert activations and outputs (moe_ffn)
    // Which node's values mma_x holds quantized (cuda::quantize_x_mma), so that the products that follow
    // with the same x (Q|K|V and V apart, gate and up) read them instead of quantizing again. A node is
    // computed once per run and stays live until its last product; run() forgets the node at every node
    // that is no product (a MatMul or a fused QKV), and each segment starts without it.
    XNode mma_x_holds;
    XNode gemm_x_holds;      // the same for the GEMM's half x (gemm_x), split once for both
    bool gemm_x_lo = false;  // gemm_x holds its lo halves too
    // By node: a GEMM over half weights (not exact in half) reads its values, so its producer, where it
    // is an RMSNorm or SwiGLU, writes their hi halves into gemm_x itself (reserve_scratch).
    std::vector<bool> half_x;
    DeviceBuffer gather;      // NCCL's rank-major all-gather result before cuda::interleave_ranks
    float* pinned = nullptr;  // the executor's host arena, page-locked for fast transfers
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
    // kernels. A paged (batched) graph takes the GEMM from 2 tokens: there the matrix-vector kernels' f32
    // path for 2..8 tokens gave about a third of the GEMM's throughput at B = 8
    // (bench/STANDING-GPU-BATCHED.md).
    int64_t gemm_tokens = cuda::kMaxMatvecTokens + 1;
    DeviceBuffer rope_cs;  // cuda::RopeTable of the QKV fusions
    cuda::RopeTable rope_tab{};
    meta::Rope rope_key{};  // the rotary parameters the table was filled for (its angles: same_angles)
    uint64_t launches = 0, captures = 0;

    // opt.profile: every node timed alone with CUDA events; a per-op table at exit.
    struct OpTime {
        double ms = 0, weight_bytes = 0;
        int64_t calls = 0;
    };
    bool profile = opt.profile;
    // Prefill attention as the query-tiled kernel (cuda::attention_prefill), or with
    // opt.gemm_attention as cuBLAS products around a score matrix (attention_gemm), which needs
    // n_head * tokens * n_ctx floats of scratch. The kernel is the default: faster on the 0.5B at every
    // depth, level with cuBLAS on the 7B (bench/STANDING-GPU.md, eleventh session).
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
        return same_angles(rope_key, r) ? rope_tab : cuda::RopeTable{};
    }
    void matmul(const QMatrix& w, const float* bias, const float* x, const float* res, int64_t nt, float* y,
                XNode x_node = {});
    void gemm(const QMatrix& w, const float* x, int64_t nt, float* y, XNode x_node = {});
    void* half_out(const ComputeGraph& g, const CNode& n);  // gemm_x when half_x says so, and claims it
    void keep_half(const QMatrix& w);                       // makes w's half copy for the GEMM where it may
    const void* half_of(const QMatrix& w) const;            // that copy (F16: w itself), or null
    enum class Mma : uint8_t { None, Int8, F16 };  // which tensor-core product takes a matmul, if any
    Mma mma_path(const QMatrix& w, int64_t nt) const;
    void fused_qkv(const ComputeGraph& g, const CNode& n);
    // A mixture of experts (cuda_backend_moe.cpp): whether its kernels take it, the scratch it needs.
    bool moe_supported(const CNode& n) const;
    size_t moe_scratch_floats(const CNode& n) const;
    void moe_ffn(const CNode& n);
    void attention_gemm(const ComputeGraph& g, const CNode& n, const NodeBuffers& bufs);
    void run(const ComputeGraph& g, const CNode& n, const NodeBuffers& bufs);
    void run_captured(const ComputeGraph& g, std::span<const NodeId> nodes, const NodeBuffers& bufs,
                      Captured& c);
    void run_profiled(const ComputeGraph& g, const CNode& n, const NodeBuffers& bufs);
    double node_weight_bytes(const CNode& n) const;
    void print_profile() const;
};

}  // namespace minfer
