// Internal: AVX2/FMA versions of the CPU kernels (defined in *_avx2.cpp, which are compiled with
// -mavx2 -mfma -mf16c). Call them only when cpu_has_avx2() is true; the public entry points in
// ops.h / matmul.h do that dispatch.
#pragma once
#include <cstdint>

#include "backend/cpu/quants.h"

namespace minfer::cpu {

// One CPU feature probe for every kernel family: the quant table's (backend/cpu/quants.h).
inline bool cpu_has_avx2() {
    return quants_use_avx2();
}

namespace avx2 {

void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps);
void silu(const float* x, float* y, int64_t n);
void swiglu(const float* g, const float* u, float* y, int64_t n);
void add(const float* a, const float* b, float* y, int64_t n);
void mul(const float* a, const float* b, float* y, int64_t n);
void attention(const float* q, const float* k, const float* v, float* out, int64_t n_head, int64_t n_head_kv,
               int64_t hd, int64_t kv_stride, int64_t n_kv_rows, float scale, float* scratch);

// Y tile for `nr` weight rows (f32, row stride n_in) against `nt` activation rows (row stride n_in):
// y[t * y_stride + r] = w_r . x_t, accumulated in f32 with FMA.
void matmul_tile(const float* w, int64_t nr, const float* x, int64_t nt, int64_t n_in, float* y,
                 int64_t y_stride);

}  // namespace avx2
}  // namespace minfer::cpu
