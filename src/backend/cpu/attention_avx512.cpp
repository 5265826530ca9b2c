// AVX-512 attention for one query token and the heads that share one KV head (GQA group): the scores,
// softmax weights and weighted V sums of all the group's heads in one pass over the K and V rows, 16
// lanes wide. The arithmetic follows the AVX2 kernel's (ops_avx2.cpp): f32 dots, the same e^x
// polynomial, the softmax normaliser summed in double, V rows accumulated in f32 for at most 64 rows
// before folding into double. Scalar twin: attention_ref.
//
// Compiled with the AVX-512 flags: only intrinsics and internal-linkage code here (see matmul_avx512.cpp).
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/kernels_avx2.h"
#include "util/simd_avx2.h"

namespace minfer::cpu::avx512 {

namespace {

constexpr int64_t kFoldRows = 64;  // f32 V accumulation span before folding into double (as AVX2)

// exp8 of ops_avx2.cpp, 16 lanes: e^x within about 3 ulp for x in [-87, 88] (simd_avx2.h's polynomial).
inline __m512 exp16(__m512 x) {
    x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.0f)), _mm512_set1_ps(-87.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(simd::kLog2e)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(simd::kLn2Hi), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(simd::kLn2Lo), r);
    __m512 p = _mm512_set1_ps(simd::kExpPoly[0]);
    for (int i = 1; i < 8; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(simd::kExpPoly[i]));
    const __m512i bits =
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
}

// Lane r of the result: the sum of v[r]'s 16 lanes (a transposing reduction tree).
inline __m512 sum16(const __m512 (&v)[16]) {
    __m512 t1[8], t2[4];
    for (int i = 0; i < 8; ++i)  // per 128-bit lane: v[2i] at positions 0, 2; v[2i + 1] at 1, 3
        t1[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                              _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    for (int i = 0; i < 4; ++i) {  // position m of each 128-bit lane: v[4i + m]'s sum over that lane
        const __m512d c = _mm512_castps_pd(t1[2 * i]), d = _mm512_castps_pd(t1[2 * i + 1]);
        t2[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(c, d)),
                              _mm512_castpd_ps(_mm512_unpackhi_pd(c, d)));
    }
    const __m512 f =
        _mm512_add_ps(_mm512_shuffle_f32x4(t2[0], t2[1], 0x88), _mm512_shuffle_f32x4(t2[0], t2[1], 0xDD));
    const __m512 g =
        _mm512_add_ps(_mm512_shuffle_f32x4(t2[2], t2[3], 0x88), _mm512_shuffle_f32x4(t2[2], t2[3], 0xDD));
    return _mm512_add_ps(_mm512_shuffle_f32x4(f, g, 0x88), _mm512_shuffle_f32x4(f, g, 0xDD));
}

// Physical row of logical row j (KvRows::physical, kept local: see kernels_avx2.h on shared inlines).
inline int64_t physical(const KvRows& kv, int64_t j) {
    const int64_t mask = (int64_t(1) << kv.block_shift) - 1;
    return int64_t(kv.blocks[j >> kv.block_shift]) << kv.block_shift | (j & mask);
}

inline __mmask16 first(int64_t n) {  // lanes 0 .. n - 1 (n <= 16)
    return __mmask16((1u << n) - 1);
}

// s[h * n + j] = scale * (q_h . k_j) for the g heads (q_h = q + h * hd) and rows lo <= j < n of k (the
// region's K at the head's column offset); mx[h] = max_j of head h's scores. 16 rows at a time from a
// multiple of 16 (contiguous: blocks hold a multiple of 16 rows), lanes below lo masked off: each head's
// 16 dots, then one reduction tree.
void scores(const float* q, int64_t g, const KvRows& kv, const float* k, int64_t lo, int64_t n, int64_t hd,
            float scale, float* s, float* mx) {
    const int64_t stride = kv.stride;
    __m512 best[8];
    for (int64_t h = 0; h < g; ++h) best[h] = _mm512_set1_ps(-INFINITY);
    for (int64_t j0 = lo & ~int64_t{15}; j0 < n; j0 += 16) {
        const int64_t nr = std::min<int64_t>(16, n - j0);
        const __mmask16 m = __mmask16(first(nr) & ~(j0 < lo ? first(lo - j0) : __mmask16(0)));
        const float* k0 = k + physical(kv, j0) * stride;
        for (int64_t h = 0; h < g; ++h) {
            const float* qh = q + h * hd;
            __m512 acc[16];
            for (int r = 0; r < 16; ++r) {
                acc[r] = _mm512_setzero_ps();
                if (r >= nr) continue;
                const float* kr = k0 + r * stride;
                for (int64_t d = 0; d < hd; d += 16)
                    acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(qh + d), _mm512_loadu_ps(kr + d), acc[r]);
            }
            const __m512 sj = _mm512_mul_ps(_mm512_set1_ps(scale), sum16(acc));
            _mm512_mask_storeu_ps(s + h * n + j0, m, sj);
            best[h] = _mm512_mask_max_ps(best[h], m, best[h], sj);
        }
    }
    for (int64_t h = 0; h < g; ++h) mx[h] = _mm512_reduce_max_ps(best[h]);
}

// p[j] = e^(p[j] - mx) in place for j < n; returns their sum, accumulated in double.
double exp_sum(float* p, int64_t n, float mx) {
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 m = first(std::min<int64_t>(16, n - j));
        const __m512 e =
            _mm512_maskz_mov_ps(m, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, p + j), _mm512_set1_ps(mx))));
        _mm512_mask_storeu_ps(p + j, m, e);
        s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        s1 = _mm512_add_pd(s1,
                           _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
}

// Columns [c0, c0 + 16 C) of H heads' outputs: out_h = inv[h] * sum_j p_h[j] * v_j, V rows loaded once
// for all H heads; f32 sums of up to 64 rows folded into double.
template <int H, int C>
void weighted_cols(const float* p, int64_t lo, int64_t n, const KvRows& kv, const float* v, int64_t c0,
                   const double* inv, float* out, int64_t hd) {
    __m512d total[H][C][2];
    for (auto& a : total)
        for (auto& b : a) b[0] = b[1] = _mm512_setzero_pd();
    for (int64_t j0 = lo; j0 < n; j0 += kFoldRows) {
        __m512 acc[H][C];
        for (auto& a : acc)
            for (auto& b : a) b = _mm512_setzero_ps();
        const int64_t j1 = std::min(n, j0 + kFoldRows);
        for (int64_t j = j0; j < j1; ++j) {
            __m512 vj[C];
            const float* vr = v + physical(kv, j) * kv.stride + c0;
            for (int c = 0; c < C; ++c) vj[c] = _mm512_loadu_ps(vr + 16 * c);
            for (int h = 0; h < H; ++h) {
                const __m512 ph = _mm512_set1_ps(p[h * n + j]);
                for (int c = 0; c < C; ++c) acc[h][c] = _mm512_fmadd_ps(ph, vj[c], acc[h][c]);
            }
        }
        for (int h = 0; h < H; ++h)
            for (int c = 0; c < C; ++c) {
                total[h][c][0] =
                    _mm512_add_pd(total[h][c][0], _mm512_cvtps_pd(_mm512_castps512_ps256(acc[h][c])));
                total[h][c][1] =
                    _mm512_add_pd(total[h][c][1], _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(
                                                      _mm512_castps_pd(acc[h][c]), 1))));
            }
    }
    for (int h = 0; h < H; ++h)
        for (int c = 0; c < C; ++c) {
            const __m512d s = _mm512_set1_pd(inv[h]);
            float* o = out + h * hd + c0 + 16 * c;
            _mm256_storeu_ps(o, _mm512_maskz_cvtpd_ps(0xFF, _mm512_mul_pd(total[h][c][0], s)));
            _mm256_storeu_ps(o + 8, _mm512_maskz_cvtpd_ps(0xFF, _mm512_mul_pd(total[h][c][1], s)));
        }
}

// Head h < H's outputs over rows lo..n-1: 64 columns per pass (H * 4 <= 16 accumulators), then 16 at a time.
template <int H>
void weighted_heads(const float* p, int64_t lo, int64_t n, const KvRows& kv, const float* v,
                    const double* inv, float* out, int64_t hd) {
    int64_t c0 = 0;
    for (; c0 + 64 <= hd; c0 += 64) weighted_cols<H, 4>(p, lo, n, kv, v, c0, inv, out, hd);
    for (; c0 < hd; c0 += 16) weighted_cols<H, 1>(p, lo, n, kv, v, c0, inv, out, hd);
}

}  // namespace

bool attention_fits(int64_t group, int64_t hd) {
    return hd % 16 == 0 && group >= 1 && group <= 8;
}

void attention(const float* q, const KvRows& rows, float* out, int64_t n_head, int64_t n_head_kv, int64_t hd,
               int64_t lo, int64_t n_kv_rows, float scale, float* scratch, const float* sinks) {
    const int64_t group = n_head / n_head_kv, n = n_kv_rows;
    for (int64_t kvh = 0; kvh < n_head_kv; ++kvh) {
        const float* qg = q + kvh * group * hd;
        float* og = out + kvh * group * hd;
        float mx[8];
        double inv[8];
        scores(qg, group, rows, rows.k + kvh * hd, lo, n, hd, scale, scratch, mx);
        for (int64_t h = 0; h < group; ++h) {
            const float* sink = sinks ? sinks + kvh * group + h : nullptr;
            if (sink) mx[h] = std::max(mx[h], *sink);
            const double sum = (n > lo ? exp_sum(scratch + h * n + lo, n - lo, mx[h]) : 0.0) +
                               (sink ? std::exp(double(*sink) - mx[h]) : 0.0);
            inv[h] = sum > 0.0 ? 1.0 / sum : 0.0;
        }
        for (int64_t h = 0; h < group; h += 4) {  // passes of up to 4 heads
            const float* p = scratch + h * n;
            const float* vk = rows.v + kvh * hd;
            switch (std::min<int64_t>(4, group - h)) {
                case 4:
                    weighted_heads<4>(p, lo, n, rows, vk, inv + h, og + h * hd, hd);
                    break;
                case 3:
                    weighted_heads<3>(p, lo, n, rows, vk, inv + h, og + h * hd, hd);
                    break;
                case 2:
                    weighted_heads<2>(p, lo, n, rows, vk, inv + h, og + h * hd, hd);
                    break;
                default:
                    weighted_heads<1>(p, lo, n, rows, vk, inv + h, og + h * hd, hd);
                    break;
            }
        }
    }
}

}  // namespace minfer::cpu::avx512
