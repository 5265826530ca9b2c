// AVX2/FMA/F16C dequantization and quantized-row . float-vector dot products (the decode matrix-vector
// kernel). Weights are expanded to f32 in registers, 8 at a time, and multiplied into several independent
// f32 accumulators; x is never quantized. Dequantized values are bit-identical to the scalar
// reference in quants.cpp (same operations in the same order, fp16 converted exactly by F16C).
//
// This file is compiled with -mavx2 -mfma -mf16c: it must not call inline helpers of shared headers
// (such as util/fp16.h), whose AVX2-compiled copies the linker could hand to baseline code.
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "quant/quants_avx2_util.h"
#include "quant/quants_impl.h"
#include "util/simd_avx2.h"

namespace minfer::quants::avx2 {
namespace {

using simd::half_to_float;
using simd::hsum;
using simd::prefetch_ahead;

inline __m256i u8x8(const uint8_t* p) {  // 8 bytes zero-extended to 32-bit lanes
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

inline __m256i i8x8(const int8_t* p) {  // 8 bytes sign-extended to 32-bit lanes
    return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// ---- F32 / F16 / BF16: one element per "block" ----

struct F32Src {
    static constexpr size_t kBytes = 4;
    static __m256 load8(const void* w, int64_t i) {
        return _mm256_loadu_ps(static_cast<const float*>(w) + i);
    }
    static float load1(const void* w, int64_t i) { return static_cast<const float*>(w)[i]; }
};

struct F16Src {
    static constexpr size_t kBytes = 2;
    static __m256 load8(const void* w, int64_t i) {
        const auto* p = static_cast<const uint16_t*>(w) + i;
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    }
    static float load1(const void* w, int64_t i) { return half_to_float(static_cast<const uint16_t*>(w)[i]); }
};

struct BF16Src {
    static constexpr size_t kBytes = 2;
    static __m256 load8(const void* w, int64_t i) {
        const auto* p = static_cast<const uint16_t*>(w) + i;
        const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    }
    static float load1(const void* w, int64_t i) {
        const uint32_t bits = uint32_t(static_cast<const uint16_t*>(w)[i]) << 16;
        float f;
        std::memcpy(&f, &bits, 4);
        return f;
    }
};

template <class Src>
void dense_to_float(const void* w, float* dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, Src::load8(w, i));
    for (; i < n; ++i) dst[i] = Src::load1(w, i);
}

template <class Src>
float dense_dot(const void* w, const float* x, int64_t n) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        prefetch_ahead<32 * Src::kBytes>(static_cast<const char*>(w) + i * Src::kBytes);
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k)
            acc[k] = _mm256_fmadd_ps(Src::load8(w, i + 8 * k), _mm256_loadu_ps(x + i + 8 * k), acc[k]);
    }
    for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(Src::load8(w, i), _mm256_loadu_ps(x + i), acc[0]);
    float s = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; ++i) s += Src::load1(w, i) * x[i];
    return s;
}

// ---- Q8_0 / Q4_0 / Q5_0: 32-element blocks with one fp16 scale; Q4_1 / Q5_1 add an fp16 minimum ----
// A decoder turns a block into its levels q[k] = elements 8k..8k+8 as floats (value = d * q, or
// fma(q, d, m) for the types with a minimum).

// Nibble levels 0..15 of a Q4/Q5 block: elements 0..15 are the low nibbles of qs[0..16), 16..31 the high.
inline void nibble_levels(const uint8_t* qs, __m256i q[4]) {
    const __m256i lo = u8x8(qs), hi = u8x8(qs + 8);
    const __m256i mask = _mm256_set1_epi32(0xF);
    q[0] = _mm256_and_si256(lo, mask);
    q[1] = _mm256_and_si256(hi, mask);
    q[2] = _mm256_srli_epi32(lo, 4);
    q[3] = _mm256_srli_epi32(hi, 4);
}

// Q5_0 / Q5_1: bit e of the 32-bit word qh, moved to bit 4, joins the nibble of element e. Each lane
// shifts the broadcast word right by its own element index.
inline void add_fifth_bits(const uint8_t* qh_bytes, __m256i q[4]) {
    uint32_t qh;
    std::memcpy(&qh, qh_bytes, sizeof qh);
    const __m256i h = _mm256_set1_epi32(int(qh));
    const __m256i one = _mm256_set1_epi32(1);
    __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
        const __m256i bit = _mm256_and_si256(_mm256_srlv_epi32(h, idx), one);
        q[k] = _mm256_or_si256(q[k], _mm256_slli_epi32(bit, 4));
        idx = _mm256_add_epi32(idx, _mm256_set1_epi32(8));
    }
}

struct Q8_0Dec {
    using Block = BlockQ8_0;
    static void levels(const Block& b, __m256 q[4]) {
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) q[k] = to_ps(i8x8(b.qs + 8 * k));
    }
};

struct Q4_0Dec {
    using Block = BlockQ4_0;
    static void levels(const Block& b, __m256 q[4]) {
        __m256i v[4];
        nibble_levels(b.qs, v);
        const __m256i eight = _mm256_set1_epi32(8);
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) q[k] = to_ps(_mm256_sub_epi32(v[k], eight));
    }
};

struct Q5_0Dec {
    using Block = BlockQ5_0;
    static void levels(const Block& b, __m256 q[4]) {
        __m256i v[4];
        nibble_levels(b.qs, v);
        add_fifth_bits(b.qh, v);
        const __m256i sixteen = _mm256_set1_epi32(16);
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) q[k] = to_ps(_mm256_sub_epi32(v[k], sixteen));
    }
};

struct Q4_1Dec {
    using Block = BlockQ4_1;
    static void levels(const Block& b, __m256 q[4]) {
        __m256i v[4];
        nibble_levels(b.qs, v);
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) q[k] = to_ps(v[k]);
    }
};

struct Q5_1Dec {
    using Block = BlockQ5_1;
    static void levels(const Block& b, __m256 q[4]) {
        __m256i v[4];
        nibble_levels(b.qs, v);
        add_fifth_bits(b.qh, v);
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) q[k] = to_ps(v[k]);
    }
};

template <class Dec>
void block32_to_float(const void* w, float* dst, int64_t n) {
    const auto* b = static_cast<const typename Dec::Block*>(w);
    for (int64_t i = 0; i < n / kQK0; ++i, dst += kQK0) {
        __m256 q[4];
        Dec::levels(b[i], q);
        const __m256 d = _mm256_set1_ps(half_to_float(b[i].d));
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) _mm256_storeu_ps(dst + 8 * k, _mm256_mul_ps(q[k], d));
    }
}

// sum_l q_l x_l of one block, in two independent halves.
template <class Dec>
inline __m256 block32_levels_dot(const typename Dec::Block& b, const float* x) {
    __m256 q[4];
    Dec::levels(b, q);
    const __m256 s0 = _mm256_fmadd_ps(q[2], _mm256_loadu_ps(x + 16), _mm256_mul_ps(q[0], _mm256_loadu_ps(x)));
    const __m256 s1 =
        _mm256_fmadd_ps(q[3], _mm256_loadu_ps(x + 24), _mm256_mul_ps(q[1], _mm256_loadu_ps(x + 8)));
    return _mm256_add_ps(s0, s1);
}

template <class Dec>
float block32_dot(const void* w, const float* x, int64_t n) {
    const auto* b = static_cast<const typename Dec::Block*>(w);
    const int64_t nb = n / kQK0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        prefetch_ahead<2 * sizeof(b[i])>(b + i);
        const __m256 s0 = block32_levels_dot<Dec>(b[i], x + i * kQK0);
        const __m256 s1 = block32_levels_dot<Dec>(b[i + 1], x + (i + 1) * kQK0);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(half_to_float(b[i].d)), s0, acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(half_to_float(b[i + 1].d)), s1, acc1);
    }
    if (i < nb) {
        const __m256 s0 = block32_levels_dot<Dec>(b[i], x + i * kQK0);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(half_to_float(b[i].d)), s0, acc0);
    }
    return hsum(_mm256_add_ps(acc0, acc1));
}

// Q4_1 / Q5_1: weights fma(q, d, m) as in the scalar reference, bit for bit; the dot multiplies these
// dequantized weights into four accumulators (no d * sum(q x) + m * sum(x) split, whose two terms may
// cancel far beyond the rounding budget of sum |w x|).
template <class Dec>
void block32_min_to_float(const void* w, float* dst, int64_t n) {
    const auto* b = static_cast<const typename Dec::Block*>(w);
    for (int64_t i = 0; i < n / kQK0; ++i, dst += kQK0) {
        __m256 q[4];
        Dec::levels(b[i], q);
        const __m256 d = _mm256_set1_ps(half_to_float(b[i].d)), m = _mm256_set1_ps(half_to_float(b[i].m));
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) _mm256_storeu_ps(dst + 8 * k, _mm256_fmadd_ps(q[k], d, m));
    }
}

template <class Dec>
float block32_min_dot(const void* w, const float* x, int64_t n) {
    const auto* b = static_cast<const typename Dec::Block*>(w);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t i = 0; i < n / kQK0; ++i, x += kQK0) {
        prefetch_ahead<sizeof(b[i])>(b + i);
        __m256 q[4];
        Dec::levels(b[i], q);
        const __m256 d = _mm256_set1_ps(half_to_float(b[i].d)), m = _mm256_set1_ps(half_to_float(b[i].m));
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k)
            acc[k] = _mm256_fmadd_ps(_mm256_fmadd_ps(q[k], d, m), _mm256_loadu_ps(x + 8 * k), acc[k]);
    }
    return hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

// ---- K-quants: walkers of a 256-element super-block (walk_to_float / walk_dot, quants_avx2_util.h) ----

// d * sc_j and -(dmin * m_j) for all eight sub-blocks of a Q4_K/Q5_K super-block: k_scale_min done on
// four sub-blocks at once in 32-bit words. Bytes 0..3 (4..7) hold the scales (mins) of sub-blocks 0..3 in
// their low 6 bits; sub-blocks 4..7 take their low 4 bits from the nibbles of bytes 8..11 and their top
// 2 bits from the top of bytes 0..3 (scales) and 4..7 (mins).
inline void k_scales_mins(const uint8_t* s, float d, float dmin, float* scale, float* neg_min) {
    uint32_t w[3];
    std::memcpy(w, s, sizeof w);
    const uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, top2 = 0x30303030;
    const uint64_t sc = (w[0] & low6) | uint64_t((w[2] & low4) | ((w[0] >> 2) & top2)) << 32;
    const uint64_t mn = (w[1] & low6) | uint64_t(((w[2] >> 4) & low4) | ((w[1] >> 2) & top2)) << 32;
    const __m256 scv = to_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(sc))));
    const __m256 mnv = to_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(mn))));
    _mm256_storeu_ps(scale, _mm256_mul_ps(_mm256_set1_ps(d), scv));
    _mm256_storeu_ps(neg_min, _mm256_mul_ps(_mm256_set1_ps(-dmin), mnv));
}

// Q4_K / Q5_K: value = fma(d * sc_j, q, -(dmin * m_j)) as in the scalar reference. Levels 0..15 (0..31):
// sub-blocks 2p and 2p + 1 are the low and high nibbles of qs[32p..32p+32); Q5_K adds bits 2p and 2p + 1
// of qh as 16. Bytes are widened to 32-bit lanes straight from memory (one shuffle per 8 elements) and
// the bit fields extracted there.
template <class Block, class Sink>
inline void walk_k_type1(const Block& b, Sink& sink) {
    constexpr bool kQ5 = std::is_same_v<Block, BlockQ5K>;
    float scale[8], neg_min[8];
    k_scales_mins(b.scales, half_to_float(b.d), half_to_float(b.dmin), scale, neg_min);
    const __m256i mask = _mm256_set1_epi32(0xF), bit4 = _mm256_set1_epi32(16);
    __m256i qh4[4];  // Q5_K only: qh of elements 8c..8c+8 shifted up by 4, so (qh4 >> j) & 16 is bit j
    if constexpr (kQ5) {
        for (int c = 0; c < 4; ++c) qh4[c] = _mm256_slli_epi32(u8x8(b.qh + 8 * c), 4);
    }
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
        const __m256 d_lo = _mm256_set1_ps(scale[2 * p]), m_lo = _mm256_set1_ps(neg_min[2 * p]);
        const __m256 d_hi = _mm256_set1_ps(scale[2 * p + 1]), m_hi = _mm256_set1_ps(neg_min[2 * p + 1]);
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
            const __m256i v = u8x8(b.qs + 32 * p + 8 * c);
            __m256i lo = _mm256_and_si256(v, mask), hi = _mm256_srli_epi32(v, 4);
            if constexpr (kQ5) {
                lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_srli_epi32(qh4[c], 2 * p), bit4));
                hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_srli_epi32(qh4[c], 2 * p + 1), bit4));
            }
            sink(64 * p + 8 * c, _mm256_fmadd_ps(to_ps(lo), d_lo, m_lo));
            sink(64 * p + 32 + 8 * c, _mm256_fmadd_ps(to_ps(hi), d_hi, m_hi));
        }
    }
}

// Q6_K: value = (d * scales[e / 16]) * (q - 32). Per 128-element half, groups g = 0..3 of 32 take the
// low (g < 2) or high nibble of ql[32 (g & 1) + l] and bits 2g, 2g + 1 of qh[l]; the levels of 32
// elements are assembled at once in byte lanes, then widened in registers.
template <class Sink>
inline void walk_q6_k(const BlockQ6K& b, Sink& sink) {
    float scale[16];
    const __m256 d = _mm256_set1_ps(half_to_float(b.d));
    _mm256_storeu_ps(scale, _mm256_mul_ps(d, to_ps(i8x8(b.scales))));
    _mm256_storeu_ps(scale + 8, _mm256_mul_ps(d, to_ps(i8x8(b.scales + 8))));
    const __m256i bias = _mm256_set1_epi8(32);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
        __m256i g[4];
        simd::q6_k_groups(b.ql + 64 * h, b.qh + 32 * h, g);
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
            __m256i q[4];
            widen_signed(_mm256_sub_epi8(g[k], bias), q);
            const int e = 128 * h + 32 * k;
#pragma GCC unroll 4
            for (int i = 0; i < 4; ++i)
                sink(e + 8 * i, _mm256_mul_ps(to_ps(q[i]), _mm256_set1_ps(scale[e / 16 + i / 2])));
        }
    }
}

}  // namespace

void to_float_f32(const void* w, float* dst, int64_t n) {
    dense_to_float<F32Src>(w, dst, n);
}
void to_float_f16(const void* w, float* dst, int64_t n) {
    dense_to_float<F16Src>(w, dst, n);
}
void to_float_bf16(const void* w, float* dst, int64_t n) {
    dense_to_float<BF16Src>(w, dst, n);
}
void to_float_q8_0(const void* w, float* dst, int64_t n) {
    block32_to_float<Q8_0Dec>(w, dst, n);
}
void to_float_q4_0(const void* w, float* dst, int64_t n) {
    block32_to_float<Q4_0Dec>(w, dst, n);
}
void to_float_q4_1(const void* w, float* dst, int64_t n) {
    block32_min_to_float<Q4_1Dec>(w, dst, n);
}
void to_float_q5_0(const void* w, float* dst, int64_t n) {
    block32_to_float<Q5_0Dec>(w, dst, n);
}
void to_float_q5_1(const void* w, float* dst, int64_t n) {
    block32_min_to_float<Q5_1Dec>(w, dst, n);
}
void to_float_q4_k(const void* w, float* dst, int64_t n) {
    walk_to_float<BlockQ4K, kQKK, walk_k_type1<BlockQ4K, StoreSink>>(w, dst, n);
}
void to_float_q5_k(const void* w, float* dst, int64_t n) {
    walk_to_float<BlockQ5K, kQKK, walk_k_type1<BlockQ5K, StoreSink>>(w, dst, n);
}
void to_float_q6_k(const void* w, float* dst, int64_t n) {
    walk_to_float<BlockQ6K, kQKK, walk_q6_k<StoreSink>>(w, dst, n);
}

float dot_f32(const void* w, const float* x, int64_t n) {
    return dense_dot<F32Src>(w, x, n);
}
float dot_f16(const void* w, const float* x, int64_t n) {
    return dense_dot<F16Src>(w, x, n);
}
float dot_bf16(const void* w, const float* x, int64_t n) {
    return dense_dot<BF16Src>(w, x, n);
}
float dot_q8_0(const void* w, const float* x, int64_t n) {
    return block32_dot<Q8_0Dec>(w, x, n);
}
float dot_q4_0(const void* w, const float* x, int64_t n) {
    return block32_dot<Q4_0Dec>(w, x, n);
}
float dot_q4_1(const void* w, const float* x, int64_t n) {
    return block32_min_dot<Q4_1Dec>(w, x, n);
}
float dot_q5_0(const void* w, const float* x, int64_t n) {
    return block32_dot<Q5_0Dec>(w, x, n);
}
float dot_q5_1(const void* w, const float* x, int64_t n) {
    return block32_min_dot<Q5_1Dec>(w, x, n);
}
float dot_q4_k(const void* w, const float* x, int64_t n) {
    return walk_dot<BlockQ4K, kQKK, walk_k_type1<BlockQ4K, DotSink>>(w, x, n);
}
float dot_q5_k(const void* w, const float* x, int64_t n) {
    return walk_dot<BlockQ5K, kQKK, walk_k_type1<BlockQ5K, DotSink>>(w, x, n);
}
float dot_q6_k(const void* w, const float* x, int64_t n) {
    return walk_dot<BlockQ6K, kQKK, walk_q6_k<DotSink>>(w, x, n);
}

}  // namespace minfer::quants::avx2
