// GraphCache: one built graph per distinct GraphParams (in practice per token-count bucket), so prefill
// and decode graphs do not rebuild each other. Reuse is a params-only lookup (topology is a function of
// GraphParams); the structural tripwire rebuilds and compares node for node to catch a builder that
// secretly depends on something else.
#pragma once
#include <cstdint>
#include <deque>

#include "graph/graph.h"
#include "graph/params.h"

namespace minfer {

class GraphCache {
  public:
    // The graph built from params equal to `p`, or nullptr (the caller then builds and inserts one).
    ComputeGraph* find(const GraphParams& p);
    // Stores a freshly built graph with a new uid (monotonic per process) and returns it; references to
    // other entries stay valid.
    ComputeGraph& insert(ComputeGraph g, const GraphParams& p);
    size_t size() const { return entries_.size(); }
    uint64_t builds() const { return builds_; }
    void clear() { entries_.clear(); }

    // Throws Error describing the first difference when `rebuilt` differs from the graph cached for `p`
    // (or when none is).
    void verify_structural(const GraphParams& p, const ComputeGraph& rebuilt);
    // Whether callers should run the tripwire: on in debug builds and when MINFER_GRAPH_TRIPWIRE=1 (read
    // once).
    static bool tripwire_enabled();

  private:
    struct Entry {
        GraphParams params;
        ComputeGraph graph;
    };
    std::deque<Entry> entries_;  // a deque: inserting keeps references to the others valid
    uint64_t builds_ = 0;
};

}  // namespace minfer
