// Quantized-weight matrix multiply on the CPU: Y[t][o] = sum_i W[o][i] * X[t][i] (+ bias[o]).
// W is row-major [n_out][n_in] in the blocks of `q` (straight from the GGUF mapping, no copy);
// X is [nt][n_in] f32, Y is [nt][n_out] f32. Rows of W are split across the pool's threads.
#pragma once
#include <cstdint>

#include "backend/cpu/quants.h"
#include "backend/cpu/threadpool.h"

namespace minfer::cpu {

void matmul(const QuantTraits& q, const void* w, int64_t n_in, int64_t n_out, const float* x, int64_t nt,
            float* y, const float* bias, ThreadPool& pool);

// Scalar reference twin (dequantize with to_float_ref, double accumulation), single-threaded.
void matmul_ref(const QuantTraits& q, const void* w, int64_t n_in, int64_t n_out, const float* x, int64_t nt,
                float* y, const float* bias);

}  // namespace minfer::cpu
