#include "sched/executor.h"

#include <chrono>
#include <cstring>

#include "util/error.h"

namespace minfer {

namespace {

bool executed(const CNode& n, const BufferPlan& plan) {
    if (std::holds_alternative<op::Input>(n.op) || std::holds_alternative<op::KvcacheLoad>(n.op))
        return false;
    return std::holds_alternative<op::KvcacheStore>(n.op) || plan.has_buffer(n.id);  // else a fusion orphan
}

Backend* backend_of(const CNode& n, const std::vector<Backend*>& backends) {
    for (Backend* b : backends)
        if (b->kind() == n.backend) return b;
    throw Error("node " + std::to_string(n.id) + " (" + n.name + ") has no backend");
}

}  // namespace

Schedule make_schedule(const ComputeGraph& g, const BufferPlan& plan, const std::vector<Backend*>& backends) {
    Schedule s;
    std::vector<Backend*> home(g.nodes.size(), nullptr);      // who produced each buffer (null: host input)
    std::vector<std::vector<Backend*>> held(g.nodes.size());  // backends holding a valid copy
    auto holds = [&](NodeId id, Backend* b) {
        for (Backend* h : held[size_t(id)])
            if (h == b) return true;
        return false;
    };
    auto host_side = [](Backend* b) { return b == nullptr || !b->has_own_memory(); };
    for (const CNode& n : g.nodes) {
        if (!executed(n, plan)) continue;
        Backend* b = backend_of(n, backends);
        if (s.segments.empty() || s.segments.back().backend != b) s.segments.push_back({b, {}, {}});
        Segment& seg = s.segments.back();
        for (NodeId src : n.src) {
            if (!plan.has_buffer(src) || holds(src, b)) continue;
            Backend* from = home[size_t(src)];
            if (host_side(from) && host_side(b)) continue;  // both read the host arena
            seg.pulls.push_back({src, host_side(from) ? b : from});
            held[size_t(src)].push_back(b);
        }
        seg.nodes.push_back(n.id);
        home[size_t(n.id)] = b;
        held[size_t(n.id)] = {b};
    }
    for (NodeId out : g.outputs)
        if (!host_side(home[size_t(out)])) s.outputs.push_back({out, home[size_t(out)]});
    return s;
}

void Executor::bind(const ComputeGraph& g, BufferPlan plan, const std::vector<Backend*>& backends) {
    plan_ = std::move(plan);
    host_ = nullptr;
    for (Backend* b : backends)
        if (!host_) host_ = b->host_arena(plan_.arena_floats);
    if (!host_) {
        if (arena_.size() < size_t(plan_.arena_floats)) arena_.resize(size_t(plan_.arena_floats));
        host_ = arena_.data();
    }
    for (Backend* b : backends) b->bind(plan_);
    schedule_ = make_schedule(g, plan_, backends);
}

float* Executor::data(NodeId id) const {
    const int64_t off = plan_.offset[size_t(id)];
    return off < 0 ? nullptr : host_ + off;
}

void Executor::fill_input(NodeId id, std::span<const int32_t> values) {
    float* dst = data(id);
    if (!dst) throw Error("input node " + std::to_string(id) + " has no buffer");
    // Integer inputs are stored bit-exactly in the f32 arena, so one pool serves both dtypes.
    std::memcpy(dst, values.data(), values.size_bytes());
}

// A pull into `to`: the host-side sender means an upload by `to`, else a download by the sender.
void Executor::transfer(const ComputeGraph& g, const Transfer& t, Backend* to) {
    const int64_t n = g[t.node].n_elements();
    if (t.from == to)
        to->upload(*this, t.node, n);
    else
        t.from->download(*this, t.node, n);
}

void Executor::run_observed(const ComputeGraph& g, const Segment& seg) {
    using Clock = std::chrono::steady_clock;
    for (NodeId id : seg.nodes) {
        const CNode& n = g[id];
        const Clock::time_point t0 = Clock::now();
        seg.backend->compute_segment(g, {&id, 1}, *this, false);
        if (seg.backend->has_own_memory() && plan_.has_buffer(id))
            seg.backend->download(*this, id, n.n_elements());
        const std::chrono::duration<double, std::micro> us = Clock::now() - t0;
        observer_->on_node(n, data(id), us.count());
    }
}

void Executor::run(const ComputeGraph& g) {
    for (const Segment& seg : schedule_.segments) {
        for (const Transfer& t : seg.pulls) transfer(g, t, seg.backend);
        if (observer_)
            run_observed(g, seg);
        else
            seg.backend->compute_segment(g, seg.nodes, *this, true);
    }
    for (const Transfer& t : schedule_.outputs) t.from->download(*this, t.node, g[t.node].n_elements());
}

}  // namespace minfer
