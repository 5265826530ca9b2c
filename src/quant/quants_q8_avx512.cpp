// AVX-512 (F, BW, VL, VNNI) int8x2 dots of Q8_0 / Q4_0 / Q5_0 / Q4_K / Q5_K / Q6_K weights, two 32-element
// blocks per 512-bit vector
// (twins of quants_q8.cpp's, faster versions of quants_q8_avx2.cpp's). The levels of two blocks fill one
// vector; Q5_0's fifth bits come straight from qh as a byte mask (one masked add instead of the AVX2 bit
// spreading); vpdpbusd sums four level x activation products per int32 lane for hi and for lo. The lanes
// are merged exactly as in the AVX2 kernels, 254 * sum(w hi) + sum(w lo) minus the activation row's
// offsets, and scaled once per block in f32. Each kernel is a template over the number of activation
// rows (columns) it dots one weight row with, the weights unpacked once: vec_dot_x2 is its one-column
// instance and vec_dot_x2_cols the others, so every column gets the one-column bits.
//
// This file is compiled with AVX-512 flags: it uses only intrinsics and helpers with internal linkage
// (simd_avx2.h), never an inline function of a shared header, whose AVX-512 copy the linker could hand
// to code running on any CPU.
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "quant/quants.h"
#include "quant/quants_avx512_util.h"
#include "quant/quants_cols.h"
#include "quant/quants_impl.h"
#include "util/simd_avx2.h"

namespace minfer::quants::avx512 {
namespace {

using simd::half_to_float;
using simd::k_scales_mins;
using simd::prefetch_ahead;

// Q8_0's levels are signed: vpdpbusd takes |w| and x with w's sign (the AVX2 sign trick; activation
// levels stay within +-127, so negating them is exact).
struct Q8_0Pair {
    using Block = BlockQ8_0;
    static constexpr bool kSigned = true;
    static __m512i levels(const Block& a, const Block& b) {
        return _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs))),
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs)), 1);
    }
};

struct Q4_0Pair {
    using Block = BlockQ4_0;
    static constexpr bool kSigned = false;
    static constexpr int kOffsetShift = 2;  // level offset 8 = x2_offsets' 32 >> 2
    static __m512i levels(const Block& a, const Block& b) { return nibbles64(a.qs, b.qs); }
};

struct Q5_0Pair {
    using Block = BlockQ5_0;
    static constexpr bool kSigned = false;
    static constexpr int kOffsetShift = 1;  // level offset 16 = x2_offsets' 32 >> 1
    // Bit e of qh is element e's fifth bit, and byte e of a block's levels is element e.
    static __m512i levels(const Block& a, const Block& b) {
        uint32_t ha, hb;
        std::memcpy(&ha, a.qh, sizeof ha);
        std::memcpy(&hb, b.qh, sizeof hb);
        const __mmask64 fifth = _cvtu64_mask64(uint64_t(ha) | uint64_t(hb) << 32);
        const __m512i q = nibbles64(a.qs, b.qs);
        return _mm512_mask_add_epi8(q, fifth, q, _mm512_set1_epi8(16));
    }
};

// The weight side of a block pair, decoded once for every column: levels (signed ones as |q| with the
// mask of the negative ones, whose activations the column step negates) and the blocks' steps.
struct PairLevels {
    __m512i q;
    __mmask64 negative;
    float wa, wb;
};

template <class Dec>
inline PairLevels pair_levels(const typename Dec::Block& a, const typename Dec::Block& b) {
    PairLevels w{Dec::levels(a, b), 0, half_to_float(a.d), half_to_float(b.d)};
    if constexpr (Dec::kSigned) {
        w.negative = _mm512_movepi8_mask(w.q);
        w.q = _mm512_abs_epi8(w.q);
    }
    return w;
}

// Blocks a and b (b may repeat a with `two` false: its lanes then count zero) against activation levels
// xh and xl (lanes 0..7 a's block, 8..15 b's) with steps da and db: the int32 lanes of (q - offset) * x
// (signed levels: q * x), exact, scaled by d_w * d per block into acc.
template <class Dec>
inline void pair_step(const PairLevels& w, __m512i xh, __m512i xl, float da, float db, const int32_t* offsets,
                      bool two, __m512& acc) {
    if constexpr (Dec::kSigned) {
        xh = _mm512_mask_sub_epi8(xh, w.negative, _mm512_setzero_si512(), xh);
        xl = _mm512_mask_sub_epi8(xl, w.negative, _mm512_setzero_si512(), xl);
    }
    __m512i p = x2_sum(w.q, xh, xl);
    if constexpr (!Dec::kSigned) {
        const __mmask16 lanes = two ? 0xFFFF : 0x00FF;
        p = _mm512_sub_epi32(p,
                             _mm512_srai_epi32(_mm512_maskz_loadu_epi32(lanes, offsets), Dec::kOffsetShift));
    }
    const float sa = w.wa * da, sb = two ? w.wb * db : 0.0f;
    const __m512 scale = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(sa), _mm512_set1_ps(sb));
    acc = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(p), acc);
}

// Per column two accumulator chains, block pairs 4k, 4k + 1 into one and 4k + 2, 4k + 3 into the other.
template <class Dec, int NC>
void block32_pair_dot(const void* w, Cols xs, int64_t n, float* out) {
    const auto* b = static_cast<const typename Dec::Block*>(w);
    const int64_t nb = n / kQK0;
    const BlockQ8X2* y[NC];
    const int32_t* offsets[NC];
    X2Wide x[NC];
    __m512 a0[NC], a1[NC];
    for (int c = 0; c < NC; ++c) {
        y[c] = static_cast<const BlockQ8X2*>(xs[c]), offsets[c] = x2_offsets(xs[c], n),
        x[c] = x2_wide(xs[c], n);
        a0[c] = a1[c] = _mm512_setzero_ps();
    }
    // Blocks i, i + 1 (i even) against each column's wide pair i / 2.
    const auto step = [&](int64_t i, __m512(&acc)[NC]) {
        const PairLevels lv = pair_levels<Dec>(b[i], b[i + 1]);
        for (int c = 0; c < NC; ++c) {
            const int8_t* xp = x[c].pairs + 64 * i;
            pair_step<Dec>(lv, _mm512_loadu_si512(xp), _mm512_loadu_si512(xp + 64), x[c].d[i], x[c].d[i + 1],
                           offsets[c] + 8 * i, true, acc[c]);
        }
    };
    int64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
        prefetch_ahead<4 * sizeof(b[i])>(b + i);
        step(i, a0), step(i + 2, a1);
    }
    for (; i + 2 <= nb; i += 2) step(i, a0);
    if (i < nb) {
        const PairLevels lv = pair_levels<Dec>(b[i], b[i]);
        for (int c = 0; c < NC; ++c) {
            const BlockQ8X2& yi = y[c][i];
            pair_step<Dec>(lv, join(yi.hi, yi.hi), join(yi.lo, yi.lo), yi.d, 0.0f, offsets[c] + 8 * i, false,
                           a1[c]);
        }
    }
    for (int c = 0; c < NC; ++c) out[c] = lane_sum(_mm512_add_ps(a0[c], a1[c]));
}

// Levels 0..31 of Q4_K / Q5_K sub-blocks 2p (lower half) and 2p + 1 (upper half): the 32 bytes of qs
// that hold both (low and high nibbles) fill both halves, the upper half shifted down by 4; Q5_K adds 16
// where bit 2p (2p + 1 for the upper half) of qh is set.
template <class Block>
inline __m512i k_type1_levels(const Block& b, __m512i qh, int p) {
    const __m512i raw =
        _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * p)));
    __m512i q = _mm512_and_si512(_mm512_mask_srli_epi16(raw, 0xFFFF0000u, raw, 4), _mm512_set1_epi8(0x0F));
    if constexpr (std::is_same_v<Block, BlockQ5K>) {
        const __m512i counts = _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16(int16_t(2 * p)),
                                                       _mm512_set1_epi16(int16_t(2 * p + 1)));
        const __m512i bit = _mm512_and_si512(_mm512_srlv_epi16(qh, counts), _mm512_set1_epi8(1));
        q = _mm512_or_si512(q, _mm512_slli_epi16(bit, 4));
    }
    return q;
}

// Q4_K / Q5_K against int8x2, sub-blocks 2p and 2p + 1 of a super-block in one vector (k_type1_levels).
// Lane scales are d_w * sc_j * d_x, rounded as the AVX2 kernel rounds them; the minimum terms
// -dmin * m_j * s go into their own 8-lane accumulator as there.
template <class Block, int NC>
void k_type1_dot_x2(const Block* b, Cols xs, int64_t n, float* out) {
    X2Wide x[NC];
    __m512 acc0[NC], acc1[NC];
    __m256 accm[NC];
    for (int c = 0; c < NC; ++c) {
        x[c] = x2_wide(xs[c], n);
        acc0[c] = acc1[c] = _mm512_setzero_ps(), accm[c] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < n / kQKK; ++i) {
        prefetch_ahead<sizeof(Block)>(b + i);
        __m128i scales, mins;
        k_scales_mins(b[i].scales, &scales, &mins);
        const __m256 ds = _mm256_mul_ps(_mm256_set1_ps(half_to_float(b[i].d)),
                                        _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(scales)));
        __m512 dsx[NC];  // lanes j < 8: scale of sub-block j
        for (int c = 0; c < NC; ++c)
            dsx[c] = _mm512_castps256_ps512(_mm256_mul_ps(ds, _mm256_loadu_ps(x[c].d + 8 * i)));
        __m512i qh = _mm512_setzero_si512();
        if constexpr (std::is_same_v<Block, BlockQ5K>)
            qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qh)));
#pragma GCC unroll 4
        for (int p = 0; p < 4; ++p) {
            const __m512i q = k_type1_levels(b[i], qh, p);
            const __m512i pick =
                _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32(2 * p), _mm512_set1_epi32(2 * p + 1));
            for (int c = 0; c < NC; ++c) {
                const __m512i sum = x2_sum(q, x[c], 4 * i + p);
                __m512& acc = p % 2 ? acc1[c] : acc0[c];
                acc = _mm512_fmadd_ps(_mm512_permutexvar_ps(pick, dsx[c]), _mm512_cvtepi32_ps(sum), acc);
            }
        }
        const __m256 m = _mm256_mul_ps(_mm256_set1_ps(-half_to_float(b[i].dmin)),
                                       _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(mins)));
        for (int c = 0; c < NC; ++c) accm[c] = _mm256_fmadd_ps(m, _mm256_loadu_ps(x[c].s + 8 * i), accm[c]);
    }
    for (int c = 0; c < NC; ++c)
        out[c] = lane_sum(_mm512_add_ps(_mm512_add_ps(acc0[c], acc1[c]), _mm512_castps256_ps512(accm[c])));
}

// Q6_K groups 4h + k and 4h + k + 1 of half h (k = 0, 2), levels 0..63 as bytes (g[k / 2]): from ql bytes
// [64h, 64h + 64) (low nibbles for k = 0, high for k = 2) and the top bits of qh shifted per half.
inline void q6_k_pairs(const BlockQ6K& b, int h, __m512i g[2]) {
    const __m512i low4 = _mm512_set1_epi8(0x0F), top2 = _mm512_set1_epi8(0x30);
    const __m512i shift_lo = _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16(4), _mm512_set1_epi16(2));
    const __m512i shift_hi =
        _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_setzero_si512(), _mm512_set1_epi16(2));
    const __m512i ql = join(reinterpret_cast<const int8_t*>(b.ql + 64 * h),
                            reinterpret_cast<const int8_t*>(b.ql + 64 * h + 32));
    const __m512i qh =
        _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * h)));
    g[0] =
        _mm512_or_si512(_mm512_and_si512(ql, low4), _mm512_and_si512(_mm512_sllv_epi16(qh, shift_lo), top2));
    g[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4),
                           _mm512_and_si512(_mm512_srlv_epi16(qh, shift_hi), top2));
}

// Q6_K against int8x2, two 32-element groups per vector (the AVX2 kernel's q6_k_groups, two at a time).
// Levels 0..63 multiply x unsigned and each lane subtracts its activation offset, as there; lane scales
// d_w * sc * d_x for the four 16-element sub-blocks of the two groups.
template <int NC>
void q6_k_dot_x2(const BlockQ6K* b, Cols xs, int64_t n, float* out) {
    X2Wide x[NC];
    const int32_t* offsets[NC];
    __m512 acc0[NC], acc1[NC];
    for (int c = 0; c < NC; ++c) {
        x[c] = x2_wide(xs[c], n), offsets[c] = x2_offsets(xs[c], n);
        acc0[c] = acc1[c] = _mm512_setzero_ps();
    }
    const __m512i quarter = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    for (int64_t i = 0; i < n / kQKK; ++i) {
        prefetch_ahead<sizeof(BlockQ6K)>(b + i);
        const __m512 ds = _mm512_mul_ps(_mm512_set1_ps(half_to_float(b[i].d)),
                                        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                            _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].scales)))));
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
            __m512i g[2];
            q6_k_pairs(b[i], h, g);
#pragma GCC unroll 2
            for (int k = 0; k < 2; ++k) {
                const int64_t a = 8 * i + 4 * h + 2 * k;  // activation blocks a and a + 1
                const __m512 dsk = _mm512_permutexvar_ps(
                    _mm512_add_epi32(quarter, _mm512_set1_epi32(2 * (4 * h + 2 * k))), ds);
                for (int c = 0; c < NC; ++c) {
                    const __m512i p =
                        _mm512_sub_epi32(x2_sum(g[k], x[c], a / 2), _mm512_loadu_si512(offsets[c] + 8 * a));
                    const __m512 dx = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(x[c].d[a]),
                                                           _mm512_set1_ps(x[c].d[a + 1]));
                    __m512& acc = k ? acc1[c] : acc0[c];
                    acc = _mm512_fmadd_ps(_mm512_mul_ps(dsk, dx), _mm512_cvtepi32_ps(p), acc);
                }
            }
        }
    }
    for (int c = 0; c < NC; ++c) out[c] = lane_sum(_mm512_add_ps(acc0[c], acc1[c]));
}

// The kernels by column count (run<NC>), for the table's entry points.
template <class Dec>
struct Block32Kernel {
    template <int NC>
    static void run(const void* w, Cols xs, int64_t n, float* out) {
        block32_pair_dot<Dec, NC>(w, xs, n, out);
    }
};

template <class Block>
struct KType1Kernel {
    template <int NC>
    static void run(const void* w, Cols xs, int64_t n, float* out) {
        k_type1_dot_x2<Block, NC>(static_cast<const Block*>(w), xs, n, out);
    }
};

struct Q6KKernel {
    template <int NC>
    static void run(const void* w, Cols xs, int64_t n, float* out) {
        q6_k_dot_x2<NC>(static_cast<const BlockQ6K*>(w), xs, n, out);
    }
};

}  // namespace

float vec_dot_x2_q8_0(const void* w, const void* xq, int64_t n) {
    return dot_one<Block32Kernel<Q8_0Pair>>(w, xq, n);
}
void vec_dot_x2_cols_q8_0(const void* w, const void* xq, size_t stride, int64_t n, int ncols, float* out) {
    dot_cols<Block32Kernel<Q8_0Pair>>(w, xq, stride, n, ncols, out);
}

float vec_dot_x2_q4_0(const void* w, const void* xq, int64_t n) {
    return dot_one<Block32Kernel<Q4_0Pair>>(w, xq, n);
}
void vec_dot_x2_cols_q4_0(const void* w, const void* xq, size_t stride, int64_t n, int ncols, float* out) {
    dot_cols<Block32Kernel<Q4_0Pair>>(w, xq, stride, n, ncols, out);
}

float vec_dot_x2_q5_0(const void* w, const void* xq, int64_t n) {
    return dot_one<Block32Kernel<Q5_0Pair>>(w, xq, n);
}
void vec_dot_x2_cols_q5_0(const void* w, const void* xq, size_t stride, int64_t n, int ncols, float* out) {
    dot_cols<Block32Kernel<Q5_0Pair>>(w, xq, stride, n, ncols, out);
}

float vec_dot_x2_q4_k(const void* w, const void* xq, int64_t n) {
    return dot_one<KType1Kernel<BlockQ4K>>(w, xq, n);
}
void vec_dot_x2_cols_q4_k(const void* w, const void* xq, size_t stride, int64_t n, int ncols, float* out) {
    dot_cols<KType1Kernel<BlockQ4K>>(w, xq, stride, n, ncols, out);
}

float vec_dot_x2_q5_k(const void* w, const void* xq, int64_t n) {
    return dot_one<KType1Kernel<BlockQ5K>>(w, xq, n);
}
void vec_dot_x2_cols_q5_k(const void* w, const void* xq, size_t stride, int64_t n, int ncols, float* out) {
    dot_cols<KType1Kernel<BlockQ5K>>(w, xq, stride, n, ncols, out);
}

float vec_dot_x2_q6_k(const void* w, const void* xq, int64_t n) {
    return dot_one<Q6KKernel>(w, xq, n);
}
void vec_dot_x2_cols_q6_k(const void* w, const void* xq, size_t stride, int64_t n, int ncols, float* out) {
    dot_cols<Q6KKernel>(w, xq, stride, n, ncols, out);
}

}  // namespace minfer::quants::avx512
