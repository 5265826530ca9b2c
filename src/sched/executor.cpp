#include "sched/executor.h"

#include <chrono>
#include <cstring>

#include "util/error.h"

namespace minfer {

void Executor::bind(BufferPlan plan) {
    plan_ = std::move(plan);
    if (arena_.size() < size_t(plan_.arena_floats)) arena_.resize(size_t(plan_.arena_floats));
}

float* Executor::data(NodeId id) const {
    const int64_t off = plan_.offset[size_t(id)];
    return off < 0 ? nullptr : arena_.data() + off;
}

void Executor::fill_input(NodeId id, std::span<const int32_t> values) {
    float* dst = data(id);
    if (!dst) throw Error("input node " + std::to_string(id) + " has no buffer");
    // Integer inputs are stored bit-exactly in the f32 arena, so one pool serves both dtypes.
    std::memcpy(dst, values.data(), values.size_bytes());
}

namespace {
void compute_on(const ComputeGraph& g, const CNode& n, const std::vector<Backend*>& backends,
                const NodeBuffers& bufs) {
    for (Backend* b : backends) {
        if (b->kind() == n.backend) {
            b->compute(g, n, bufs);
            return;
        }
    }
}
}  // namespace

void Executor::run(const ComputeGraph& g, const std::vector<Backend*>& backends) {
    using Clock = std::chrono::steady_clock;
    for (const CNode& n : g.nodes) {
        if (std::holds_alternative<op::Input>(n.op) || std::holds_alternative<op::KvcacheLoad>(n.op))
            continue;
        const bool writes_kv = std::holds_alternative<op::KvcacheStore>(n.op);
        if (!writes_kv && !plan_.has_buffer(n.id)) continue;  // orphan left by fusion
        if (!observer_) {
            compute_on(g, n, backends, *this);
            continue;
        }
        const Clock::time_point t0 = Clock::now();
        compute_on(g, n, backends, *this);
        const std::chrono::duration<double, std::micro> us = Clock::now() - t0;
        observer_->on_node(n, data(n.id), us.count());
    }
}

}  // namespace minfer
