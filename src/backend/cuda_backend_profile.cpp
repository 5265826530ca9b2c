// MINFER_CUDA_PROFILE: every node timed alone with CUDA events, a per-op table at exit.
#include "backend/cuda_backend_impl.h"

namespace minfer {

double CudaBackend::Impl::node_weight_bytes(const CNode& n) const {
    double b = 0;
    // The matrices a node streams whole: not an embedding table's (a lookup reads a few rows), nor the
    // projections of QkvBiasRopeStore (their own nodes); vectors (biases, norms) are left out.
    if (std::holds_alternative<meta::Weight>(n.meta) || std::holds_alternative<op::QkvBiasRopeStore>(n.op))
        return b;
    for_each_weight(n.meta,
                    [&](const WeightRef& w) { b += w.present() && w.n_out > 1 ? double(bytes_of(w)) : 0.0; });
    return b;
}

void CudaBackend::Impl::run_profiled(const ComputeGraph& g, const CNode& n, const NodeBuffers& bufs) {
    if (!ev[0]) {
        MINFER_CUDA_CHECK(cudaEventCreate(&ev[0]));
        MINFER_CUDA_CHECK(cudaEventCreate(&ev[1]));
    }
    MINFER_CUDA_CHECK(cudaEventRecord(ev[0], stream));
    run(g, n, bufs);
    MINFER_CUDA_CHECK(cudaEventRecord(ev[1], stream));
    MINFER_CUDA_CHECK(cudaEventSynchronize(ev[1]));
    float ms = 0;
    MINFER_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
    const bool small = n.shape[1] <= cuda::kMaxMatvecTokens;
    OpTime& t = op_times[std::string(op_name(n.op)) + (small ? " (decode)" : " (prefill)")];
    t.ms += ms;
    t.weight_bytes += node_weight_bytes(n);
    ++t.calls;
}

void CudaBackend::Impl::print_profile() const {
    std::fprintf(stderr,
                 "| op | calls | total ms | mean us | weight GB/s |\n| --- | ---: | ---: | ---: | ---: |\n");
    for (const auto& [name, t] : op_times)
        std::fprintf(stderr, "| %s | %lld | %.3f | %.2f | %.0f |\n", name.c_str(), (long long)t.calls, t.ms,
                     1e3 * t.ms / double(t.calls), t.weight_bytes > 0 ? t.weight_bytes / (t.ms * 1e6) : 0.0);
}

}  // namespace minfer
