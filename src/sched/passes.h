// Graph passes run once per newly built graph, between the builder and the allocator: backend
// assignment (every node gets a backend), the SwiGLU and matmul+residual fusion rewrites, and the
// liveness query the allocator and the executor share.
#pragma once
#include <functional>

#include "graph/graph.h"

namespace minfer {

class Backend;

// Gives every node the first backend in `backends` (priority order) that supports it.
// Throws Error naming the node when none does.
void assign_backends(ComputeGraph& g, const std::vector<Backend*>& backends);

// Rewrites Mul(Silu(a), b) into SwiGLU(a, b) in place when the Silu has no other reader and the
// Mul's backend supports SwiGLU. The Silu stays in the list as an orphan (no buffer, never run).
// Returns the number of rewrites.
int fuse_swiglu(ComputeGraph& g, const std::vector<Backend*>& backends);

// Rewrites Add(MatMul(x), r) into MatMul{residual}(x, r) in place when the MatMul has no other
// reader, runs on the Add's backend and that backend supports the fused form: the residual
// connection is added by the product's epilogue. The MatMul stays as an orphan. Returns the count.
int fuse_matmul_add(ComputeGraph& g, const std::vector<Backend*>& backends);

// live[i]: node i must run: it is an output, writes a KV region, or feeds a live node.
std::vector<bool> live_nodes(const ComputeGraph& g);

}  // namespace minfer
