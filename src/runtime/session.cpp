#include "runtime/session.h"

#include <algorithm>
#include <numeric>
#include <thread>

#include <unistd.h>

#include "gguf/gguf.h"
#ifdef MINFER_HAVE_CUDA
#include "backend/cuda_backend.h"
#endif
#include "runtime/observe.h"
#include "sched/passes.h"
#include "util/error.h"

namespace minfer {

namespace {
int default_threads(int n) {
    return n > 0 ? n : int(std::max(1u, std::thread::hardware_concurrency()));
}
int64_t default_ctx(const Model& m, int64_t n) {
    return n > 0 ? n : std::min<int64_t>(m.hp.n_ctx_train, 4096);
}

// Refuses a context whose KV cache cannot fit in this machine's memory before anything is allocated.
CParams checked_cparams(const Model& m, int64_t n_ctx, BackendKind device) {
    const double kv_bytes = 2.0 * m.hp.n_layer * double(m.hp.n_kv_embd()) * double(n_ctx) * sizeof(float);
    const double ram = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
    if (ram > 0 && kv_bytes > ram)
        throw Error("the KV cache for a context of " + std::to_string(n_ctx) + " tokens needs " +
                    std::to_string(kv_bytes / double(1 << 30)) + " GiB, more than this machine's memory");
    return CParams::from_env(n_ctx, device != BackendKind::Cpu);
}

std::unique_ptr<Backend> make_gpu_backend(const Model& m, BackendKind device) {
    if (device == BackendKind::Cpu) return nullptr;
#ifdef MINFER_HAVE_CUDA
    return std::make_unique<CudaBackend>(m);
#else
    throw Error("--device cuda: this minfer was built without CUDA (no nvcc was found at build time)");
#endif
}

void check_token_ids(std::span<const int32_t> tokens, int64_t n_vocab) {
    for (const int32_t id : tokens)
        if (id < 0 || id >= n_vocab)
            throw Error("token id " + std::to_string(id) + " is out of range [0, " + std::to_string(n_vocab) +
                        ")");
}
}  // namespace

Session::Session(const Model& m, const SessionParams& p)
    : model_(m),
      cparams_(checked_cparams(m, default_ctx(m, p.n_ctx), p.device)),
      n_ubatch_(p.n_ubatch),
      cpu_(*m.file, default_threads(p.n_threads)),
      gpu_(make_gpu_backend(m, p.device)),
      observer_(observers_from_env()) {
    if (n_ubatch_ < 1) throw Error("the micro-batch size must be at least 1 token");
    if (gpu_) backends_.push_back(gpu_.get());
    backends_.push_back(&cpu_);
    exec_.set_observer(observer_.get());
}

Session::~Session() = default;

GraphParams Session::params_for(int64_t n_tokens, int64_t n_out) const {
    return GraphParams::make(n_tokens, n_out, cparams_);
}

ComputeGraph Session::planned_graph(const GraphParams& p) {
    ComputeGraph g = model_.build_graph(model_, p);
    g.topo_order();  // validates: no dangling ids, no cycles
    assign_backends(g, backends_);
    fuse_swiglu(g, backends_);
    if (cparams_.gpu) fuse_matmul_add(g, backends_);  // saves a kernel launch; nothing on the CPU
    return g;
}

ComputeGraph& Session::forward_cached(const GraphParams& p) {
    if (cache_.try_reuse(p)) {
        if (GraphCache::tripwire_enabled()) cache_.verify_structural(planned_graph(p));
        return cache_.graph();
    }
    ComputeGraph& g = cache_.replace(planned_graph(p), p);
    for (Backend* b : backends_) b->prepare(g);
    kv_.reserve(g);
    exec_.bind(g, plan_buffers(g), backends_);
    return g;
}

std::span<const float> Session::forward(std::span<const int32_t> tokens, int64_t n_out) {
    const auto nt = int64_t(tokens.size());
    if (nt == 0) throw Error("forward: no tokens");
    if (n_past_ + nt > cparams_.n_ctx)
        throw Error("context size exceeded: " + std::to_string(n_past_ + nt) +
                    " tokens do not fit in a context of " + std::to_string(cparams_.n_ctx) +
                    " (use -c to raise it)");
    check_token_ids(tokens, model_.hp.n_vocab);
    n_out = std::clamp<int64_t>(n_out, 1, nt);
    if (nt <= n_ubatch_) return forward_pass(tokens, n_out);
    const int64_t first_out = nt - n_out;  // the first token whose logits are wanted
    logits_.clear();
    for (int64_t start = 0; start < nt; start += n_ubatch_) {
        const int64_t n = std::min(n_ubatch_, nt - start),
                      keep = std::clamp<int64_t>(start + n - first_out, 0, n);
        const std::span<const float> l =
            forward_pass(tokens.subspan(size_t(start), size_t(n)), std::max<int64_t>(keep, 1));
        if (keep == n_out) return l;  // all of them in the last pass: no copy
        if (keep > 0) logits_.insert(logits_.end(), l.begin(), l.end());  // the pass returned just those
    }
    return logits_;
}

std::span<const float> Session::forward_pass(std::span<const int32_t> tokens, int64_t n_out) {
    const auto nt = int64_t(tokens.size());
    ComputeGraph& g = forward_cached(params_for(nt, n_out));

    positions_.resize(size_t(nt));
    std::iota(positions_.begin(), positions_.end(), int32_t(n_past_));
    exec_.fill_input(g.find_input("token_ids"), tokens);
    exec_.fill_input(g.find_input("positions"), positions_);
    if (const NodeId tail = g.find_input("tail_ids"); tail >= 0) {
        tail_.resize(size_t(n_out));
        std::iota(tail_.begin(), tail_.end(), int32_t(nt - n_out));
        exec_.fill_input(tail, tail_);
    }
    if (observer_) observer_->begin_step(step_);
    exec_.run(g);
    if (observer_) observer_->end_step();
    ++step_;
    n_past_ += nt;
    const NodeId out = g.outputs.front();
    return {exec_.data(out), size_t(g[out].n_elements())};
}

}  // namespace minfer
