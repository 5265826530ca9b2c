// AVX2/FMA f32 micro-kernels for the prefill matmul (see kernels_avx2.h). Scalar twin: matmul_ref.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/kernels_avx2.h"
#include "backend/cpu/simd_avx2.h"

namespace minfer::cpu::avx2 {

namespace {

using simd::hsum;

constexpr int kTileRows = 3;    // weight rows per micro-tile
constexpr int kTileTokens = 4;  // activation rows per micro-tile: 3 x 4 accumulators + 3 + 1 = 16 registers

// y[t * y_stride + r] = w_r . x_t for an R x T tile, all accumulators in registers.
template <int R, int T>
void micro(const float* w, const float* x, int64_t n_in, float* y, int64_t y_stride) {
    __m256 acc[R][T];
    for (auto& row : acc)
        for (auto& a : row) a = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n_in; i += 8) {
        __m256 wv[R];
        for (int r = 0; r < R; ++r) wv[r] = _mm256_loadu_ps(w + r * n_in + i);
        for (int t = 0; t < T; ++t) {
            const __m256 xv = _mm256_loadu_ps(x + t * n_in + i);
            for (int r = 0; r < R; ++r) acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
    for (int r = 0; r < R; ++r) {
        for (int t = 0; t < T; ++t) {
            float s = hsum(acc[r][t]);
            for (int64_t j = i; j < n_in; ++j) s = std::fma(w[r * n_in + j], x[t * n_in + j], s);
            y[t * y_stride + r] = s;
        }
    }
}

using MicroFn = void (*)(const float*, const float*, int64_t, float*, int64_t);

// Every tile shape, so row and token tails run register-blocked too: kMicro[rows - 1][tokens - 1].
constexpr MicroFn kMicro[kTileRows][kTileTokens] = {
    {micro<1, 1>, micro<1, 2>, micro<1, 3>, micro<1, 4>},
    {micro<2, 1>, micro<2, 2>, micro<2, 3>, micro<2, 4>},
    {micro<3, 1>, micro<3, 2>, micro<3, 3>, micro<3, 4>},
};

}  // namespace

void matmul_tile(const float* w, int64_t nr, const float* x, int64_t nt, int64_t n_in, float* y,
                 int64_t y_stride) {
    // Token groups outer: the group's few activation rows stay cached while every weight row passes.
    for (int64_t t = 0; t < nt; t += kTileTokens) {
        const int64_t tn = std::min<int64_t>(kTileTokens, nt - t);
        for (int64_t r = 0; r < nr; r += kTileRows) {
            const int64_t rn = std::min<int64_t>(kTileRows, nr - r);
            kMicro[rn - 1][tn - 1](w + r * n_in, x + t * n_in, n_in, y + t * y_stride + r, y_stride);
        }
    }
}

}  // namespace minfer::cpu::avx2
