// Runs a planned graph: nodes in build order (the order that guarantees a KV store runs before the
// attention that reads it), grouped into segments of consecutive nodes on one backend; bufferless
// nodes (fusion orphans, KV views) are skipped. Buffers that cross from one backend's memory to
// another's move at segment boundaries: the schedule, made once per graph, names each transfer.
// An optional observer sees every executed node right after it ran (tracing, dumps); with one, every
// node is its own segment and device results are copied back for it.
#pragma once
#include <span>
#include <vector>

#include "backend/backend.h"
#include "kv/kv_cache.h"
#include "sched/alloc.h"

namespace minfer {

// Called after each executed node with its wall time; `data` is the node's output buffer (nullptr for
// KV stores, which write only into the cache).
class NodeObserver {
  public:
    virtual ~NodeObserver() = default;
    virtual void on_node(const CNode& n, const float* data, double us) = 0;
};

struct Transfer {
    NodeId node;
    Backend* from;  // the backend holding the buffer; the segment's backend receives it
};

struct Segment {
    Backend* backend;
    std::vector<NodeId> nodes;
    std::vector<Transfer> pulls;  // before the segment runs
};

struct Schedule {
    std::vector<Segment> segments;
    std::vector<Transfer> outputs;  // device-held outputs copied to the host at the end
};

// Segments of maximal runs of executed nodes per backend, and the minimum transfers between them:
// a buffer moves once to each backend that reads it; inputs start on the host.
Schedule make_schedule(const ComputeGraph& g, const BufferPlan& plan, const std::vector<Backend*>& backends);

class Executor final : public NodeBuffers {
  public:
    explicit Executor(KvCache& kv) : kv_(kv) {}
    // Adopts the plan of a newly built graph (the host arena only grows) and schedules it.
    void bind(const ComputeGraph& g, BufferPlan plan, const std::vector<Backend*>& backends);
    void fill_input(NodeId id, std::span<const int32_t> values);
    void run(const ComputeGraph& g);
    // nullptr (the default) leaves the node loop at one untaken branch per segment.
    void set_observer(NodeObserver* o) { observer_ = o; }

    float* data(NodeId id) const override;
    KvCache& kv() const override { return kv_; }
    const BufferPlan& plan() const { return plan_; }
    const Schedule& schedule() const { return schedule_; }

  private:
    void transfer(const ComputeGraph& g, const Transfer& t, Backend* to);
    void run_observed(const ComputeGraph& g, const Segment& seg);

    KvCache& kv_;
    BufferPlan plan_;
    Schedule schedule_;
    NodeObserver* observer_ = nullptr;
    std::vector<float> arena_;  // unless a backend provides the host arena
    float* host_ = nullptr;     // the host arena in use
};

}  // namespace minfer
