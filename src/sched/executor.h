// Runs a planned graph: nodes in build order (the order that guarantees a KV store runs before the
// attention that reads it), each on its assigned backend; bufferless nodes (fusion orphans, KV views)
// are skipped.
#pragma once
#include <span>
#include <vector>

#include "backend/backend.h"
#include "sched/alloc.h"

namespace minfer {

class Executor final : public NodeBuffers {
  public:
    explicit Executor(KvCache& kv) : kv_(kv) {}
    // Adopts the plan of a newly built graph; the arena only grows.
    void bind(BufferPlan plan);
    void fill_input(NodeId id, std::span<const int32_t> values);
    void run(const ComputeGraph& g, const std::vector<Backend*>& backends);

    float* data(NodeId id) const override;
    KvCache& kv() const override { return kv_; }
    const BufferPlan& plan() const { return plan_; }

  private:
    KvCache& kv_;
    BufferPlan plan_;
    mutable std::vector<float> arena_;
};

}  // namespace minfer
