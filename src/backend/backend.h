// The backend interface: a small vtable, as ggml's. A backend says which nodes it can run, prepares
// per-graph state once (resolving weight names to data), then computes nodes one at a time in build
// order with the buffers the allocator planned.
#pragma once
#include <cstdint>

#include "graph/graph.h"

namespace minfer {

class KvCache;

// Where each node's output lives for one execution; filled by the executor.
struct NodeBuffers {
    virtual float* data(NodeId id) const = 0;  // nullptr for bufferless nodes
    virtual KvCache& kv() const = 0;

  protected:
    ~NodeBuffers() = default;
};

class Backend {
  public:
    virtual ~Backend() = default;
    virtual BackendKind kind() const = 0;
    virtual bool supports(const CNode& n) const = 0;
    // Once per newly built graph: resolve weights named by node metadata (Error when one is missing).
    virtual void prepare(const ComputeGraph& g) = 0;
    virtual void compute(const ComputeGraph& g, const CNode& n, const NodeBuffers& bufs) = 0;
};

}  // namespace minfer
