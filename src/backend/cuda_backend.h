// The CUDA backend: weights uploaded once at construction (quantized, as in the file; Q/K/V of a layer
// concatenated when their types agree, for the fused decode projection), a device mirror of the
// executor's arena, persistent per-layer KV regions on the device, and the kernels of backend/cuda/.
// Decode segments, and those of paged (batched) graphs, are captured into a CUDA graph on their second run
// and replayed afterwards, keyed on the graph's uid (CudaOptions::graphs). The KV
// regions are f32, in the unpaged layout of one sequence or in blocks addressed through block tables.
#pragma once
#include <cstdint>
#include <memory>

#include "backend/backend.h"

namespace minfer {

class GgufFile;
struct WeightSet;
namespace cuda {
class NcclGroup;  // backend/cuda/nccl_comm.h
}

// The backend's settings, read once where the engine's parameters are made (runtime/engine.h) and
// passed in; the MINFER_* switches that set them are for measurement and tests.
struct CudaOptions {
    enum class DecodeX : uint8_t { F32, Int8, Int8x2 };
    DecodeX decode_x = DecodeX::Int8x2;  // how one token's Q4_K/Q6_K products take x (as the CPU's dots)
    bool graphs = true;                  // CUDA-graph replay (MINFER_NO_CUDA_GRAPH=1: off)
    bool tiles = true;                   // Q4_K repacked for the tensor cores (MINFER_NO_TILES=1: off)
    bool pad = true;                     // Q6_K blocks padded to 16 bytes (MINFER_NO_PAD=1: off)
    bool gemm_attention = false;  // unpaged prefill attention as cuBLAS products (MINFER_PREFILL_GEMM=1)
    // Prefill attention at head_dim 64 and 128 on the f16 tensor cores, each f32 operand as two halves
    // (cuda::attention_prefill_mma); else the f32 query-tiled kernel (MINFER_F32_PREFILL_ATTN=1).
    bool mma_attention = true;
    bool profile = false;  // every node timed alone, a per-op table at exit (MINFER_CUDA_PROFILE=1)
    // Products of 2 to mma_tokens columns (twice that for matrices of 2048 rows and columns or more that
    // the f16 product below does not take) with the matrices cuda::mma_fits takes run on the int8 tensor
    // cores (cuda::matmul_mma); wider ones as dequantization + cuBLAS (MINFER_NO_MMA=1: never on them;
    // MINFER_MMA_TOKENS=N sets mma_tokens).
    int64_t mma_tokens = 16;
    // Wider products up to mma_f16_tokens columns with those matrices of 2048 rows and columns or more
    // (cuda::mma_f16_fits) run on the f16 tensor cores, the weights dequantized in registers
    // (cuda::matmul_mma_f16); wider ones, and smaller matrices, as dequantization + cuBLAS
    // (MINFER_MMA_F16_TOKENS=N sets it, 0: off).
    int64_t mma_f16_tokens = 64;
    // The cuBLAS GEMM's weights (prefill, wide batches) kept as half copies on the device, dequantized once
    // where free memory allows, instead of dequantized before every product: the same halves, so the same
    // bits (MINFER_NO_HALF_WEIGHTS=1: off). F16 weights are read in place either way.
    bool half_weights = true;
    // A batch's outputs (logits of many rows, argmax ids) written by their kernels straight into pinned
    // host memory rather than copied after the graph (MINFER_NO_HOST_OUTPUTS=1: copied).
    bool host_outputs = true;
    // A mixture of experts wholly on the device (routing, the experts' products, their sum:
    // cuda_backend_moe.cpp), its expert stacks uploaded. Off (MINFER_NO_CUDA_MOE=1): its FFN nodes run on
    // the host, the executor moving x, the router logits and the output across.
    bool moe = true;
    // Steps of at least moe_mma_tokens tokens run a mixture's experts as one tensor-core product per
    // expert, its pairs the columns (cuda::matmul_mma_experts; stacks cuda::experts_mma_fits takes,
    // never in the invariant mode); shorter ones as one-token products per pair (MINFER_MOE_MMA_TOKENS=N
    // sets it; 0, the default until it is measured on a GPU: never).
    int64_t moe_mma_tokens = 0;
    // Batch-invariant arithmetic (--deterministic): every product of a matrix cuda::mma_fits takes runs on
    // the tensor cores whatever its width (one column too), the other matrices' products column by column,
    // and attention in the per-row kernel with one token's key splits, so a row's numbers depend on its
    // own inputs only.
    bool invariant = false;
    int device = 0;  // the GPU this backend runs on (made current by its constructor)
    // A tensor-parallel rank's device collectives (NCCL), as rank `rank` of the group: its AllReduce and
    // AllGather nodes then run on this backend's stream, inside its CUDA graphs; null: on the host.
    const cuda::NcclGroup* nccl = nullptr;
    int rank = 0;
};

class CudaBackend final : public Backend {
  public:
    // Uploads `weights` from `file`, which holds their data and must outlive the backend.
    CudaBackend(const GgufFile& file, const WeightSet& weights, const CudaOptions& options = {});
    ~CudaBackend() override;
    BackendKind kind() const override { return BackendKind::Cuda; }
    bool supports(const CNode& n) const override;
    void prepare(const ComputeGraph& g) override;
    void compute(const ComputeGraph& g, const CNode& n, const NodeBuffers& bufs) override;
    void compute_segment(const ComputeGraph& g, std::span<const NodeId> nodes, const NodeBuffers& bufs,
                         bool reusable) override;
    bool has_own_memory() const override { return true; }
    void bind(const BufferPlan& plan) override;
    void upload(const NodeBuffers& bufs, NodeId id, int64_t n_floats) override;
    void download(const NodeBuffers& bufs, NodeId id, int64_t n_floats) override;
    float* host_arena(int64_t n_floats) override;  // pinned

    uint64_t graph_launches() const;  // CUDA-graph replays so far (tests, reports)
    uint64_t graph_captures() const;  // CUDA graphs recorded so far (tests)
    size_t half_copies() const;       // matrices kept as half copies (CudaOptions::half_weights; tests)

    struct Impl;

  private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace minfer
