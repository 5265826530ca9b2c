// AVX2/FMA f32 micro-kernels for the prefill matmul and the panel driver that runs them or the AVX-512
// ones (see kernels_avx2.h). Scalar twin: matmul_ref.
#include <immintrin.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "backend/cpu/kernels_avx2.h"

namespace minfer::cpu::avx2 {

namespace {

// k per pass, summed into y: short sequential f32 sums keep the error near the decode dot's.
constexpr int64_t kBlockK = 64;

// Outer products over k in [k0, k1): the panel's 16 rows (two vectors per k) times T tokens' x[t][k]
// (broadcast from the packed group), accumulated in registers (6 x 2 accumulators + 2 weight vectors +
// 1 broadcast = 15), then stored to (or, for a later k block, added to) the 16 outputs
// y[t * y_stride + r] of each token.
template <int T>
void micro(const float* panel, const float* xg, int64_t, int64_t k0, int64_t k1, float* y, int64_t y_stride,
           bool add) {
    __m256 acc[T][2];
    for (auto& a : acc) a[0] = a[1] = _mm256_setzero_ps();
    for (int64_t k = k0; k < k1; ++k) {
        const __m256 w0 = _mm256_loadu_ps(panel + k * kPanelRows);
        const __m256 w1 = _mm256_loadu_ps(panel + k * kPanelRows + 8);
        for (int t = 0; t < T; ++t) {
            const __m256 xv = _mm256_broadcast_ss(xg + k * kPanelTokens + t);
            acc[t][0] = _mm256_fmadd_ps(w0, xv, acc[t][0]);
            acc[t][1] = _mm256_fmadd_ps(w1, xv, acc[t][1]);
        }
    }
    // Unrolled at compile time: an accumulator indexed at run time would live on the stack.
    const auto store = [&](int t) {
        float* yt = y + t * y_stride;
        _mm256_storeu_ps(yt, add ? _mm256_add_ps(_mm256_loadu_ps(yt), acc[t][0]) : acc[t][0]);
        _mm256_storeu_ps(yt + 8, add ? _mm256_add_ps(_mm256_loadu_ps(yt + 8), acc[t][1]) : acc[t][1]);
    };
    [&]<int... I>(std::integer_sequence<int, I...>) {
        (store(I), ...);
    }
    (std::make_integer_sequence<int, T>{});
}

// c[j][i] = row i's element j, for the eight rows at p + i * stride; rows from n on read as zeros.
inline void transpose_8x8(const float* p, int64_t stride, int64_t n, __m256 (&c)[8]) {
    __m256 r[8];
    for (int i = 0; i < 8; ++i) r[i] = i < n ? _mm256_loadu_ps(p + i * stride) : _mm256_setzero_ps();
    __m256 s[8];
    for (int h = 0; h < 8; h += 4) {
        const __m256 t0 = _mm256_unpacklo_ps(r[h], r[h + 1]), t1 = _mm256_unpackhi_ps(r[h], r[h + 1]);
        const __m256 t2 = _mm256_unpacklo_ps(r[h + 2], r[h + 3]), t3 = _mm256_unpackhi_ps(r[h + 2], r[h + 3]);
        s[h] = _mm256_shuffle_ps(t0, t2, 0x44), s[h + 1] = _mm256_shuffle_ps(t0, t2, 0xEE);
        s[h + 2] = _mm256_shuffle_ps(t1, t3, 0x44), s[h + 3] = _mm256_shuffle_ps(t1, t3, 0xEE);
    }
    for (int j = 0; j < 4; ++j) {
        c[j] = _mm256_permute2f128_ps(s[j], s[j + 4], 0x20);
        c[j + 4] = _mm256_permute2f128_ps(s[j], s[j + 4], 0x31);
    }
}

// Every token count up to kPanelTokens, so token tails run register-blocked too: kMicro[tokens - 1]. No
// two-group kernel: 12 tokens would need 24 accumulators of the 16 registers.
constexpr PanelMicroFn kMicro[kPanelTokens + 1] = {micro<1>, micro<2>, micro<3>, micro<4>,
                                                   micro<5>, micro<6>, nullptr};

}  // namespace

const PanelMicroFn* panel_micros() {
    return kMicro;
}

void pack_tokens(const float* x, int64_t nt, int64_t n_in, float* xp) {
    for (int64_t g = 0; g < nt; g += kPanelTokens, xp += kPanelTokens * n_in) {
        const int64_t nr = std::min(kPanelTokens, nt - g);
        __m256 c[8];
        int64_t k = 0;
        for (; k + 8 <= n_in; k += 8) {  // column j holds tokens 0..5 of k + j (and two zeros)
            transpose_8x8(x + g * n_in + k, n_in, nr, c);
            for (int j = 0; j < 7; ++j) _mm256_storeu_ps(xp + (k + j) * kPanelTokens, c[j]);
            float* last = xp + (k + 7) * kPanelTokens;  // its two zeros would spill past this k block
            _mm_storeu_ps(last, _mm256_castps256_ps128(c[7]));
            _mm_storel_pi(reinterpret_cast<__m64*>(last + 4), _mm256_extractf128_ps(c[7], 1));
        }
        for (; k < n_in; ++k)
            for (int64_t t = 0; t < kPanelTokens; ++t)
                xp[k * kPanelTokens + t] = t < nr ? x[(g + t) * n_in + k] : 0.0f;
    }
}

void pack_panel(const float* w, int64_t nr, int64_t n_in, float* panel) {
    int64_t k = 0;
    for (; k + 8 <= n_in; k += 8)
        for (int64_t h = 0; h < kPanelRows; h += 8) {
            __m256 c[8];
            transpose_8x8(w + h * n_in + k, n_in, std::max<int64_t>(0, std::min<int64_t>(8, nr - h)), c);
            for (int j = 0; j < 8; ++j) _mm256_storeu_ps(panel + (k + j) * kPanelRows + h, c[j]);
        }
    for (; k < n_in; ++k)
        for (int64_t r = 0; r < kPanelRows; ++r) panel[k * kPanelRows + r] = r < nr ? w[r * n_in + k] : 0.0f;
}

void matmul_panel(const float* panel, int64_t nr, const float* xp, int64_t nt, int64_t n_in, float* y,
                  int64_t y_stride, const PanelMicroFn* micros) {
    // A partial panel computes all 16 rows into scratch ([nt, 16]) and copies its nr rows out.
    thread_local std::vector<float> part;
    float* out = y;
    int64_t out_stride = y_stride;
    if (nr < kPanelRows) {
        part.resize(size_t(nt * kPanelRows));
        out = part.data(), out_stride = kPanelRows;
    }
    // Token groups outer (one or, with a two-group kernel, two at a time): a group's outputs stay in L1
    // while its k blocks add into them; the panel and the group's packed activations stream in order.
    for (int64_t t = 0; t < nt;) {
        const bool pair = micros[kPanelTokens] && nt - t >= 2 * kPanelTokens;
        const int64_t tn = pair ? 2 * kPanelTokens : std::min<int64_t>(kPanelTokens, nt - t);
        const PanelMicroFn micro = pair ? micros[kPanelTokens] : micros[tn - 1];
        for (int64_t k0 = 0; k0 < n_in; k0 += kBlockK)
            micro(panel, xp + t * n_in, kPanelTokens * n_in, k0, std::min(n_in, k0 + kBlockK),
                  out + t * out_stride, out_stride, k0 > 0);
        t += tn;
    }
    if (out == y) return;
    for (int64_t t = 0; t < nt; ++t) std::copy_n(out + t * kPanelRows, nr, y + t * y_stride);
}

}  // namespace minfer::cpu::avx2
