#include "runtime/session.h"

#include <algorithm>

#include "runtime/observe.h"
#include "util/error.h"

namespace minfer {

EngineParams engine_params(const Model& m, const SessionParams& p) {
    EngineParams e;
    e.n_ctx = p.n_ctx > 0 ? p.n_ctx : std::min<int64_t>(m.hp.n_ctx_train, 4096);
    e.n_threads = p.n_threads;
    e.device = p.device;
    e.n_ubatch = p.n_ubatch;
    e.batch_invariant = p.batch_invariant;
    e.kv_type = p.kv_type;
    e.kv_mem = p.kv_mem;
    e.tensor_parallel = p.tensor_parallel;
    return e;
}

void Session::add_observer(std::unique_ptr<StepObserver> o) {
    engine_.add_observer(std::move(o));
}

Session::Session(const Model& m, const SessionParams& p)
    : engine_(m, engine_params(m, p)),
      n_ctx_(p.kv_mem > 0 ? engine_.n_ctx() : engine_params(m, p).n_ctx),
      seq_(engine_.open()) {}

void Session::reset() {
    engine_.close(seq_);
    seq_ = engine_.open();
}

std::span<const float> Session::forward(std::span<const int32_t> tokens, int64_t n_out) {
    const auto nt = int64_t(tokens.size());
    if (nt == 0) throw Error("forward: no tokens");
    if (n_past() + nt > n_ctx_)
        throw Error("context size exceeded: " + std::to_string(n_past() + nt) +
                    " tokens do not fit in a context of " + std::to_string(n_ctx_) + " (use -c to raise it)");
    n_out = std::clamp<int64_t>(n_out, 1, nt);
    const int64_t ub = engine_.max_tokens(),
                  first_out = nt - n_out;  // the first token whose logits are wanted
    logits_.clear();
    for (int64_t start = 0; start < nt; start += ub) {
        const int64_t n = std::min(ub, nt - start), keep = std::clamp<int64_t>(start + n - first_out, 0, n);
        const Engine::Chunk chunk{seq_, tokens.subspan(size_t(start), size_t(n)), keep};
        const std::span<const float> l = engine_.forward({&chunk, 1});
        if (keep == n_out) return l;  // all of them in the last pass: no copy
        logits_.insert(logits_.end(), l.begin(), l.end());
    }
    return logits_;
}

}  // namespace minfer
