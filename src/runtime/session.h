// A Session runs forward passes of one model over its KV cache: forward_cached builds the graph once
// per distinct GraphParams (build -> assign backends -> fuse -> plan buffers), then only refreshes
// the input leaves (token ids, positions, tail ids) on later calls. MINFER_TRACE / MINFER_GRAPH_DUMP
// (runtime/observe.h), read once at construction, observe every forward step.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/cpu_backend.h"
#include "graph/cache.h"
#include "models/model.h"
#include "sched/executor.h"

namespace minfer {

class StepObserver;  // runtime/observe.h

// Most tokens per forward pass unless asked otherwise: llama.cpp's default micro-batch (-ub).
constexpr int64_t kDefaultUbatch = 512;

struct SessionParams {
    int64_t n_ctx = 0;                      // 0: the model's training context, at most 4096
    int n_threads = 0;                      // 0: all hardware threads
    BackendKind device = BackendKind::Cpu;  // Cuda: every node the GPU supports runs there
    int64_t n_ubatch = kDefaultUbatch;      // most tokens per forward pass (llama.cpp's -ub)
};

class Session {
  public:
    Session(const Model& m, const SessionParams& p);
    ~Session();

    // Runs `tokens` at positions n_past.. and appends them to the KV cache. Returns the logits of the
    // last n_out tokens, [n_out][n_vocab]. Throws Error when the context would overflow. More than
    // n_ubatch tokens run as consecutive passes of at most n_ubatch, as llama.cpp's micro-batches: a
    // prompt's attention scores then take n_ubatch rows at a time, whatever its length.
    std::span<const float> forward(std::span<const int32_t> tokens, int64_t n_out = 1);
    void reset() { n_past_ = 0; }  // KV rows are overwritten as positions are reused

    int64_t n_past() const { return n_past_; }
    int64_t steps() const { return step_; }  // forward passes so far; reset() keeps counting
    int64_t n_ctx() const { return cparams_.n_ctx; }
    const Model& model() const { return model_; }
    GraphParams params_for(int64_t n_tokens, int64_t n_out) const;
    uint64_t graph_builds() const { return cache_.builds(); }
    const ComputeGraph& graph() { return cache_.graph(); }
    const KvCache& kv() const { return kv_; }
    const Backend* gpu() const { return gpu_.get(); }
    // Builds, assigns and fuses the graph for `p` without executing it (dumps, tests).
    ComputeGraph planned_graph(const GraphParams& p);

  private:
    ComputeGraph& forward_cached(const GraphParams& p);
    std::span<const float> forward_pass(std::span<const int32_t> tokens, int64_t n_out);

    const Model& model_;
    CParams cparams_;
    int64_t n_ubatch_;
    CpuBackend cpu_;
    std::unique_ptr<Backend> gpu_;    // null on the CPU device
    std::vector<Backend*> backends_;  // priority order
    GraphCache cache_;
    KvCache kv_;
    Executor exec_{kv_};
    int64_t n_past_ = 0;
    int64_t step_ = 0;
    std::unique_ptr<StepObserver> observer_;
    std::vector<int32_t> positions_, tail_;
    std::vector<float> logits_;  // the wanted logits of a forward split into passes
};

}  // namespace minfer
