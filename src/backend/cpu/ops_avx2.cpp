// AVX2/FMA versions of the element-wise ops and attention (see kernels_avx2.h). Scalar twins: ops_ref.cpp.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/kernels_avx2.h"
#include "util/simd_avx2.h"

namespace minfer::cpu::avx2 {

namespace {

using simd::hsum;

// e^x to within about 3 ulp for x in [-87, 88] (inputs are clamped there, so the 2^n scale below stays a
// normal float); the reduction and polynomial of simd_avx2.h.
inline __m256 exp8(__m256 x) {
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.0f)), _mm256_set1_ps(-87.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(simd::kLog2e)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(simd::kLn2Hi), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(simd::kLn2Lo), r);
    __m256 p = _mm256_set1_ps(simd::kExpPoly[0]);
    for (int i = 1; i < 8; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(simd::kExpPoly[i]));
    const __m256i bits =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

// x * sigmoid(x) = x / (1 + e^-x); for very negative x the clamped e^-x just makes the result ~0.
inline __m256 silu8(__m256 x) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

// y[i] = f(a[i], b[i]) eight at a time; the tail goes through a zero-padded vector so every element
// gets exactly the same arithmetic.
template <class F>
inline void map2(const float* a, const float* b, float* y, int64_t n, F f) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, f(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    if (i == n) return;
    const size_t r = size_t(n - i);
    alignas(32) float ta[8] = {}, tb[8] = {}, ty[8];
    std::memcpy(ta, a + i, r * sizeof(float));
    std::memcpy(tb, b + i, r * sizeof(float));
    _mm256_store_ps(ty, f(_mm256_load_ps(ta), _mm256_load_ps(tb)));
    std::memcpy(y + i, ty, r * sizeof(float));
}

inline float dot(const float* a, const float* b, int64_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(),
           s3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float s = hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; ++i) s = std::fma(a[i], b[i], s);
    return s;
}

// The dots of q with the eight rows k + r * stride, r < 8, for hd % 8 == 0: one accumulator per row (a
// chain of hd / 8 FMAs), then a transposing horizontal sum puts the eight dots in one vector.
inline __m256 dot_8_rows(const float* q, const float* k, int64_t stride, int64_t hd) {
    __m256 a[8];
    for (auto& x : a) x = _mm256_setzero_ps();
    for (int64_t d = 0; d < hd; d += 8) {
        const __m256 qv = _mm256_loadu_ps(q + d);
        for (int r = 0; r < 8; ++r) a[r] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + r * stride + d), a[r]);
    }
    const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// Physical row of logical row j (KvRows::physical, kept local: see kernels_avx2.h on shared inlines).
inline int64_t physical(const KvRows& kv, int64_t j) {
    const int64_t mask = (int64_t(1) << kv.block_shift) - 1;
    return int64_t(kv.blocks[j >> kv.block_shift]) << kv.block_shift | (j & mask);
}

// s[j] = scale * (q . k row j) for first <= j < n (k: the region's K at the head's column offset);
// returns the largest. Eight rows at a time from a multiple of 8 when hd % 8 == 0 (contiguous: blocks
// hold a multiple of 16 rows), rows below `first` of the first group set to -inf; the rest one by one.
inline float scores(const float* q, const KvRows& kv, const float* k, int64_t first, int64_t n, int64_t hd,
                    float scale, float* s) {
    int64_t j = first;
    __m256 mx8 = _mm256_set1_ps(-INFINITY);
    if (hd % 8 == 0) {
        for (j = first & ~int64_t{7}; j + 8 <= n; j += 8) {
            __m256 sj = _mm256_mul_ps(_mm256_set1_ps(scale),
                                      dot_8_rows(q, k + physical(kv, j) * kv.stride, kv.stride, hd));
            _mm256_storeu_ps(s + j, sj);
            if (j < first) {
                std::fill(s + j, s + first, -INFINITY);
                sj = _mm256_loadu_ps(s + j);
            }
            mx8 = _mm256_max_ps(mx8, sj);
        }
        j = std::max(j, first);
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, mx8);
    float mx = *std::max_element(lanes, lanes + 8);
    for (; j < n; ++j) {
        s[j] = scale * dot(q, k + physical(kv, j) * kv.stride, hd);
        mx = std::max(mx, s[j]);
    }
    return mx;
}

// p[j] = e^(p[j] - mx) in place; returns their sum, accumulated in double.
inline double exp_sum(float* p, int64_t n, float mx) {
    const __m256 m = _mm256_set1_ps(mx);
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(p + j), m));
        _mm256_storeu_ps(p + j, e);
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    double sum = hsum(_mm256_add_pd(s0, s1));
    if (j == n) return sum;
    alignas(32) float t[8];
    std::fill(t, t + 8, mx);
    std::memcpy(t, p + j, size_t(n - j) * sizeof(float));
    _mm256_store_ps(t, exp8(_mm256_sub_ps(_mm256_load_ps(t), m)));
    for (int64_t r = 0; r < n - j; ++r) sum += double(p[j + r] = t[r]);
    return sum;
}

// Rows accumulate in f32 registers for at most this many rows, then fold into f64: the f32 rounding
// error stays bounded by ~kFoldRows ulp of the output however long the context is.
constexpr int64_t kFoldRows = 64;

// out[0 .. 8C) = inv_sum * sum_{first <= j < n} p[j] * v[j * stride + 0 .. 8C).
template <int C>
inline void weighted_cols(const float* p, const KvRows& kv, const float* v, int64_t first, int64_t n,
                          double inv_sum, float* out) {
    __m256d acc[2 * C];
    for (auto& a : acc) a = _mm256_setzero_pd();
    for (int64_t j0 = first; j0 < n; j0 += kFoldRows) {
        __m256 f[C];
        for (auto& a : f) a = _mm256_setzero_ps();
        const int64_t j1 = std::min(n, j0 + kFoldRows);
        for (int64_t j = j0; j < j1; ++j) {
            const __m256 pj = _mm256_broadcast_ss(p + j);
            const float* vj = v + physical(kv, j) * kv.stride;
            for (int c = 0; c < C; ++c) f[c] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj + 8 * c), f[c]);
        }
        for (int c = 0; c < C; ++c) {
            acc[2 * c] = _mm256_add_pd(acc[2 * c], _mm256_cvtps_pd(_mm256_castps256_ps128(f[c])));
            acc[2 * c + 1] = _mm256_add_pd(acc[2 * c + 1], _mm256_cvtps_pd(_mm256_extractf128_ps(f[c], 1)));
        }
    }
    const __m256d s = _mm256_set1_pd(inv_sum);
    for (int c = 0; c < C; ++c) {
        const __m128 lo = _mm256_cvtpd_ps(_mm256_mul_pd(acc[2 * c], s));
        const __m128 hi = _mm256_cvtpd_ps(_mm256_mul_pd(acc[2 * c + 1], s));
        _mm256_storeu_ps(out + 8 * c, _mm256_set_m128(hi, lo));
    }
}

void weighted_sum(const float* p, const KvRows& kv, const float* v, int64_t first, int64_t n, int64_t hd,
                  double inv_sum, float* out) {
    int64_t d = 0;
    for (; d + 32 <= hd; d += 32) weighted_cols<4>(p, kv, v + d, first, n, inv_sum, out + d);
    for (; d + 8 <= hd; d += 8) weighted_cols<1>(p, kv, v + d, first, n, inv_sum, out + d);
    for (; d < hd; ++d) {
        double s = 0.0;
        for (int64_t j = first; j < n; ++j) s += double(p[j]) * double(v[physical(kv, j) * kv.stride + d]);
        out[d] = float(s * inv_sum);
    }
}

}  // namespace

void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(),
           s3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
        const __m256 c = _mm256_loadu_ps(x + i + 16), d = _mm256_loadu_ps(x + i + 24);
        s0 = _mm256_fmadd_ps(a, a, s0);
        s1 = _mm256_fmadd_ps(b, b, s1);
        s2 = _mm256_fmadd_ps(c, c, s2);
        s3 = _mm256_fmadd_ps(d, d, s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(x + i), s0);
    float ss = hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; ++i) ss = std::fma(x[i], x[i], ss);
    const __m256 scale = _mm256_set1_ps(1.0f / std::sqrt(ss / float(n) + eps));
    map2(x, w, y, n, [&](__m256 a, __m256 b) { return _mm256_mul_ps(_mm256_mul_ps(a, scale), b); });
}

void silu(const float* x, float* y, int64_t n) {
    map2(x, x, y, n, [](__m256 a, __m256) { return silu8(a); });
}

void swiglu(const float* g, const float* u, float* y, int64_t n) {
    map2(g, u, y, n, [](__m256 a, __m256 b) { return _mm256_mul_ps(silu8(a), b); });
}

// gelu(x) * u with gelu(x) = x / 2 * (1 + tanh(z)) = x * e^(2z) / (e^(2z) + 1), z = sqrt(2 / pi) (x +
// 0.044715 x^3): no cancellation for negative x; for large |z| the clamped exponential gives x or ~0.
void geglu(const float* g, const float* u, float* y, int64_t n) {
    map2(g, u, y, n, [](__m256 x, __m256 b) {
        const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
        const __m256 z = _mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f),
                                       _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), x3, x));
        const __m256 e = exp8(_mm256_add_ps(z, z));
        const __m256 f = _mm256_div_ps(e, _mm256_add_ps(e, _mm256_set1_ps(1.0f)));
        return _mm256_mul_ps(_mm256_mul_ps(x, f), b);
    });
}

void add(const float* a, const float* b, float* y, int64_t n) {
    map2(a, b, y, n, [](__m256 x, __m256 z) { return _mm256_add_ps(x, z); });
}

void mul(const float* a, const float* b, float* y, int64_t n) {
    map2(a, b, y, n, [](__m256 x, __m256 z) { return _mm256_mul_ps(x, z); });
}

void attention(const float* q, const KvRows& kv, float* out, int64_t n_head, int64_t n_head_kv, int64_t hd,
               int64_t first, int64_t n_kv_rows, float scale, float* scratch, const float* sinks) {
    const int64_t group = n_head / n_head_kv, n = n_kv_rows;
    for (int64_t h = 0; h < n_head; ++h) {
        const float* qh = q + h * hd;
        const int64_t off = (h / group) * hd;
        float mx = scores(qh, kv, kv.k + off, first, n, hd, scale, scratch);
        if (sinks) mx = std::max(mx, sinks[h]);
        const double sum = (n > first ? exp_sum(scratch + first, n - first, mx) : 0.0) +
                           (sinks ? std::exp(double(sinks[h]) - mx) : 0.0);
        weighted_sum(scratch, kv, kv.v + off, first, n, hd, sum > 0.0 ? 1.0 / sum : 0.0, out + h * hd);
    }
}

}  // namespace minfer::cpu::avx2
