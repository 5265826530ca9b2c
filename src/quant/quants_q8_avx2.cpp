// AVX2 int8-activation kernels (twins of quants_q8.cpp): activation quantizers and quantized-weight .
// quantized-activation dots with _mm256_maddubs_epi16 (unsigned weight levels x signed activations,
// pairs summed in 16 bits without saturation: level <= 63, |x| <= 127) and _mm256_madd_epi16. Q8_0's
// signed levels go through the sign trick, |w| . (x * sign(w)); the 4/5-bit types dot their unsigned
// levels and add their offset or minimum as a per-block scalar term (times the activation block sum).
// The int8x2 dots (BlockQ8X2) run the same unpacked levels against hi and lo and merge the two sums in
// integers, 254 * sum(w hi) + sum(w lo), before one f32 scaling per 32-element block; there Q4_0 / Q5_0
// subtract their offset from each int32 lane (the activation row's x2_offsets) instead.
// The int8x2 kernels are templates over the number of activation rows (columns) dotted with one weight
// row: vec_dot_x2 is the one-column instance, vec_dot_x2_cols the others (the same bits per column).
//
// This file is compiled with -mavx2 -mfma -mf16c: it must not call inline helpers of shared headers
// (such as util/fp16.h), whose AVX2-compiled copies the linker could hand to baseline code.
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "quant/quants.h"
#include "quant/quants_avx2_util.h"
#include "quant/quants_cols.h"
#include "quant/quants_impl.h"
#include "util/simd_avx2.h"

namespace minfer::quants::avx2 {
namespace {

using simd::half_to_float;
using simd::hsum;
using simd::k_scales_mins;
using simd::prefetch_ahead;
using simd::q6_k_groups;

inline float hmax(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

// ---- Activation quantizers: d = max |x| / 127, q = round-half-even(x * (1 / d)) as the reference ----

// Four vectors of 8 int32 levels (|q| <= 127) as 32 bytes in element order: the packs interleave
// 128-bit lanes, the permutation restores the order.
inline __m256i pack_levels(const __m256i q[4]) {
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Levels of 32 floats with inverse scale id, as 32 bytes in element order; *sum = their sum.
inline __m256i levels32(const float* x, __m256 id, int* sum) {
    __m256i q[4];
    for (int k = 0; k < 4; ++k) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), id);
        q[k] = _mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    *sum = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
    return pack_levels(q);
}

inline __m256 round_even(__m256 v) {
    return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

// The int8x2 levels of 32 floats with step d (as the reference: hi = round(x * ih), r = x - d * (254 hi)
// in one fused multiply-add, lo = round(r * il)); *sum = 254 * sum(hi) + sum(lo).
inline void levels32_x2(const float* x, float d, float ih, float il, int8_t* hi, int8_t* lo, int* sum) {
    __m256i h[4], l[4];
    for (int k = 0; k < 4; ++k) {
        const __m256 v = _mm256_loadu_ps(x + 8 * k);
        const __m256 hf = round_even(_mm256_mul_ps(v, _mm256_set1_ps(ih)));
        const __m256 r = _mm256_fnmadd_ps(_mm256_set1_ps(d), _mm256_mul_ps(hf, _mm256_set1_ps(254.0f)), v);
        h[k] = _mm256_cvtps_epi32(hf);
        l[k] = _mm256_cvtps_epi32(round_even(_mm256_mul_ps(r, _mm256_set1_ps(il))));
    }
    const __m256i sh = _mm256_add_epi32(_mm256_add_epi32(h[0], h[1]), _mm256_add_epi32(h[2], h[3]));
    const __m256i sl = _mm256_add_epi32(_mm256_add_epi32(l[0], l[1]), _mm256_add_epi32(l[2], l[3]));
    *sum = 254 * hsum_i32(sh) + hsum_i32(sl);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi), pack_levels(h));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo), pack_levels(l));
}

inline float abs_max(const float* x, int n) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps();
    for (int l = 0; l < n; l += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + l)));
    return hmax(m);
}

inline float inverse_scale(float d) {
    return d != 0.0f ? 1.0f / d : 0.0f;
}

// ---- 32-element weight blocks: each decoder returns the block's 32 products with x, in int32 lanes ----

// Nibble levels 0..15 in element order: low nibbles of qs[0..16) then the high nibbles.
inline __m256i nibbles32(const uint8_t* qs) {
    const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
    return _mm256_and_si256(_mm256_srlv_epi32(v, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)),
                            _mm256_set1_epi8(0xF));
}

// 0xFF in byte e where bit e of the little-endian word qh is set, else 0.
inline __m256i bits32(const uint8_t* qh) {
    uint32_t w;
    std::memcpy(&w, qh, sizeof w);
    const __m256i spread =
        _mm256_shuffle_epi8(_mm256_set1_epi32(int(w)),
                            _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
    const __m256i others = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);  // all bits but bit (e % 8)
    return _mm256_cmpeq_epi8(_mm256_or_si256(spread, others), _mm256_set1_epi8(-1));
}

// Levels 0..31 of a Q5_0 / Q5_1 block: the nibble plus 16 where the fifth bit is set.
inline __m256i q5_levels(const uint8_t* qs, const uint8_t* qh) {
    return _mm256_or_si256(nibbles32(qs), _mm256_and_si256(bits32(qh), _mm256_set1_epi8(0x10)));
}

// Weight levels of a block as 32 bytes in element order. Q8_0's are signed (the sign trick dots them);
// the other types dot their unsigned levels 0..15 / 0..31 and move the rest into the scalar minimum
// term: Q4_0 / Q5_0 values are d * q - 8 d / - 16 d, so their offset term is -8 d_w * s_x / -16 d_w * s_x
// (int8x2: integer lane offsets, kOffsetShift); Q4_1 / Q5_1 have m_w * s_x.
struct Q8_0Dot {
    using Block = BlockQ8_0;
    static constexpr bool kSigned = true;
    static __m256i levels(const Block& b) { return load32(b.qs); }
};

struct Q4_0Dot {
    using Block = BlockQ4_0;
    static constexpr bool kSigned = false;
    static constexpr int kOffsetShift = 2;  // level offset 8 = x2_offsets' 32 >> 2
    static __m256i levels(const Block& b) { return nibbles32(b.qs); }
    static float min(const Block& b) { return -8.0f * half_to_float(b.d); }
};

struct Q5_0Dot {
    using Block = BlockQ5_0;
    static constexpr bool kSigned = false;
    static constexpr int kOffsetShift = 1;  // level offset 16 = x2_offsets' 32 >> 1
    static __m256i levels(const Block& b) { return q5_levels(b.qs, b.qh); }
    static float min(const Block& b) { return -16.0f * half_to_float(b.d); }
};

struct Q4_1Dot {
    using Block = BlockQ4_1;
    static constexpr bool kSigned = false;
    static __m256i levels(const Block& b) { return nibbles32(b.qs); }
    static float min(const Block& b) { return half_to_float(b.m); }
};

struct Q5_1Dot {
    using Block = BlockQ5_1;
    static constexpr bool kSigned = false;
    static __m256i levels(const Block& b) { return q5_levels(b.qs, b.qh); }
    static float min(const Block& b) { return half_to_float(b.m); }
};

// d_w * d_x * sum(q_w q_x) of a block into acc, its minimum term (if any) into the scalar sum.
template <class Dec>
inline void block32_step(const typename Dec::Block& b, const BlockQ8A& y, __m256& acc, float& summ) {
    const __m256i w = Dec::levels(b), x = load32(y.qs);
    const __m256 p = _mm256_cvtepi32_ps(Dec::kSigned ? dot_i8i8(w, x) : dot_u8i8(w, x));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(half_to_float(b.d) * y.d), p, acc);
    if constexpr (requires { Dec::min(b); }) summ = fma1(Dec::min(b), y.s, summ);
}

// int8x2: sum_l w_l (254 hi_l + lo_l) of 32 levels w (signed ones through the sign trick, |w| computed
// once), four levels per int32 lane. No overflow: the byte-pair sums are at most 2 * 128 * 127, so a lane
// stays below 2 * 255 * 32512 < 2^31.
template <bool kSigned>
inline __m256i x2_sum(__m256i w, const BlockQ8X2& y) {
    __m256i a = w, hi = load32(y.hi), lo = load32(y.lo);
    if constexpr (kSigned)
        a = _mm256_sign_epi8(w, w), hi = _mm256_sign_epi8(hi, w), lo = _mm256_sign_epi8(lo, w);
    return _mm256_add_epi32(_mm256_madd_epi16(_mm256_set1_epi16(254), _mm256_maddubs_epi16(a, hi)),
                            _mm256_madd_epi16(_mm256_set1_epi16(1), _mm256_maddubs_epi16(a, lo)));
}

// int8x2: the levels q (unpacked once), their merged sum scaled by d_w * d; the minimum term as for int8,
// with the block sum of the represented x.
template <class Dec>
inline void block32_step(const typename Dec::Block& b, __m256i q, const BlockQ8X2& y, __m256& acc,
                         float& summ) {
    const __m256i p = x2_sum<Dec::kSigned>(q, y);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(half_to_float(b.d) * y.d), _mm256_cvtepi32_ps(p), acc);
    if constexpr (requires { Dec::min(b); }) summ = fma1(Dec::min(b), y.s, summ);
}

// int8x2 lanes of (q - (32 >> kShift)) * x for unsigned levels q: the merged sums minus the block's
// activation offsets (x2_offsets, 32 times each lane's activation sum) shifted to the level offset.
// Exact: the offsets are multiples of 32.
template <int kShift>
inline __m256i x2_sum_offset(__m256i q, const BlockQ8X2& y, const int32_t* offsets) {
    __m256i off = load32(offsets);
    if constexpr (kShift > 0) off = _mm256_srai_epi32(off, kShift);
    return _mm256_sub_epi32(x2_sum<false>(q, y), off);
}

// int8x2, Q4_0 / Q5_0: the lanes of (q - 8) * x / (q - 16) * x straight from the integer offsets, so no
// scalar minimum term.
template <class Dec>
inline void block32_step(const typename Dec::Block& b, __m256i q, const BlockQ8X2& y, const int32_t* offsets,
                         __m256& acc) {
    const __m256i p = x2_sum_offset<Dec::kOffsetShift>(q, y, offsets);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(half_to_float(b.d) * y.d), _mm256_cvtepi32_ps(p), acc);
}

// Four independent accumulator chains (vector and scalar), blocks 4k + j into chain j.
template <class Dec>
float block32_vec_dot(const void* w, const void* xq, int64_t n) {
    const auto* b = static_cast<const typename Dec::Block*>(w);
    const auto* y = static_cast<const BlockQ8A*>(xq);
    const int64_t nb = n / kQK0;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(),
           a3 = _mm256_setzero_ps();
    float m0 = 0.0f, m1 = 0.0f, m2 = 0.0f, m3 = 0.0f;
    int64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
        prefetch_ahead<4 * sizeof(b[i])>(b + i);
        block32_step<Dec>(b[i], y[i], a0, m0);
        block32_step<Dec>(b[i + 1], y[i + 1], a1, m1);
        block32_step<Dec>(b[i + 2], y[i + 2], a2, m2);
        block32_step<Dec>(b[i + 3], y[i + 3], a3, m3);
    }
    for (; i < nb; ++i) block32_step<Dec>(b[i], y[i], a0, m0);
    return hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3))) + ((m0 + m1) + (m2 + m3));
}

// int8x2, per column the int8 dot's four chains: block i's levels unpacked once, then its step for each
// column (for the signed levels the compiler computes |w| once too).
template <class Dec, int NC>
void block32_x2_dot(const void* w, Cols xs, int64_t n, float* out) {
    const auto* b = static_cast<const typename Dec::Block*>(w);
    const int64_t nb = n / kQK0;
    const BlockQ8X2* y[NC];
    const int32_t* offsets[NC];
    __m256 acc[NC][4];
    float summ[NC][4];
    for (int c = 0; c < NC; ++c) {
        y[c] = static_cast<const BlockQ8X2*>(xs[c]), offsets[c] = x2_offsets(xs[c], n);
        for (int j = 0; j < 4; ++j) acc[c][j] = _mm256_setzero_ps(), summ[c][j] = 0.0f;
    }
    const auto step = [&](int64_t i, int j) {
        const typename Dec::Block& bi = b[i];
        const __m256i q = Dec::levels(bi);
        for (int c = 0; c < NC; ++c) {
            if constexpr (requires { Dec::kOffsetShift; })
                block32_step<Dec>(bi, q, y[c][i], offsets[c] + 8 * i, acc[c][j]);
            else
                block32_step<Dec>(bi, q, y[c][i], acc[c][j], summ[c][j]);
        }
    };
    int64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
        prefetch_ahead<4 * sizeof(b[i])>(b + i);
        step(i, 0), step(i + 1, 1), step(i + 2, 2), step(i + 3, 3);
    }
    for (; i < nb; ++i) step(i, 0);
    for (int c = 0; c < NC; ++c) {
        const __m256* a = acc[c];
        const float* m = summ[c];
        out[c] = hsum(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3]))) +
                 ((m[0] + m[1]) + (m[2] + m[3]));
    }
}

// ---- K-quants: exact integer sums per super-block, folded in as the reference does ----

// 16-bit lanes all holding 16-bit element j of a vector (ggml's get_scale_shuffle_k4).
inline __m256i broadcast_i16(__m256i v, int j) {
    return _mm256_shuffle_epi8(v, _mm256_set1_epi16(int16_t((2 * j) | ((2 * j + 1) << 8))));
}

// Bit j of each byte of hb moved to bit 4 (the fifth bit of a Q5_K level), other bits cleared.
inline __m256i fifth_bit(__m256i hb, int j) {
    const __m256i v = j <= 4 ? _mm256_slli_epi16(hb, 4 - j) : _mm256_srli_epi16(hb, j - 4);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

// sum_j m_j * (bsums[2j] + bsums[2j + 1]).
inline int k_min_sum(__m128i mins, const int16_t* bsums) {
    const __m256i bs = load32(bsums);
    const __m128i pairs = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    return hsum_i32(_mm_madd_epi16(mins, pairs));
}

// Q4_K / Q5_K: sub-blocks 2p and 2p + 1 are the low and high nibbles of qs[32p..32p+32); Q5_K adds bits
// 2p and 2p + 1 of qh as 16. Returns sum_j sc_j * sum_l q_l x_l.
template <class Block>
inline int k_type1_scaled_sum(const Block& b, const int8_t* x, __m128i scales128) {
    const __m256i scales = _mm256_broadcastsi128_si256(scales128);
    const __m256i m4 = _mm256_set1_epi8(0xF);
    __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
        const __m256i q = load32(b.qs + 32 * p);
        __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if constexpr (std::is_same_v<Block, BlockQ5K>) {
            const __m256i hb = load32(b.qh);
            lo = _mm256_or_si256(lo, fifth_bit(hb, 2 * p));
            hi = _mm256_or_si256(hi, fifth_bit(hb, 2 * p + 1));
        }
        const __m256i plo = _mm256_maddubs_epi16(lo, load32(x + 64 * p));
        const __m256i phi = _mm256_maddubs_epi16(hi, load32(x + 64 * p + 32));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(broadcast_i16(scales, 2 * p), plo));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(broadcast_i16(scales, 2 * p + 1), phi));
    }
    return hsum_i32(sumi);
}

template <class Block>
float k_type1_vec_dot(const void* w, const void* xq, int64_t n) {
    const auto* b = static_cast<const Block*>(w);
    const auto* y = static_cast<const BlockQ8K*>(xq);
    float acc = 0.0f;
    for (int64_t i = 0; i < n / kQKK; ++i) {
        __m128i scales, mins;
        k_scales_mins(b[i].scales, &scales, &mins);
        const int isum = k_type1_scaled_sum(b[i], y[i].qs, scales);
        const int msum = k_min_sum(mins, y[i].bsums);
        const float d = y[i].d * half_to_float(b[i].d), dmin = -y[i].d * half_to_float(b[i].dmin);
        acc = fma1(dmin, float(msum), fma1(d, float(isum), acc));
    }
    return acc;
}

// int8x2 step of a K-quant group: p, the merged integer sums of 32 levels against activation block y
// (four levels per int32 lane), times scale * y.d into acc, scale holding d_w times the lane's sub-block
// scale (exact in f32), so no integer multiply applies the sub-block scales.
inline void x2_scaled_step(__m256i p, __m256 scale, const BlockQ8X2& y, __m256& acc) {
    acc = _mm256_fmadd_ps(_mm256_mul_ps(scale, _mm256_set1_ps(y.d)), _mm256_cvtepi32_ps(p), acc);
}

// Q4_K / Q5_K against int8x2: sub-block j of super-block i meets activation block 8i + j; the minimum
// terms -dmin * m_j (exact in f32) times the block sums s go into a third accumulator per column. The
// lane scales are x2_scaled_step's, d_w * sc_j times d_x, formed eight at a time from the steps and sums
// of the row's wide copy (x2_wide): the same products, an eighth of the multiplies and loads.
template <class Block, int NC>
void k_type1_vec_dot_x2(const void* w, Cols xs, int64_t n, float* out) {
    const auto* b = static_cast<const Block*>(w);
    const __m256i m4 = _mm256_set1_epi8(0xF);
    X2Wide x[NC];
    __m256 acc0[NC], acc1[NC], accm[NC];
    for (int c = 0; c < NC; ++c) {
        x[c] = x2_wide(xs[c], n);
        acc0[c] = acc1[c] = accm[c] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < n / kQKK; ++i) {
        prefetch_ahead<sizeof(Block)>(b + i);
        __m128i scales, mins;
        k_scales_mins(b[i].scales, &scales, &mins);
        const __m256 ds = _mm256_mul_ps(_mm256_set1_ps(half_to_float(b[i].d)),
                                        _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(scales)));
        alignas(32) float dsx[NC][8];  // d_w * sc_j * d_x of sub-block j
        for (int c = 0; c < NC; ++c)
            _mm256_store_ps(dsx[c], _mm256_mul_ps(ds, _mm256_loadu_ps(x[c].d + 8 * i)));
#pragma GCC unroll 4
        for (int p = 0; p < 4; ++p) {
            const __m256i q = load32(b[i].qs + 32 * p);
            __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if constexpr (std::is_same_v<Block, BlockQ5K>) {
                const __m256i hb = load32(b[i].qh);
                lo = _mm256_or_si256(lo, fifth_bit(hb, 2 * p));
                hi = _mm256_or_si256(hi, fifth_bit(hb, 2 * p + 1));
            }
            for (int c = 0; c < NC; ++c) {
                const BlockQ8X2* yi = static_cast<const BlockQ8X2*>(xs[c]) + 8 * i;
                acc0[c] = _mm256_fmadd_ps(_mm256_broadcast_ss(dsx[c] + 2 * p),
                                          _mm256_cvtepi32_ps(x2_sum<false>(lo, yi[2 * p])), acc0[c]);
                acc1[c] = _mm256_fmadd_ps(_mm256_broadcast_ss(dsx[c] + 2 * p + 1),
                                          _mm256_cvtepi32_ps(x2_sum<false>(hi, yi[2 * p + 1])), acc1[c]);
            }
        }
        const __m256 m = _mm256_mul_ps(_mm256_set1_ps(-half_to_float(b[i].dmin)),
                                       _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(mins)));
        for (int c = 0; c < NC; ++c) accm[c] = _mm256_fmadd_ps(m, _mm256_loadu_ps(x[c].s + 8 * i), accm[c]);
    }
    for (int c = 0; c < NC; ++c) out[c] = hsum(_mm256_add_ps(_mm256_add_ps(acc0[c], acc1[c]), accm[c]));
}

// Scales of Q6_K sub-blocks 2G and 2G + 1 (G = 4h + k) over 16-bit lanes 0..7 and 8..15.
inline __m256i q6_k_group_scales(__m128i sc8, int h, int k) {
    const int s = 2 * (4 * h + k);
    const __m128i pick = _mm_set_epi64x(0x0101010101010101 * (s + 1), 0x0101010101010101 * s);
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, pick));
}

// sum_k sc_k * sum_l q_l x_l - 32 * sum_k sc_k * bsums[k] of one super-block, levels q in 0..63.
inline int q6_k_sum(const BlockQ6K& b, const BlockQ8K& y) {
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
    const int msum = hsum_i32(_mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), load32(y.bsums)));
    __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
        __m256i g[4];
        q6_k_groups(b.ql + 64 * h, b.qh + 32 * h, g);
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
            const __m256i scale = q6_k_group_scales(sc8, h, k);
            const __m256i p = _mm256_maddubs_epi16(g[k], load32(y.qs + 128 * h + 32 * k));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(scale, p));
        }
    }
    return hsum_i32(sumi) - 32 * msum;
}

// d_w * the scale of each 16-element sub-block of a Q6_K super-block.
inline void q6_k_scales(const BlockQ6K& b, float ds[16]) {
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
    const __m256 dw = _mm256_set1_ps(half_to_float(b.d));
    _mm256_store_ps(ds, _mm256_mul_ps(dw, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc8))));
    _mm256_store_ps(ds + 8,
                    _mm256_mul_ps(dw, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc8, 8)))));
}

// Q6_K against int8x2: group G (32 elements) of super-block i meets activation block 8i + G. Its levels
// 0..63 multiply x unsigned, and each int32 lane subtracts its activation offset (x2_sum_offset), which
// leaves exactly the lane's sum of (q - 32) * x.
template <int NC>
void q6_k_vec_dot_x2(const void* w, Cols xs, int64_t n, float* out) {
    const auto* b = static_cast<const BlockQ6K*>(w);
    const BlockQ8X2* y[NC];
    const int32_t* offsets[NC];
    __m256 acc0[NC], acc1[NC];
    for (int c = 0; c < NC; ++c) {
        y[c] = static_cast<const BlockQ8X2*>(xs[c]), offsets[c] = x2_offsets(xs[c], n);
        acc0[c] = acc1[c] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < n / kQKK; ++i) {
        prefetch_ahead<sizeof(BlockQ6K)>(b + i);
        alignas(32) float ds[16];
        q6_k_scales(b[i], ds);
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
            __m256i g[4];
            q6_k_groups(b[i].ql + 64 * h, b[i].qh + 32 * h, g);
#pragma GCC unroll 4
            for (int k = 0; k < 4; ++k) {
                const int64_t a = 8 * i + 4 * h + k;  // activation block
                const int s = 2 * (4 * h + k);        // sub-blocks s (lanes 0..3) and s + 1 (lanes 4..7)
                const __m256 pair = _mm256_castps128_ps256(
                    _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(ds + s))));
                const __m256 scale =
                    _mm256_permutevar8x32_ps(pair, _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
                for (int c = 0; c < NC; ++c)
                    x2_scaled_step(x2_sum_offset<0>(g[k], y[c][a], offsets[c] + 8 * a), scale, y[c][a],
                                   k & 1 ? acc1[c] : acc0[c]);
            }
        }
    }
    for (int c = 0; c < NC; ++c) out[c] = hsum(_mm256_add_ps(acc0[c], acc1[c]));
}

// The int8x2 kernels by column count (run<NC>), for the table's entry points.
template <class Dec>
struct Block32Kernel {
    template <int NC>
    static void run(const void* w, Cols xs, int64_t n, float* out) {
        block32_x2_dot<Dec, NC>(w, xs, n, out);
    }
};

template <class Block>
struct KType1Kernel {
    template <int NC>
    static void run(const void* w, Cols xs, int64_t n, float* out) {
        k_type1_vec_dot_x2<Block, NC>(w, xs, n, out);
    }
};

struct Q6KKernel {
    template <int NC>
    static void run(const void* w, Cols xs, int64_t n, float* out) {
        q6_k_vec_dot_x2<NC>(w, xs, n, out);
    }
};

}  // namespace

void quantize_q8a(const float* x, void* dst, int64_t n) {
    auto* b = static_cast<BlockQ8A*>(dst);
    for (int64_t i = 0; i < n / kQK0; ++i, x += kQK0) {
        const float d = abs_max(x, kQK0) / 127.0f;
        int sum;
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(b[i].qs),
                            levels32(x, _mm256_set1_ps(inverse_scale(d)), &sum));
        b[i].d = d;
        b[i].s = d * float(sum);
    }
}

void quantize_q8k(const float* x, void* dst, int64_t n) {
    auto* b = static_cast<BlockQ8K*>(dst);
    for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
        const float d = abs_max(x, kQKK) / 127.0f;
        const __m256 id = _mm256_set1_ps(inverse_scale(d));
        for (int c = 0; c < kQKK / 32; ++c) {
            int sum;
            const __m256i q = levels32(x + 32 * c, id, &sum);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(b[i].qs + 32 * c), q);
            // Sums of 16 levels: byte pairs, then 16-bit pairs, then the two 64-bit halves of each lane.
            const __m256i s4 =
                _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1));
            const __m256i s8 = _mm256_hadd_epi32(s4, s4);
            const __m256i s16 = _mm256_hadd_epi32(s8, s8);
            b[i].bsums[2 * c] = int16_t(_mm256_cvtsi256_si32(s16));
            b[i].bsums[2 * c + 1] = int16_t(_mm_cvtsi128_si32(_mm256_extracti128_si256(s16, 1)));
        }
        b[i].d = d;
    }
}

float vec_dot_q8_0(const void* w, const void* xq, int64_t n) {
    return block32_vec_dot<Q8_0Dot>(w, xq, n);
}
float vec_dot_q4_0(const void* w, const void* xq, int64_t n) {
    return block32_vec_dot<Q4_0Dot>(w, xq, n);
}
float vec_dot_q4_1(const void* w, const void* xq, int64_t n) {
    return block32_vec_dot<Q4_1Dot>(w, xq, n);
}
float vec_dot_q5_0(const void* w, const void* xq, int64_t n) {
    return block32_vec_dot<Q5_0Dot>(w, xq, n);
}
float vec_dot_q5_1(const void* w, const void* xq, int64_t n) {
    return block32_vec_dot<Q5_1Dot>(w, xq, n);
}
float vec_dot_q4_k(const void* w, const void* xq, int64_t n) {
    return k_type1_vec_dot<BlockQ4K>(w, xq, n);
}
float vec_dot_q5_k(const void* w, const void* xq, int64_t n) {
    return k_type1_vec_dot<BlockQ5K>(w, xq, n);
}

float vec_dot_q6_k(const void* w, const void* xq, int64_t n) {
    const auto* b = static_cast<const BlockQ6K*>(w);
    const auto* y = static_cast<const BlockQ8K*>(xq);
    float acc = 0.0f;
    for (int64_t i = 0; i < n / kQKK; ++i)
        acc = fma1(y[i].d * half_to_float(b[i].d), float(q6_k_sum(b[i], y[i])), acc);
    return acc;
}

void quantize_q8x2(const float* x, void* dst, int64_t n) {
    auto* b = static_cast<BlockQ8X2*>(dst);
    for (int64_t i = 0; i < n / kQK0; ++i, x += kQK0) {
        const float d = abs_max(x, kQK0) / (127.0f * 254.0f);
        int sum;
        levels32_x2(x, d, inverse_scale(254.0f * d), inverse_scale(d), b[i].hi, b[i].lo, &sum);
        b[i].d = d;
        b[i].s = d * float(sum);
    }
    x2_fill_tail(dst, n);
}

float vec_dot_x2_q8_0(const void* w, const void* xq, int64_t n) {
    return dot_one<Block32Kernel<Q8_0Dot>>(w, xq, n);
}
void vec_dot_x2_cols_q8_0(const void* w, const void* xq, size_t stride, int64_t n, int ncols, float* out) {
    dot_cols<Block32Kernel<Q8_0Dot>>(w, xq, stride, n, ncols, out);
}
float vec_dot_x2_q4_0(const void* w, const void* xq, int64_t n) {
    return dot_one<Block32Kernel<Q4_0Dot>>(w, xq, n);
}
void vec_dot_x2_cols_q4_0(const void* w, const void* xq, size_t stride, int64_t n, int ncols, float* out) {
    dot_cols<Block32Kernel<Q4_0Dot>>(w, xq, stride, n, ncols, out);
}
float vec_dot_x2_q4_1(const void* w, const void* xq, int64_t n) {
    return dot_one<Block32Kernel<Q4_1Dot>>(w, xq, n);
}
void vec_dot_x2_cols_q4_1(const void* w, const void* xq, size_t stride, int64_t n, int ncols, float* out) {
    dot_cols<Block32Kernel<Q4_1Dot>>(w, xq, stride, n, ncols, out);
}
float vec_dot_x2_q5_0(const void* w, const void* xq, int64_t n) {
    return dot_one<Block32Kernel<Q5_0Dot>>(w, xq, n);
}
void vec_dot_x2_cols_q5_0(const void* w, const void* xq, size_t stride, int64_t n, int ncols, float* out) {
    dot_cols<Block32Kernel<Q5_0Dot>>(w, xq, stride, n, ncols, out);
}
float vec_dot_x2_q5_1(const void* w, const void* xq, int64_t n) {
    return dot_one<Block32Kernel<Q5_1Dot>>(w, xq, n);
}
void vec_dot_x2_cols_q5_1(const void* w, const void* xq, size_t stride, int64_t n, int ncols, float* out) {
    dot_cols<Block32Kernel<Q5_1Dot>>(w, xq, stride, n, ncols, out);
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

}  // namespace minfer::quants::avx2
