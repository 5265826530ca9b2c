// Shared by the CUDA micro-benchmarks: exit on a CUDA error, and a matrix of valid quantized blocks.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "quant/quants.h"

namespace minfer::cuda_bench {

inline void check(cudaError_t e) {
    if (e != cudaSuccess) {
        std::fprintf(stderr, "CUDA error: %s\n", cudaGetErrorString(e));
        std::exit(1);
    }
}

// Microseconds per call of call(i) on stream s: `copies` warm-up calls (each on its own copy of the
// data), then `iters` timed between two events.
template <class Call>
double us_per_call(const Call& call, int copies, int iters, cudaStream_t s) {
    for (int i = 0; i < copies; ++i) call(i);
    cudaEvent_t e0, e1;
    check(cudaEventCreate(&e0));
    check(cudaEventCreate(&e1));
    check(cudaEventRecord(e0, s));
    for (int i = 0; i < iters; ++i) call(i);
    check(cudaEventRecord(e1, s));
    check(cudaEventSynchronize(e1));
    check(cudaGetLastError());
    float ms = 0;
    check(cudaEventElapsedTime(&ms, e0, e1));
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    return ms * 1e3 / iters;
}

// n_out rows of valid blocks: 64 rows quantized from random floats, repeated.
inline std::vector<uint8_t> host_matrix(GgmlType t, int64_t n_in, int64_t n_out, std::mt19937& rng) {
    const QuantTraits& q = *quant_traits(t);
    const size_t row = quant_row_bytes(q, n_in);
    std::normal_distribution<float> dist(0.0f, 0.02f);
    std::vector<float> src(size_t(64 * n_in));
    for (float& v : src) v = dist(rng);
    std::vector<uint8_t> tile(row * 64), out(row * size_t(n_out));
    q.from_float_ref(src.data(), tile.data(), 64 * n_in);
    for (int64_t r = 0; r < n_out; ++r)
        std::copy_n(tile.data() + row * size_t(r % 64), row, out.data() + row * r);
    return out;
}

}  // namespace minfer::cuda_bench
