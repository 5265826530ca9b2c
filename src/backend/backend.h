// The backend interface: a small vtable, as ggml's. A backend says which nodes it can run, prepares
// per-graph state once (resolving weight names to data), then computes runs of consecutive nodes
// (segments) in build order with the buffers the allocator planned. A backend with its own memory
// (a GPU) mirrors the executor's host arena at the same offsets; the executor moves the few buffers
// that cross a segment boundary with upload/download.
#pragma once
#include <cstdint>
#include <span>

#include "graph/graph.h"

namespace minfer {

class KvCache;
struct BufferPlan;

// Where each node's output lives for one execution; filled by the executor.
struct NodeBuffers {
    virtual float* data(NodeId id) const = 0;  // host memory; nullptr for bufferless nodes
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
    // Runs consecutive nodes of g assigned to this backend. `reusable`: the same segment of the same
    // graph (g.uid) is likely to run again, so a backend may record and replay it (CUDA graphs).
    virtual void compute_segment(const ComputeGraph& g, std::span<const NodeId> nodes,
                                 const NodeBuffers& bufs, bool reusable) {
        for (NodeId id : nodes) compute(g, g[id], bufs);
    }

    // Backends with their own memory: sized to each newly planned graph, and buffer transfers between
    // the host arena (bufs.data) and the backend's mirror of it; download completes before returning.
    virtual bool has_own_memory() const { return false; }
    // Host memory for the executor's arena that this backend transfers from fastest (pinned for a
    // GPU), grown to at least n_floats and owned by the backend; nullptr: ordinary memory will do.
    virtual float* host_arena(int64_t n_floats) { return nullptr; }
    virtual void bind(const BufferPlan& plan) {}
    virtual void upload(const NodeBuffers& bufs, NodeId id, int64_t n_floats) {}
    virtual void download(const NodeBuffers& bufs, NodeId id, int64_t n_floats) {}
};

}  // namespace minfer
