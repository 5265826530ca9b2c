// AVX-512 (F, BW, VL, VNNI) int8x2 dots of the low-bit formats Q2_K, Q3_K, IQ4_NL, IQ4_XS and MXFP4 (twins of
// quants_lowbit.cpp's references), in quants_q8_avx512.cpp's manner: two 32-element activation blocks per
// 512-bit vector, vpdpbusd of unsigned weight levels against the hi and the lo levels, merged exactly as
// 254 * hi + lo per int32 lane of four products. vpdpbusd wants unsigned weights, so the signed grids
// (IQ4_NL, IQ4_XS: +128; MXFP4: +12) and Q3_K's levels (+4) are offset; Q3_K takes the offset's share
// back in integers from the activation row's offsets (32 times each lane's merged sum), exactly, the grids
// as an f32 minimum term per block (see group8). They are scaled once per 16 (Q2_K, Q3_K) or
// 32 elements in f32 and summed in f32 chains, so a dot differs from the reference's double sum by f32
// roundings only (the budget of test_quants_q8x2.cpp). Each kernel is a template over the column count
// (quants_cols.h): every column of vec_dot_x2_cols gets vec_dot_x2's bits.
//
// Compiled with AVX-512 flags: only intrinsics and internal-linkage helpers (see quants_q8_avx512.cpp).
#include <immintrin.h>

#include <cstring>

#include "quant/quants_avx512_util.h"
#include "quant/quants_cols.h"
#include "quant/quants_lowbit.h"

namespace minfer::quants::avx512 {
namespace {

using simd::half_to_float;
using simd::prefetch_ahead;

// A 16-entry grid plus kOffset as unsigned bytes, in every 128-bit lane (for vpshufb).
template <const int8_t* kValues, int kOffset>
inline __m512i grid_table() {
    alignas(64) uint8_t t[64];
    for (int i = 0; i < 64; ++i) t[i] = uint8_t(kValues[i % 16] + kOffset);
    return _mm512_load_si512(t);
}

// Lane sums of Q3_K's levels 0..7, less 4 times each lane's merged activation sum (offsets: 32 times it):
// the lanes of q - 4, exact.
inline __m512i minus_four(__m512i sum, __m512i offsets) {
    return _mm512_sub_epi32(sum, _mm512_srai_epi32(offsets, 3));
}

inline __m512 two_scales(float a, float b) {  // lanes 0..7 a, 8..15 b
    return _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(a), _mm512_set1_ps(b));
}

struct IQ4NLGrid {
    using Block = BlockIQ4NL;
    static constexpr const int8_t* kValues = kIQ4NLValues;
    static constexpr int kOffset = 128;
    static float scale(const Block& b) { return half_to_float(b.d); }
    static __m256 scales8(const Block* b) {
        return _mm256_cvtph_ps(_mm_setr_epi16(short(b[0].d), short(b[1].d), short(b[2].d), short(b[3].d),
                                              short(b[4].d), short(b[5].d), short(b[6].d), short(b[7].d)));
    }
};

struct MXFP4Grid {
    using Block = BlockMXFP4;
    static constexpr const int8_t* kValues = kMXFP4Values;
    static constexpr int kOffset = 12;
    static float scale(const Block& b) { return mxfp4_scale(b.e); }
    static __m256 scales8(const Block* b) {
        return _mm256_setr_ps(scale(b[0]), scale(b[1]), scale(b[2]), scale(b[3]), scale(b[4]), scale(b[5]),
                              scale(b[6]), scale(b[7]));
    }
};

// Per-column state of the kernels: the activation row's blocks, offsets and wide copy, two accumulator
// chains and the minimum terms of group8 (and of nl_dot's last blocks).
template <int NC>
struct ColState {
    const BlockQ8X2* y[NC];
    const int32_t* offsets[NC];
    X2Wide x[NC];
    __m512 acc0[NC], acc1[NC];
    __m256 accm[NC];  // group8's minimum terms d_w * s, eight blocks a lane
    float tail_m[NC];

    ColState(Cols xs, int64_t n) {
        for (int c = 0; c < NC; ++c) {
            y[c] = static_cast<const BlockQ8X2*>(xs[c]), offsets[c] = x2_offsets(xs[c], n);
            x[c] = x2_wide(xs[c], n);
            acc0[c] = acc1[c] = _mm512_setzero_ps(), accm[c] = _mm256_setzero_ps(), tail_m[c] = 0.0f;
        }
    }
    // The chains' sum, less `offset` times the minimum terms.
    void finish(float* out, float offset = 0.0f) const {
        for (int c = 0; c < NC; ++c)
            out[c] = lane_sum(_mm512_add_ps(acc0[c], acc1[c])) - offset * (simd::hsum(accm[c]) + tail_m[c]);
    }
};

// Eight 32-element blocks against activation blocks a .. a + 8 (a even) of each column: offset levels q
// (block pairs), weight scales ws (one a block). Lane scales d_w * d_x come permuted from one vector of the
// eight products, pairs 0 and 2 go to chain 0, 1 and 3 to chain 1, and d_w * s (s: the block's represented
// sum) to the minimum chain, which finish scales by -offset.
template <int NC>
inline void group8(const __m512i (&q)[4], __m256 ws, int64_t a, ColState<NC>& s) {
    for (int c = 0; c < NC; ++c) {
        const __m512 sx = _mm512_castps256_ps512(_mm256_mul_ps(ws, _mm256_loadu_ps(s.x[c].d + a)));
        s.accm[c] = _mm256_fmadd_ps(ws, _mm256_loadu_ps(s.x[c].s + a), s.accm[c]);
#pragma GCC unroll 4
        for (int p = 0; p < 4; ++p) {
            const __m512i pick =
                _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32(2 * p), _mm512_set1_epi32(2 * p + 1));
            __m512& acc = p % 2 ? s.acc1[c] : s.acc0[c];
            acc = _mm512_fmadd_ps(_mm512_permutexvar_ps(pick, sx),
                                  _mm512_cvtepi32_ps(x2_sum(q[p], s.x[c], a / 2 + p)), acc);
        }
    }
}

// IQ4_NL / MXFP4: group8 over eight blocks a step, the grid offset taken back in f32 (far fewer operations
// than exact integer offsets, at the price of f32 roundings of terms up to kOffset * d_w * |x|: the test's
// minimum terms); the last blocks a pair at a time, an odd last one filling both halves of its vector, the
// upper lanes scaled by 0.
template <class G, int NC>
void nl_dot(const void* w, Cols xs, int64_t n, float* out) {
    const auto* b = static_cast<const typename G::Block*>(w);
    const int64_t nb = n / kQK0;
    const __m512i table = grid_table<G::kValues, G::kOffset>();
    ColState<NC> s(xs, n);
    int64_t i = 0;
    for (; i + 8 <= nb; i += 8) {
        // 64 blocks further than prefetch_ahead's distance: streamed from DRAM the 17- and 18-byte blocks ran
        // at 10 GB/s with the default, 14 GB/s with this (bench_quants dot_x2/MXFP4/268435456).
        prefetch_ahead<8 * sizeof(b[i])>(b + i + 64);
        __m512i q[4];
        for (int p = 0; p < 4; ++p)
            q[p] = _mm512_shuffle_epi8(table, nibbles64(b[i + 2 * p].qs, b[i + 2 * p + 1].qs));
        group8(q, G::scales8(b + i), i, s);
    }
    for (; i < nb; i += 2) {
        const bool two = i + 1 < nb;
        const auto& bn = b[two ? i + 1 : i];
        const __m512i q = _mm512_shuffle_epi8(table, nibbles64(b[i].qs, bn.qs));
        const float wa = G::scale(b[i]), wb = two ? G::scale(bn) : 0.0f;
        for (int c = 0; c < NC; ++c) {
            const BlockQ8X2& yi = s.y[c][i];
            const BlockQ8X2& yn = s.y[c][two ? i + 1 : i];
            const __m512i sum = x2_sum(q, join(yi.hi, yn.hi), join(yi.lo, yn.lo));
            const float sb = two ? wb * yn.d : 0.0f;
            s.acc1[c] = _mm512_fmadd_ps(two_scales(wa * yi.d, sb), _mm512_cvtepi32_ps(sum), s.acc1[c]);
            s.tail_m[c] += wa * yi.s + (two ? wb * yn.s : 0.0f);
        }
    }
    s.finish(out, float(G::kOffset));
}

// The eight sub-block scales d * (ls_j - 32) of an IQ4_XS super-block: ls_j's low 4 bits are bits 4j ..
// 4j + 3 of the little-endian word scales_l, its top 2 bits bits 2j, 2j + 1 of scales_h (iq4_xs_scale).
inline __m256 iq4_xs_scales(const BlockIQ4XS& b) {
    uint32_t lo;
    std::memcpy(&lo, b.scales_l, sizeof lo);
    const __m256i j = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i low = _mm256_and_si256(
        _mm256_srlv_epi32(_mm256_set1_epi32(int(lo)), _mm256_slli_epi32(j, 2)), _mm256_set1_epi32(0xF));
    const __m256i top = _mm256_and_si256(
        _mm256_srlv_epi32(_mm256_set1_epi32(b.scales_h), _mm256_slli_epi32(j, 1)), _mm256_set1_epi32(3));
    const __m256i ls =
        _mm256_sub_epi32(_mm256_or_si256(low, _mm256_slli_epi32(top, 4)), _mm256_set1_epi32(32));
    return _mm256_mul_ps(_mm256_set1_ps(half_to_float(b.d)), _mm256_cvtepi32_ps(ls));
}

// IQ4_XS: a super-block is eight blocks of group8 (sub-blocks 2p and 2p + 1 per vector), the grid offset by
// 128 and taken back as nl_dot does.
template <int NC>
void iq4_xs_dot(const void* w, Cols xs, int64_t n, float* out) {
    const auto* b = static_cast<const BlockIQ4XS*>(w);
    const __m512i table = grid_table<kIQ4NLValues, 128>();
    ColState<NC> s(xs, n);
    for (int64_t i = 0; i < n / kQKK; ++i) {
        prefetch_ahead<sizeof(BlockIQ4XS)>(b + i + 8);
        __m512i q[4];
        for (int p = 0; p < 4; ++p)
            q[p] = _mm512_shuffle_epi8(table, nibbles64(b[i].qs + 32 * p, b[i].qs + 32 * p + 16));
        group8(q, iq4_xs_scales(b[i]), 8 * i, s);
    }
    s.finish(out, 128.0f);
}

// Q2_K / Q3_K elements 64p .. 64p + 64 of a super-block (p < 4): half h = p / 2 of qs, bit planes 2j and
// 2j + 1 (j = 2 (p % 2)) for the lower and the upper 32, as levels 0..3.
inline __m512i crumbs64(const uint8_t* qs, int p) {
    const __m512i raw =
        _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * (p / 2))));
    const int j = 2 * (p % 2);
    const __m512i counts = _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16(int16_t(2 * j)),
                                                   _mm512_set1_epi16(int16_t(2 * j + 2)));
    return _mm512_and_si512(_mm512_srlv_epi16(raw, counts), _mm512_set1_epi8(3));
}

// Q3_K levels 0..7 of those elements: crumbs64 and bit 2p (2p + 1 for the upper 32) of hmask[l] as 4.
inline __m512i q3_k_levels64(const BlockQ3K& b, int p) {
    const __m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.hmask)));
    const __m512i counts = _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16(int16_t(2 * p)),
                                                   _mm512_set1_epi16(int16_t(2 * p + 1)));
    const __m512i hi = _mm512_and_si512(_mm512_srlv_epi16(hm, counts), _mm512_set1_epi8(1));
    return _mm512_or_si512(crumbs64(b.qs, p), _mm512_slli_epi16(hi, 2));
}

// The 16 sub-block scales of a super-block broadcast to the lanes of pair p: lanes 4k .. 4k + 3 take
// sub-block 4p + k.
inline __m512 quarter_scales(__m512 scales16, int p) {
    const __m512i quarter = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    return _mm512_permutexvar_ps(_mm512_add_epi32(quarter, _mm512_set1_epi32(4 * p)), scales16);
}

// The steps d_x of activation blocks a .. a + 8 spread over 16 lanes, lane k taking block a + k / 2 (the
// block of sub-block k of a Q2_K / Q3_K super-block).
inline __m512 sub_block_steps(const float* d, int64_t a) {
    const __m512i half = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    return _mm512_permutexvar_ps(half, _mm512_castps256_ps512(_mm256_loadu_ps(d + a)));
}

// 16 scale bytes as f32 times d.
inline __m512 scaled_bytes(__m128i bytes, float d) {
    return _mm512_mul_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes)));
}

// The sixteen 6-bit scales of a Q3_K super-block less 32 as bytes (q3_k_scale): the low nibbles of bytes
// 0..7 then their high nibbles, each with bits 2 (k / 4), 2 (k / 4) + 1 of byte 8 + k % 4 on top.
inline __m128i q3_k_scales(const uint8_t* scales) {
    alignas(16) uint8_t raw[16] = {};
    std::memcpy(raw, scales, 12);
    const __m128i v = _mm_load_si128(reinterpret_cast<const __m128i*>(raw));
    const __m128i both = _mm_unpacklo_epi64(v, v);
    const __m128i low =
        _mm_and_si128(_mm_blend_epi16(both, _mm_srli_epi16(both, 4), 0xF0), _mm_set1_epi8(0xF));
    const __m128i spread =
        _mm_shuffle_epi8(v, _mm_setr_epi8(8, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11));
    const __m128i top = _mm_and_si128(_mm_srlv_epi32(spread, _mm_setr_epi32(0, 2, 4, 6)), _mm_set1_epi8(3));
    return _mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi16(top, 4)), _mm_set1_epi8(32));
}

// Q3_K: (d * (sc_k - 32)) * d_x per lane times the exact lane of (q - 4) * x.
template <int NC>
void q3_k_dot(const void* w, Cols xs, int64_t n, float* out) {
    const auto* b = static_cast<const BlockQ3K*>(w);
    ColState<NC> s(xs, n);
    for (int64_t i = 0; i < n / kQKK; ++i) {
        prefetch_ahead<sizeof(BlockQ3K)>(b + i);
        const __m512 ds = scaled_bytes(q3_k_scales(b[i].scales), half_to_float(b[i].d));
        __m512 dsx[NC];  // lane k: (d * (sc_k - 32)) * d_x
        for (int c = 0; c < NC; ++c) dsx[c] = _mm512_mul_ps(ds, sub_block_steps(s.x[c].d, 8 * i));
#pragma GCC unroll 4
        for (int p = 0; p < 4; ++p) {
            const __m512i q = q3_k_levels64(b[i], p);
            const int64_t a = 8 * i + 2 * p;
            for (int c = 0; c < NC; ++c) {
                const __m512i sum =
                    minus_four(x2_sum(q, s.x[c], a / 2), _mm512_loadu_si512(s.offsets[c] + 8 * a));
                __m512& acc = p % 2 ? s.acc1[c] : s.acc0[c];
                acc = _mm512_fmadd_ps(quarter_scales(dsx[c], p), _mm512_cvtepi32_ps(sum), acc);
            }
        }
    }
    s.finish(out);
}

// Q2_K: (d * sc_k) * d_x per lane times the lane of q * x into chain p % 2, and -(dmin * m_k) * d_x times
// the lane's merged activation sum (its offset / 32) into a third chain.
template <int NC>
void q2_k_dot(const void* w, Cols xs, int64_t n, float* out) {
    const auto* b = static_cast<const BlockQ2K*>(w);
    ColState<NC> s(xs, n);
    __m512 accmin[NC];
    for (int c = 0; c < NC; ++c) accmin[c] = _mm512_setzero_ps();
    const __m128i m4 = _mm_set1_epi8(0xF);
    for (int64_t i = 0; i < n / kQKK; ++i) {
        prefetch_ahead<sizeof(BlockQ2K)>(b + i);
        const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].scales));
        const __m512 ds = scaled_bytes(_mm_and_si128(sc, m4), half_to_float(b[i].d));
        const __m512 dm = scaled_bytes(_mm_and_si128(_mm_srli_epi16(sc, 4), m4), -half_to_float(b[i].dmin));
        __m512 dsx[NC], dmx[NC];  // lane k: (d * sc_k) * d_x and -(dmin * m_k) * d_x
        for (int c = 0; c < NC; ++c) {
            const __m512 dx = sub_block_steps(s.x[c].d, 8 * i);
            dsx[c] = _mm512_mul_ps(ds, dx), dmx[c] = _mm512_mul_ps(dm, dx);
        }
#pragma GCC unroll 4
        for (int p = 0; p < 4; ++p) {
            const __m512i q = crumbs64(b[i].qs, p);
            const int64_t a = 8 * i + 2 * p;
            for (int c = 0; c < NC; ++c) {
                const __m512i xsum = _mm512_srai_epi32(_mm512_loadu_si512(s.offsets[c] + 8 * a), 5);
                __m512& acc = p % 2 ? s.acc1[c] : s.acc0[c];
                acc = _mm512_fmadd_ps(quarter_scales(dsx[c], p), _mm512_cvtepi32_ps(x2_sum(q, s.x[c], a / 2)),
                                      acc);
                accmin[c] = _mm512_fmadd_ps(quarter_scales(dmx[c], p), _mm512_cvtepi32_ps(xsum), accmin[c]);
            }
        }
    }
    for (int c = 0; c < NC; ++c) s.acc1[c] = _mm512_add_ps(s.acc1[c], accmin[c]);
    s.finish(out);
}

// The kernels by column count (run<NC>), for the table's entry points.
template <class G>
struct NLKernel {
    template <int NC>
    static void run(const void* w, Cols xs, int64_t n, float* out) {
        nl_dot<G, NC>(w, xs, n, out);
    }
};

struct IQ4XSKernel {
    template <int NC>
    static void run(const void* w, Cols xs, int64_t n, float* out) {
        iq4_xs_dot<NC>(w, xs, n, out);
    }
};

struct Q3KKernel {
    template <int NC>
    static void run(const void* w, Cols xs, int64_t n, float* out) {
        q3_k_dot<NC>(w, xs, n, out);
    }
};

struct Q2KKernel {
    template <int NC>
    static void run(const void* w, Cols xs, int64_t n, float* out) {
        q2_k_dot<NC>(w, xs, n, out);
    }
};

}  // namespace

float vec_dot_x2_q2_k(const void* w, const void* xq, int64_t n) {
    return dot_one<Q2KKernel>(w, xq, n);
}
void vec_dot_x2_cols_q2_k(const void* w, const void* xq, size_t stride, int64_t n, int ncols, float* out) {
    dot_cols<Q2KKernel>(w, xq, stride, n, ncols, out);
}

float vec_dot_x2_q3_k(const void* w, const void* xq, int64_t n) {
    return dot_one<Q3KKernel>(w, xq, n);
}
void vec_dot_x2_cols_q3_k(const void* w, const void* xq, size_t stride, int64_t n, int ncols, float* out) {
    dot_cols<Q3KKernel>(w, xq, stride, n, ncols, out);
}

float vec_dot_x2_iq4_nl(const void* w, const void* xq, int64_t n) {
    return dot_one<NLKernel<IQ4NLGrid>>(w, xq, n);
}
void vec_dot_x2_cols_iq4_nl(const void* w, const void* xq, size_t stride, int64_t n, int ncols, float* out) {
    dot_cols<NLKernel<IQ4NLGrid>>(w, xq, stride, n, ncols, out);
}

float vec_dot_x2_iq4_xs(const void* w, const void* xq, int64_t n) {
    return dot_one<IQ4XSKernel>(w, xq, n);
}
void vec_dot_x2_cols_iq4_xs(const void* w, const void* xq, size_t stride, int64_t n, int ncols, float* out) {
    dot_cols<IQ4XSKernel>(w, xq, stride, n, ncols, out);
}

float vec_dot_x2_mxfp4(const void* w, const void* xq, int64_t n) {
    return dot_one<NLKernel<MXFP4Grid>>(w, xq, n);
}
void vec_dot_x2_cols_mxfp4(const void* w, const void* xq, size_t stride, int64_t n, int ncols, float* out) {
    dot_cols<NLKernel<MXFP4Grid>>(w, xq, stride, n, ncols, out);
}

}  // namespace minfer::quants::avx512
