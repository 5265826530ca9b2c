// AVX-512 VNNI micro-kernels of the int16 prefill GEMM (gemm_i16.h): the panel's 16 rows fill one vector
// of int32 lanes, so each element pair is one weight load and one vpdpwssd per token (a broadcast pair of
// its levels). Per level block, each token's integer sum is converted once and added into its f32
// accumulator as gemm_ref does: acc = fma(float(sum), scale * d, acc), then acc = fma(-min, s, acc).
//
// Compiled with the AVX-512 flags: only intrinsics and internal-linkage code here (see
// matmul_avx512.cpp).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "backend/cpu/gemm_i16.h"
#include "quant/quants_impl.h"
#include "util/simd_avx2.h"

namespace minfer::cpu::i16::avx512 {

namespace {

// Calls f(integral_constant<int, I>) for I = 0 .. N - 1, unrolled at compile time (an accumulator array
// indexed at run time would live on the stack).
template <int N, class F>
inline void unroll(F&& f) {
    [&]<int... I>(std::integer_sequence<int, I...>) {
        (f(std::integral_constant<int, I>{}), ...);
    }
    (std::make_integer_sequence<int, N>{});
}

template <int T, int LB, bool Min>
void micro(const Panel& w, const Group& x, int64_t n_in, float* y, int64_t y_stride, int64_t nr,
           const float* bias) {
    constexpr int kPairs = LB / 2;
    __m512 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t j = 0; j < n_in / LB; ++j) {
        const int32_t* wq = w.q + j * kPairs * kRows;
        const int32_t* xq = x.q + j * kPairs * kTokens;
        __m512i sum[T];
        const __m512i w0 = _mm512_loadu_si512(wq);
        for (int t = 0; t < T; ++t) sum[t] = _mm512_madd_epi16(w0, _mm512_set1_epi32(xq[t]));
#pragma GCC unroll 16  // straight-line chains: GCC 12 copies every accumulator per pass of a rolled loop
        for (int p = 1; p < kPairs; ++p) {
            const __m512i wp = _mm512_loadu_si512(wq + p * kRows);
            for (int t = 0; t < T; ++t)
                sum[t] = _mm512_dpwssd_epi32(sum[t], wp, _mm512_set1_epi32(xq[p * kTokens + t]));
        }
        const int64_t b = j * LB / 32;
        const __m512 scale = _mm512_loadu_ps(w.scale + j * kRows);
        for (int t = 0; t < T; ++t) {
            const __m512 step = _mm512_mul_ps(scale, _mm512_set1_ps(x.d[b * kTokens + t]));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[t]), step, acc[t]);
        }
        if constexpr (Min) {
            const __m512 min = _mm512_loadu_ps(w.min + j * kRows);
            for (int t = 0; t < T; ++t)
                acc[t] = _mm512_fnmadd_ps(min, _mm512_set1_ps(x.s[b * kTokens + t]), acc[t]);
        }
    }
    const auto mask = __mmask16((1u << nr) - 1);
    const __m512 bv = bias ? _mm512_maskz_loadu_ps(mask, bias) : _mm512_setzero_ps();
    unroll<T>([&](auto t) {
        _mm512_mask_storeu_ps(y + t * y_stride, mask, bias ? _mm512_add_ps(acc[t], bv) : acc[t]);
    });
}

template <int LB, bool Min>
constexpr MicroFn kMicros[kTokens] = {micro<1, LB, Min>,  micro<2, LB, Min>,  micro<3, LB, Min>,
                                      micro<4, LB, Min>,  micro<5, LB, Min>,  micro<6, LB, Min>,
                                      micro<7, LB, Min>,  micro<8, LB, Min>,  micro<9, LB, Min>,
                                      micro<10, LB, Min>, micro<11, LB, Min>, micro<12, LB, Min>};

// c[j][i] = r[i][j] for a 16 x 16 block of int32.
inline void transpose16(__m512i (&r)[16]) {
    __m512i t[16], u[16];
    for (int k = 0; k < 16; k += 2)
        t[k] = _mm512_unpacklo_epi32(r[k], r[k + 1]), t[k + 1] = _mm512_unpackhi_epi32(r[k], r[k + 1]);
    for (int k = 0; k < 16; k += 4) {  // u[k + m], lane L: rows k .. k + 3 of column 4 L + m
        u[k] = _mm512_unpacklo_epi64(t[k], t[k + 2]), u[k + 1] = _mm512_unpackhi_epi64(t[k], t[k + 2]);
        u[k + 2] = _mm512_unpacklo_epi64(t[k + 1], t[k + 3]),
              u[k + 3] = _mm512_unpackhi_epi64(t[k + 1], t[k + 3]);
    }
    for (int m = 0; m < 4; ++m) {
        const __m512i v1 = _mm512_shuffle_i32x4(u[m], u[4 + m], 0x88),
                      v2 = _mm512_shuffle_i32x4(u[m], u[4 + m], 0xDD);
        const __m512i w1 = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], 0x88),
                      w2 = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], 0xDD);
        r[m] = _mm512_shuffle_i32x4(v1, w1, 0x88), r[8 + m] = _mm512_shuffle_i32x4(v1, w1, 0xDD);
        r[4 + m] = _mm512_shuffle_i32x4(v2, w2, 0x88), r[12 + m] = _mm512_shuffle_i32x4(v2, w2, 0xDD);
    }
}

// The int8x2 levels 254 hi + lo of 16 floats with step d, as quantize_q8x2's reference computes them.
inline __m512i levels16(__m512 v, float d, float ih, float il) {
    constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    const __m512 hi = _mm512_roundscale_ps(_mm512_mul_ps(v, _mm512_set1_ps(ih)), kRound);
    const __m512 r = _mm512_fnmadd_ps(_mm512_set1_ps(d), _mm512_mul_ps(hi, _mm512_set1_ps(254.0f)), v);
    const __m512 lo = _mm512_roundscale_ps(_mm512_mul_ps(r, _mm512_set1_ps(il)), kRound);
    return _mm512_add_epi32(_mm512_mullo_epi32(_mm512_cvtps_epi32(hi), _mm512_set1_epi32(254)),
                            _mm512_cvtps_epi32(lo));
}

// Block j of x, 32 floats: its int8x2 levels (elements 0..15 in l0, 16..31 in l1), step and the sum of
// the values it represents.
inline void block_levels(const float* x, __m512i& l0, __m512i& l1, float& step, float& sum) {
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    step = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1))) / (127.0f * 254.0f);
    const float ih = step != 0.0f ? 1.0f / (254.0f * step) : 0.0f, il = step != 0.0f ? 1.0f / step : 0.0f;
    l0 = levels16(v0, step, ih, il), l1 = levels16(v1, step, ih, il);
    sum = step * float(_mm512_reduce_add_epi32(_mm512_add_epi32(l0, l1)));
}

// Row k's exact block sums in lane k, from r[k] (16 int32 lanes of row k's pair products over 32
// elements): halving sums, each level interleaving pairs of vectors and adding, so that after four levels
// lane k holds row k's total (kPer 1) or, in sums[0] and sums[1], the totals of its lanes 0..7 and 8..15
// (kPer 2: two 16-element level blocks). Integer adds: any order gives the same sums.
template <int kPer>
inline void block_sums(const __m512i (&r)[16], __m512i (&sums)[kPer]) {
    __m512i a[8], b[4], c[2];
    for (int i = 0; i < 8; ++i)  // rows 2i, 2i + 1 interleaved: each 128-bit lane's two pair sums a row
        a[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]),
                                _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]));
    for (int i = 0; i < 4; ++i)  // rows 4i .. 4i + 3: one sum a row in each 128-bit lane
        b[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(a[2 * i], a[2 * i + 1]),
                                _mm512_unpackhi_epi64(a[2 * i], a[2 * i + 1]));
    for (int i = 0; i < 2; ++i)  // 128-bit lanes 0 + 1 and 2 + 3 of rows 8i .. 8i + 3, then 8i + 4 ..
        c[i] = _mm512_add_epi32(_mm512_shuffle_i32x4(b[2 * i], b[2 * i + 1], 0x88),
                                _mm512_shuffle_i32x4(b[2 * i], b[2 * i + 1], 0xDD));
    const __m512i lo = _mm512_shuffle_i32x4(c[0], c[1], 0x88), hi = _mm512_shuffle_i32x4(c[0], c[1], 0xDD);
    if constexpr (kPer == 1)
        sums[0] = _mm512_add_epi32(lo, hi);
    else
        sums[0] = lo, sums[1] = hi;
}

// y[r] = acc lane r (+ bias[r]) for r < nr.
inline void store_rows(float* y, int64_t nr, const float* bias, __m512 acc) {
    const auto mask = __mmask16((1u << nr) - 1);
    _mm512_mask_storeu_ps(y, mask, bias ? _mm512_add_ps(acc, _mm512_maskz_loadu_ps(mask, bias)) : acc);
}

// The 16 rows' exact block sums, one row a lane (block_sums), of their levels lv (32 elements each, int16)
// against one token's 32 levels at xq.
template <int kPer>
inline void token_sums(const __m512i (&lv)[16], const int16_t* xq, __m512i (&sums)[kPer]) {
    const __m512i xv = _mm512_loadu_si512(xq);
    __m512i r[16];
    for (int k = 0; k < 16; ++k) r[k] = _mm512_madd_epi16(lv[k], xv);
    block_sums<kPer>(r, sums);
}

// One link of the micro-kernels' chain: acc = fma(float(sum), scale * d, acc).
inline __m512 chain(__m512 acc, __m512i sum, __m512 scale, float d) {
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(scale, _mm512_set1_ps(d)), acc);
}

// 16 rows' outputs, one a lane, with their levels row-major ([16][n_in]), scales and minimums
// ([16][n_in / LB]): per 32 elements, each row's pair products with x (madd: 16 int32 lanes, 8 a
// 16-element half), folded into every row's exact block sums in its lane (block_sums);
// then the micro-kernels' chain, acc = fma(float(sum), scale * d, acc) (and acc = fma(-min, s, acc)).
// Scales and minimums are transposed 16 blocks at a time into lane-per-row vectors.
template <int LB, bool Min>
void rows_dot_t(const int8_t* lv, const float* scale, const float* min, const int16_t* xq, const float* xd,
                const float* xs, int64_t n_in, float* y, int64_t nr, const float* bias) {
    constexpr int kPer = 32 / LB;  // level blocks per 32 elements
    const int64_t nb = n_in / LB;
    alignas(64) float sc[16][16], mn[16][16];  // [block j0 + i][row]
    __m512 acc = _mm512_setzero_ps();
    for (int64_t j0 = 0; j0 < nb; j0 += 16) {
        const int nj = int(std::min<int64_t>(16, nb - j0));
        const auto jmask = __mmask16((1u << nj) - 1);
        __m512i t[16];
        for (int k = 0; k < 16; ++k)
            t[k] = _mm512_castps_si512(_mm512_maskz_loadu_ps(jmask, scale + k * nb + j0));
        transpose16(t);
        for (int i = 0; i < 16; ++i) _mm512_store_si512(sc[i], t[i]);
        if constexpr (Min) {
            for (int k = 0; k < 16; ++k)
                t[k] = _mm512_castps_si512(_mm512_maskz_loadu_ps(jmask, min + k * nb + j0));
            transpose16(t);
            for (int i = 0; i < 16; ++i) _mm512_store_si512(mn[i], t[i]);
        }
        for (int i = 0; i < nj; i += kPer) {
            const int64_t c = (j0 + i) / kPer;  // the 32 elements of blocks j0 + i ..
            __m512i rows[16], sums[kPer];
            for (int k = 0; k < 16; ++k)
                rows[k] = _mm512_cvtepi8_epi16(
                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lv + k * n_in + 32 * c)));
            token_sums<kPer>(rows, xq + 32 * c, sums);
            for (int h = 0; h < kPer; ++h) {
                acc = chain(acc, sums[h], _mm512_load_ps(sc[i + h]), xd[c]);
                if constexpr (Min)
                    acc = _mm512_fnmadd_ps(_mm512_load_ps(mn[i + h]), _mm512_set1_ps(xs[c]), acc);
            }
        }
    }
    store_rows(y, nr, bias, acc);
}

// 32 levels of a 32-element block as int16, read from the block as to_levels reads it: Q8_0's signed
// bytes, Q4_0's nibbles - 8, Q5_0's nibbles and fifth bits - 16.
inline __m512i nibbles32(const uint8_t* qs) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)), low4 = _mm_set1_epi8(0x0F);
    const __m256i both = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), low4), _mm_and_si128(q, low4));
    return _mm512_cvtepu8_epi16(both);  // elements 0..15 the low nibbles, 16..31 the high ones
}
struct Q8_0Levels {
    using Block = quants::BlockQ8_0;
    static __m512i levels(const Block& b) {
        return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs)));
    }
};
struct Q4_0Levels {
    using Block = quants::BlockQ4_0;
    static __m512i levels(const Block& b) { return _mm512_sub_epi16(nibbles32(b.qs), _mm512_set1_epi16(8)); }
};
struct Q5_0Levels {
    using Block = quants::BlockQ5_0;
    static __m512i levels(const Block& b) {
        uint32_t qh;
        std::memcpy(&qh, b.qh, sizeof qh);
        const __m512i fifth = _mm512_maskz_mov_epi16(__mmask32(qh), _mm512_set1_epi16(16));
        return _mm512_sub_epi16(_mm512_or_si512(nibbles32(b.qs), fifth), _mm512_set1_epi16(16));
    }
};

// 16 rows of blocks read side by side (w: the first row's, row_bytes apart; rows past nr repeat row
// nr - 1), and the next panel's bytes (next, next_bytes), a share of which step(c) asks for at each of
// the `steps` steps: the hardware prefetcher follows 16 interleaved streams poorly, so the next panel
// streams in while this one is multiplied.
template <class Block>
struct Panel16 {
    const Block* rows[16];
    const uint8_t* next;
    size_t next_bytes, share;
    Panel16(const uint8_t* w, size_t row_bytes, int64_t nr, const uint8_t* nx, size_t nx_bytes, int64_t steps)
        : next(nx), next_bytes(nx_bytes), share((nx_bytes / size_t(steps) + 64) / 64 * 64) {
        for (int k = 0; k < 16; ++k)
            rows[k] = reinterpret_cast<const Block*>(w + size_t(std::min<int64_t>(k, nr - 1)) * row_bytes);
    }
    void step(int64_t c) const {
        for (size_t b = size_t(c) * share; b < std::min(size_t(c + 1) * share, next_bytes); b += 64)
            _mm_prefetch(reinterpret_cast<const char*>(next + b), _MM_HINT_T0);
    }
};

// rows_dot_t for the 32-element formats without minimums, their levels and scales read straight from
// the 16 rows' blocks (Panel16) rather than from to_levels' copy; T tokens (x token-major: levels [T][n_in],
// steps [T][n_in / 32]; y[t * y_stride + r]), the levels unpacked once for all of them and each token's
// chain the one-token chain.
template <class L, int T>
void blocks_dot_t(const uint8_t* w, size_t row_bytes, const int16_t* xq, const float* xd, const float*,
                  int64_t n_in, float* y, int64_t y_stride, int64_t nr, const float* bias,
                  const uint8_t* next, size_t next_bytes) {
    const int64_t chunks = n_in / 32;
    const Panel16<typename L::Block> p(w, row_bytes, nr, next, next_bytes, chunks);
    const auto& rows = p.rows;
    __m512 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t c = 0; c < chunks; ++c) {
        p.step(c);
        __m512i lv[16];
        alignas(32) uint16_t d[16];
        for (int k = 0; k < 16; ++k) lv[k] = L::levels(rows[k][c]), d[k] = rows[k][c].d;
        const __m512 scale = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(d)));
        unroll<T>([&](auto t) {
            __m512i sums[1];
            token_sums<1>(lv, xq + t * n_in + 32 * c, sums);
            acc[t] = chain(acc[t], sums[0], scale, xd[t * chunks + c]);
        });
    }
    unroll<T>([&](auto t) { store_rows(y + t * y_stride, nr, bias, acc[t]); });
}

// Q4_K's 16 rows side by side (Panel16), as blocks_dot_t reads the 32-element formats: per super-block each
// row's eight scales d * sc and minimums dmin * m (as to_levels computes them), transposed into lane-per-row
// vectors; per sub-block its nibbles (sub-blocks 2p and 2p + 1 are the low and high nibbles of qs[32p
// ..)), then for each token the block sums and the chain with the minimum term.
template <int T>
void q4_k_dot(const uint8_t* w, size_t row_bytes, const int16_t* xq, const float* xd, const float* xs,
              int64_t n_in, float* y, int64_t y_stride, int64_t nr, const float* bias, const uint8_t* next,
              size_t next_bytes) {
    const int64_t chunks = n_in / 32;
    const Panel16<quants::BlockQ4K> p(w, row_bytes, nr, next, next_bytes, chunks);
    const auto& rows = p.rows;
    __m512 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n_in / 256; ++i) {
        __m512i sm[16];  // row k's eight scales, then its eight minimums; transposed: sm[j] and sm[8 + j]
        for (int k = 0; k < 16; ++k) {
            __m128i s8, m8;
            simd::k_scales_mins(rows[k][i].scales, &s8, &m8);
            const __m256 scale = _mm256_mul_ps(_mm256_set1_ps(simd::half_to_float(rows[k][i].d)),
                                               _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(s8)));
            const __m256 min = _mm256_mul_ps(_mm256_set1_ps(simd::half_to_float(rows[k][i].dmin)),
                                             _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(m8)));
            sm[k] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_castps_si256(scale)),
                                       _mm256_castps_si256(min), 1);
        }
        transpose16(sm);  // sm[j], lane k: row k's scale of sub-block j; sm[8 + j] its minimum
        for (int j = 0; j < 8; ++j) {
            const int64_t c = i * 8 + j;
            p.step(c);
            __m512i lv[16];
            for (int k = 0; k < 16; ++k) {
                const __m256i q =
                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[k][i].qs + 32 * (j / 2)));
                lv[k] = _mm512_cvtepu8_epi16(
                    _mm256_and_si256(j % 2 ? _mm256_srli_epi16(q, 4) : q, _mm256_set1_epi8(0x0F)));
            }
            const __m512 scale = _mm512_castsi512_ps(sm[j]), min = _mm512_castsi512_ps(sm[8 + j]);
            unroll<T>([&](auto t) {
                __m512i sums[1];
                token_sums<1>(lv, xq + t * n_in + 32 * c, sums);
                acc[t] = chain(acc[t], sums[0], scale, xd[t * chunks + c]);
                acc[t] = _mm512_fnmadd_ps(min, _mm512_set1_ps(xs[t * chunks + c]), acc[t]);
            });
        }
    }
    unroll<T>([&](auto t) { store_rows(y + t * y_stride, nr, bias, acc[t]); });
}

// Q6_K's 16 rows side by side (Panel16): per super-block each row's sixteen scales d * sc (as to_levels
// computes them) transposed into lane-per-row vectors; per 32 elements (group m of half h: the low or high
// nibble of ql[64h + 32 (m & 1) ..), bits 2m, 2m + 1 of qh[32h ..) on top, less 32) the levels, then for
// each token the pair products, the block sums of its two 16-element level blocks, and the chain.
template <int T>
void q6_k_dot(const uint8_t* w, size_t row_bytes, const int16_t* xq, const float* xd, const float*,
              int64_t n_in, float* y, int64_t y_stride, int64_t nr, const float* bias, const uint8_t* next,
              size_t next_bytes) {
    const int64_t chunks = n_in / 32;
    const Panel16<quants::BlockQ6K> p(w, row_bytes, nr, next, next_bytes, chunks);
    const auto& rows = p.rows;
    const __m256i low4 = _mm256_set1_epi8(0x0F), top2 = _mm256_set1_epi8(0x30);
    __m512 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n_in / 256; ++i) {
        __m512i sc[16];  // row k's sixteen scales; transposed: sc[j], lane k, row k's scale of block j
        for (int k = 0; k < 16; ++k) {
            const __m512i s8 =
                _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[k][i].scales)));
            sc[k] = _mm512_castps_si512(
                _mm512_mul_ps(_mm512_set1_ps(simd::half_to_float(rows[k][i].d)), _mm512_cvtepi32_ps(s8)));
        }
        transpose16(sc);
        unroll<8>([&](auto j) {
            constexpr int h = j / 4, m = j % 4;
            const int64_t c = i * 8 + j;
            p.step(c);
            __m512i lv[16];
            for (int k = 0; k < 16; ++k) {
                const auto* ql = reinterpret_cast<const __m256i*>(rows[k][i].ql + 64 * h + 32 * (m & 1));
                const __m256i a = _mm256_loadu_si256(ql),
                              qh = _mm256_loadu_si256(
                                  reinterpret_cast<const __m256i*>(rows[k][i].qh + 32 * h));
                const __m256i lo = _mm256_and_si256(m < 2 ? a : _mm256_srli_epi16(a, 4), low4);
                const __m256i hi = _mm256_and_si256(
                    m < 2 ? _mm256_slli_epi16(qh, 4 - 2 * m) : _mm256_srli_epi16(qh, 2 * m - 4), top2);
                lv[k] =
                    _mm512_sub_epi16(_mm512_cvtepu8_epi16(_mm256_or_si256(lo, hi)), _mm512_set1_epi16(32));
            }
            unroll<T>([&](auto t) {
                __m512i sums[2];
                token_sums<2>(lv, xq + t * n_in + 32 * c, sums);
                for (int b = 0; b < 2; ++b)
                    acc[t] = chain(acc[t], sums[b], _mm512_castsi512_ps(sc[2 * m + 8 * h + b]),
                                   xd[t * chunks + c]);
            });
        });
    }
    unroll<T>([&](auto t) { store_rows(y + t * y_stride, nr, bias, acc[t]); });
}

// Each block reader's kernels for 1 .. kGemvGroup tokens.
template <class L>
constexpr BlocksFn kBlocks32[kGemvGroup] = {blocks_dot_t<L, 1>, blocks_dot_t<L, 2>, blocks_dot_t<L, 3>,
                                            blocks_dot_t<L, 4>};
constexpr BlocksFn kQ4K[kGemvGroup] = {q4_k_dot<1>, q4_k_dot<2>, q4_k_dot<3>, q4_k_dot<4>};
constexpr BlocksFn kQ6K[kGemvGroup] = {q6_k_dot<1>, q6_k_dot<2>, q6_k_dot<3>, q6_k_dot<4>};

}  // namespace

void pack_rows(const int8_t* rows, int64_t n_in, int32_t* q) {
    for (int64_t p0 = 0; p0 < n_in / 2; p0 += 16) {
        __m512i r[16];
        for (int k = 0; k < 16; ++k)
            r[k] = _mm512_cvtepi8_epi16(
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows + k * n_in + 2 * p0)));
        transpose16(r);
        for (int k = 0; k < 16; ++k) _mm512_storeu_si512(q + (p0 + k) * kRows, r[k]);
    }
}

void pack_token(const float* x, int64_t n_in, int64_t t, int32_t* q, float* d, float* s) {
    const __m512i at =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32(int(kTokens)));
    for (int64_t j = 0; j < n_in / 32; ++j, x += 32) {
        __m512i l0, l1;
        block_levels(x, l0, l1, d[j * kTokens + t], s[j * kTokens + t]);
        const __m512i pairs = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(l0)),
                                                 _mm512_cvtepi32_epi16(l1), 1);
        _mm512_i32scatter_epi32(q + j * 16 * kTokens + t, at, pairs, 4);
    }
}

void token_row(const float* x, int64_t n_in, int16_t* q, float* d, float* s) {
    for (int64_t j = 0; j < n_in / 32; ++j, x += 32, q += 32) {
        __m512i l0, l1;
        block_levels(x, l0, l1, d[j], s[j]);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), _mm512_cvtepi32_epi16(l0));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 16), _mm512_cvtepi32_epi16(l1));
    }
}

const MicroFn* micros(int level_block, bool level_min) {
    if (level_block == 32) return level_min ? kMicros<32, true> : kMicros<32, false>;
    if (level_block == 16 && !level_min) return kMicros<16, false>;
    return nullptr;
}

RowsFn rows_dot(int level_block, bool level_min) {
    if (level_block == 32) return level_min ? rows_dot_t<32, true> : rows_dot_t<32, false>;
    if (level_block == 16 && !level_min) return rows_dot_t<16, false>;
    return nullptr;
}

BlocksFn blocks_dot(GgmlType type, int nt) {
    switch (type) {
        case GgmlType::Q8_0:
            return kBlocks32<Q8_0Levels>[nt - 1];
        case GgmlType::Q4_0:
            return kBlocks32<Q4_0Levels>[nt - 1];
        case GgmlType::Q5_0:
            return kBlocks32<Q5_0Levels>[nt - 1];
        case GgmlType::Q4_K:
            return kQ4K[nt - 1];
        case GgmlType::Q6_K:
            return kQ6K[nt - 1];
        default:
            return nullptr;
    }
}

}  // namespace minfer::cpu::i16::avx512
