// Runs a planned graph: nodes in build order (the order that guarantees a KV store runs before the
// attention that reads it), each on its assigned backend; bufferless nodes (fusion orphans, KV views)
// are skipped. An optional observer sees every executed node right after it ran (tracing, dumps).
#pragma once
#include <span>
#include <vector>

#include "backend/backend.h"
#include "sched/alloc.h"

namespace minfer {

// Called after each executed node with its wall time; `data` is the node's output buffer (nullptr for
// KV stores, which write only into the cache).
class NodeObserver {
  public:
    virtual ~NodeObserver() = default;
    virtual void on_node(const CNode& n, const float* data, double us) = 0;
};

class Executor final : public NodeBuffers {
  public:
    explicit Executor(KvCache& kv) : kv_(kv) {}
    // Adopts the plan of a newly built graph; the arena only grows.
    void bind(BufferPlan plan);
    void fill_input(NodeId id, std::span<const int32_t> values);
    void run(const ComputeGraph& g, const std::vector<Backend*>& backends);
    // nullptr (the default) leaves the node loop at one untaken branch per node.
    void set_observer(NodeObserver* o) { observer_ = o; }

    float* data(NodeId id) const override;
    KvCache& kv() const override { return kv_; }
    const BufferPlan& plan() const { return plan_; }

  private:
    KvCache& kv_;
    BufferPlan plan_;
    NodeObserver* observer_ = nullptr;
    mutable std::vector<float> arena_;
};

}  // namespace minfer
