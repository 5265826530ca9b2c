// GraphCache: keeps the last built graph and the params that built it. Reuse is a params-only check
// (topology is a function of GraphParams); the structural tripwire rebuilds and compares node for node
// to catch a builder that secretly depends on something else.
#pragma once
#include <cstdint>
#include <optional>

#include "graph/graph.h"
#include "graph/params.h"

namespace minfer {

class GraphCache {
  public:
    // True when a graph built from params equal to `p` is cached (the caller refreshes inputs only).
    bool try_reuse(const GraphParams& p) const { return graph_ && params_ == p; }
    // Stores a freshly built graph with a new uid (monotonic per process) and returns it.
    ComputeGraph& replace(ComputeGraph g, const GraphParams& p);
    ComputeGraph& graph() { return *graph_; }
    const GraphParams& params() const { return *params_; }
    uint64_t builds() const { return builds_; }
    void clear();

    // Throws Error describing the first difference when `rebuilt` differs from the cached graph.
    void verify_structural(const ComputeGraph& rebuilt) const;
    // Whether callers should run the tripwire: on in debug builds and when MINFER_GRAPH_TRIPWIRE=1.
    static bool tripwire_enabled();

  private:
    std::optional<ComputeGraph> graph_;
    std::optional<GraphParams> params_;
    uint64_t builds_ = 0;
};

}  // namespace minfer
