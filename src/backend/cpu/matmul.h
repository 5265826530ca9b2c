// Quantized-weight matrix multiply on the CPU: Y[t][o] = sum_i W[o][i] * X[t][i] (+ bias[o]).
// W is row-major [n_out][n_in] in the blocks of `q` (straight from the GGUF mapping, no copy);
// X is [nt][n_in] f32, Y is [nt][n_out] f32. Rows of W are split across the pool's threads.
// Activations stay f32 (weights dequantized in registers; prefill against a register-blocked f32 tile).
// With int8_decode, decode (nt == 1) of a type with an int8 dot (q.vec_dot_q8) quantizes x once to
// int8 blocks and runs the integer dot per row, as llama.cpp does: faster, but no longer within the
// golden tests' exactness (the embedded model's greedy reference diverges), so it is opt-in.
#pragma once
#include <cstdint>

#include "backend/cpu/quants.h"
#include "backend/cpu/threadpool.h"

namespace minfer::cpu {

void matmul(const QuantTraits& q, const void* w, int64_t n_in, int64_t n_out, const float* x, int64_t nt,
            float* y, const float* bias, ThreadPool& pool, bool int8_decode = false);

// Scalar reference twin (dequantize with to_float_ref, double accumulation), single-threaded.
void matmul_ref(const QuantTraits& q, const void* w, int64_t n_in, int64_t n_out, const float* x, int64_t nt,
                float* y, const float* bias);

}  // namespace minfer::cpu
