// Decode segments as CUDA graphs: a reusable segment (same graph, same nodes, same buffers) runs eagerly
// once, is captured on its second run and replayed after, one launch instead of one per kernel.
#include "backend/cuda_backend_impl.h"

namespace minfer {

uint64_t CudaBackend::graph_launches() const {
    return impl_->launches;
}

uint64_t CudaBackend::graph_captures() const {
    return impl_->captures;
}

// Records the segment's kernels into a CUDA graph and launches it.
void CudaBackend::Impl::run_captured(const ComputeGraph& g, std::span<const NodeId> nodes,
                                     const NodeBuffers& bufs, Captured& c) {
    MINFER_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    cudaGraph_t graph = nullptr;
    try {
        for (NodeId id : nodes) run(g, g[id], bufs);
    } catch (...) {
        cudaStreamEndCapture(stream, &graph);
        if (graph) cudaGraphDestroy(graph);
        throw;
    }
    MINFER_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    const cudaError_t st = cudaGraphInstantiate(&c.exec, graph, 0);
    cudaGraphDestroy(graph);
    MINFER_CUDA_CHECK(st);
    ++captures;
}

// A reusable decode segment runs eagerly once, is captured on its second run and replayed after.
void CudaBackend::compute_segment(const ComputeGraph& g, std::span<const NodeId> nodes,
                                  const NodeBuffers& bufs, bool reusable) {
    Impl& im = *impl_;
    im.mma_x_holds = im.gemm_x_holds = {};
    if (im.profile) {
        for (NodeId id : nodes) im.run_profiled(g, g[id], bufs);
        return;
    }
    if (!reusable || !im.replay || !im.capturable || nodes.empty()) {
        for (NodeId id : nodes) im.run(g, g[id], bufs);
        return;
    }
    Impl::Captured& c = im.graphs[{g.uid, nodes.front()}];
    if (!c.exec && ++c.runs < 2) {
        for (NodeId id : nodes) im.run(g, g[id], bufs);
        return;
    }
    if (!c.exec) im.run_captured(g, nodes, bufs, c);
    MINFER_CUDA_CHECK(cudaGraphLaunch(c.exec, im.stream));
    ++im.launches;
}

}  // namespace minfer
