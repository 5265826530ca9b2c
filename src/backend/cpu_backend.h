// The CPU backend: runs every op with the kernels in backend/cpu/, weights read straight from the
// GGUF mapping (no copy), work split over a persistent thread pool. Decode matmuls of quantized weights
// use int8x2 activations (cpu::DecodeDot); MINFER_EXACT_DECODE=1 forces the f32 dots and
// MINFER_INT8_DECODE=1 llama.cpp's plain int8 arithmetic (faster, not exact).
#pragma once
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/moe.h"
#include "backend/cpu/threadpool.h"
#include "quant/quants.h"

namespace minfer {

class Communicator;
class GgufFile;

// How the CPU backend computes, chosen by its owner (the backend reads no environment).
struct CpuOptions {
    cpu::DecodeDot decode = cpu::DecodeDot::Int8x2;  // the integer dots of quantized products
    // Every matmul column gets the arithmetic of a one-column product, whatever the batch (cpu::matmul's
    // invariant mode), so a sequence's results do not depend on what shares its forwards.
    bool invariant = false;
    // The rank's communicator in a tensor-parallel group, for the AllReduce and AllGather nodes of its
    // shard's graphs; null for a whole model (whose graphs have none).
    Communicator* comm = nullptr;
};

class CpuBackend final : public Backend {
  public:
    CpuBackend(const GgufFile& weights, int n_threads, const CpuOptions& o = {});
    BackendKind kind() const override { return BackendKind::Cpu; }
    bool supports(const CNode& n) const override;
    void prepare(const ComputeGraph& g) override;
    void compute(const ComputeGraph& g, const CNode& n, const NodeBuffers& bufs) override;
    int n_threads() const { return pool_.size(); }
    ThreadPool& threads() { return pool_; }  // also the engine's host work between steps (sampling)

    struct Weight {
        const void* data = nullptr;
        const QuantTraits* q = nullptr;
    };

  private:
    const Weight& weight(const WeightRef& w);
    const float* vec(const WeightRef& w);  // norm, bias or sinks as f32 (converted once if stored otherwise)
    void matmul(const meta::MatMul& m, const float* x, int64_t nt, float* y);
    void embedding(const CNode& n, const NodeBuffers& bufs);
    void collective(const CNode& n, const NodeBuffers& bufs);
    void attention(const ComputeGraph& g, const CNode& n, const NodeBuffers& bufs);
    void kv_store(const ComputeGraph& g, const CNode& n, int layer, const NodeBuffers& bufs);
    void qkv_epilogue(const CNode& n, int64_t nt, float* q, float* k, const float* v,
                      const NodeBuffers& bufs);
    void fused_qkv(const CNode& n, const NodeBuffers& bufs);
    void fused_ffn(const CNode& n, const NodeBuffers& bufs);
    void moe_ffn(const CNode& n, const op::MoeFfn& o, const NodeBuffers& bufs);
    template <class F>
    void rows(int64_t nt, F&& f);  // f(t) for each row, split over threads when nt > 1

    const GgufFile& file_;
    ThreadPool pool_;
    std::unordered_map<std::string, Weight> weights_;
    std::unordered_map<std::string, std::vector<float>> converted_;  // non-f32 1-D weights
    std::vector<float> scratch_;                                     // per-thread attention scores
    std::vector<float> kv_scratch_;     // per-thread K/V rows of one head as f32 (f16 / q8_0 caches)
    std::vector<float> fused_scratch_;  // K/V or gate/up intermediates of the fused ops
    cpu::MoeScratch moe_scratch_;       // routing and gathered rows of the MoE FFN
    cpu::DecodeDot decode_;
    bool invariant_;
    Communicator* comm_;
};

}  // namespace minfer
