// A Session is one sequence on an Engine of its own: the single-stream interface of `run`, `chat`,
// `eval` and `bench`. forward() appends tokens to the sequence and returns logits; prompts longer than
// the micro-batch run as consecutive passes. MINFER_TRACE / MINFER_GRAPH_DUMP (runtime/observe.h), read
// once at construction, observe every forward step.
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/engine.h"

namespace minfer {

struct SessionParams {
    int64_t n_ctx = 0;                      // 0: the model's training context, at most 4096
    int n_threads = 0;                      // 0: all hardware threads
    BackendKind device = BackendKind::Cpu;  // Cuda: every node the GPU supports runs there
    int64_t n_ubatch = kDefaultUbatch;      // most tokens per forward pass (llama.cpp's -ub)
    bool batch_invariant = false;           // --deterministic: the arithmetic of batched runs
    GgmlType kv_type = GgmlType::F32;       // --kv-type
    int64_t kv_mem = 0;                     // --kv-mem: the context is what this many bytes hold
    int tensor_parallel = 1;                // --tensor-parallel: ranks, each with a shard of the model
};

// The engine a Session runs on: these settings, one sequence (callers may raise max_seqs).
EngineParams engine_params(const Model& m, const SessionParams& p);

class Session {
  public:
    Session(const Model& m, const SessionParams& p);

    // Runs `tokens` at positions n_past.. and appends them to the KV cache. Returns the logits of the
    // last n_out tokens, [n_out][n_vocab]. Throws Error when the context would overflow. More than
    // n_ubatch tokens run as consecutive passes of at most n_ubatch, as llama.cpp's micro-batches: a
    // prompt's attention scores then take n_ubatch rows at a time, whatever its length.
    std::span<const float> forward(std::span<const int32_t> tokens, int64_t n_out = 1);
    void reset();  // an empty sequence (its full blocks stay in the prefix cache)
    // The set-up of the first pass of a forward of n_tokens (Engine::prepare), done beforehand.
    void prepare(int64_t n_tokens) { engine_.prepare(std::min(n_tokens, engine_.max_tokens()), 1); }

    int64_t n_past() const { return engine_.n_past(seq_); }
    int64_t steps() const { return engine_.steps(); }  // forward passes so far; reset() keeps counting
    int64_t n_ctx() const { return n_ctx_; }
    const Model& model() const { return engine_.model(); }
    GraphParams params_for(int64_t n_tokens, int64_t n_out) const {
        return engine_.params_for(n_tokens, n_out);
    }
    uint64_t graph_builds() const { return engine_.graph_builds(); }
    const ComputeGraph& graph() const { return engine_.graph(); }
    const KvCache& kv() const { return engine_.kv(); }
    const Backend* gpu() const { return engine_.gpu(); }
    ComputeGraph planned_graph(const GraphParams& p) { return engine_.planned_graph(p); }
    const Engine& engine() const { return engine_; }
    void add_observer(std::unique_ptr<StepObserver> o);  // Engine::add_observer

  private:
    Engine engine_;
    int64_t n_ctx_;
    SeqId seq_;
    std::vector<float> logits_;  // the wanted logits of a forward split into passes
};

}  // namespace minfer
