// AVX-512 micro-kernels for the prefill matmul (see kernels_avx2.h). The 16 rows of a weight panel fill
// one 512-bit vector, so each k step is one weight load and one broadcast FMA per token. Per (row,
// token) they run the FMA sequence of the AVX2 kernels, so the results are bit-identical. Scalar twin:
// matmul_ref.
//
// This file is compiled with the AVX-512 flags: it holds only these kernels, which use intrinsics and no
// inline function of a shared header (the linker could hand AVX-512 copies of those to code running
// anywhere).
#include <immintrin.h>

#include <utility>

#include "backend/cpu/kernels_avx2.h"

namespace minfer::cpu::avx512 {

using avx2::kPanelRows;
using avx2::kPanelTokens;
using avx2::PanelMicroFn;

namespace {

// Outer products over k in [k0, k1): the panel's 16 rows (one vector per k) times T tokens' x[t][k]
// (broadcast from the packed groups: tokens 6.. from the next group), accumulated in T registers, then
// stored to (or, for a later k block, added to) the 16 outputs y[t * y_stride + r] of each token. T = 12
// keeps 12 FMA chains in flight, enough to cover the FMA latency of both pipes.
template <int T>
void micro(const float* panel, const float* xg, int64_t group_stride, int64_t k0, int64_t k1, float* y,
           int64_t y_stride, bool add) {
    __m512 acc[T];
    for (auto& a : acc) a = _mm512_setzero_ps();
    for (int64_t k = k0; k < k1; ++k) {
        const __m512 w = _mm512_loadu_ps(panel + k * kPanelRows);
        for (int t = 0; t < T; ++t) {
            const float* x = xg + (t / kPanelTokens) * group_stride + k * kPanelTokens + t % kPanelTokens;
            acc[t] = _mm512_fmadd_ps(w, _mm512_set1_ps(*x), acc[t]);
        }
    }
    // Unrolled at compile time: an accumulator indexed at run time would live on the stack.
    const auto store = [&](int t) {
        float* yt = y + t * y_stride;
        _mm512_storeu_ps(yt, add ? _mm512_add_ps(_mm512_loadu_ps(yt), acc[t]) : acc[t]);
    };
    [&]<int... I>(std::integer_sequence<int, I...>) {
        (store(I), ...);
    }
    (std::make_integer_sequence<int, T>{});
}

constexpr PanelMicroFn kMicro[kPanelTokens + 1] = {micro<1>, micro<2>, micro<3>, micro<4>,
                                                   micro<5>, micro<6>, micro<12>};

}  // namespace

const PanelMicroFn* panel_micros() {
    return kMicro;
}

}  // namespace minfer::cpu::avx512
