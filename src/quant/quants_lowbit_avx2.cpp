// AVX2/FMA/F16C kernels of the low-bit formats (twins of quants_lowbit.cpp). f32 path: each block is
// dequantized 8 elements at a time by the same single roundings as the reference (bit for bit) and fed
// to the walkers' sinks (quants_avx2_util.h). int8 path: levels unpacked to bytes (the IQ4 and MXFP4
// nibbles through a 16-entry table lookup, vpshufb) and dotted with the activations by
// _mm256_maddubs_epi16 / _mm256_madd_epi16; the K-quant sums are exact integers per super-block, folded
// in as the reference does (bit for bit), the 32-element types accumulate in four f32 chains.
//
// This file is compiled with -mavx2 -mfma -mf16c: it must not call inline helpers of shared headers
// (such as util/fp16.h), whose AVX2-compiled copies the linker could hand to baseline code.
#include <immintrin.h>

#include "quant/quants_avx2_util.h"
#include "quant/quants_lowbit.h"
#include "util/simd_avx2.h"

namespace minfer::quants::avx2 {
namespace {

using simd::half_to_float;
using simd::hsum;
using simd::prefetch_ahead;

inline __m256i table16(const int8_t* t) {  // a 16-entry byte table in both 128-bit lanes
    return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t)));
}

// The 32 nibbles of qs[0..16) in element order (low nibbles, then the high ones) looked up in `table`.
inline __m256i nibble_values(const uint8_t* qs, __m256i table) {
    const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
    const __m256i shift = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);
    return _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srlv_epi32(v, shift), _mm256_set1_epi8(0xF)));
}

// Bits 2j, 2j + 1 of each of 32 bytes (a Q2_K / Q3_K 2-bit plane), as bytes 0..3.
inline __m256i crumbs(__m256i q, int j) {
    return _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), _mm256_set1_epi8(3));
}

// Q3_K levels 0..7 (q, before the offset 4) of elements 128h + 32j + l: the 2-bit plane j of qs[32h..] and
// bit 4h + j of hmask[l] as 4.
inline __m256i q3_k_levels(__m256i q, __m256i hmask, int h, int j) {
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(hmask, 4 * h + j), _mm256_set1_epi8(1));
    return _mm256_or_si256(crumbs(q, j), _mm256_slli_epi16(hi, 2));
}

// ---- f32 walkers ----

// 32 signed byte levels times step, into the sink at elements e..e + 32.
template <class Sink>
inline void emit32(Sink& sink, int e, __m256i levels, __m256 step) {
    __m256i q[4];
    widen_signed(levels, q);
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) sink(e + 8 * k, _mm256_mul_ps(step, to_ps(q[k])));
}

template <class Sink>
inline void walk_iq4_nl(const BlockIQ4NL& b, Sink& sink) {
    emit32(sink, 0, nibble_values(b.qs, table16(kIQ4NLValues)), _mm256_set1_ps(half_to_float(b.d)));
}

template <class Sink>
inline void walk_mxfp4(const BlockMXFP4& b, Sink& sink) {
    emit32(sink, 0, nibble_values(b.qs, table16(kMXFP4Values)), _mm256_set1_ps(mxfp4_scale(b.e)));
}

template <class Sink>
inline void walk_iq4_xs(const BlockIQ4XS& b, Sink& sink) {
    const __m256i table = table16(kIQ4NLValues);
    const float d = half_to_float(b.d);
    for (int j = 0; j < 8; ++j)
        emit32(sink, 32 * j, nibble_values(b.qs + 16 * j, table),
               _mm256_set1_ps(d * float(iq4_xs_scale(b, j) - 32)));
}

// Q2_K: value = fma(d * sc_k, q, -(dmin * m_k)) as the reference; plane j of qs[32h..] holds elements
// 128h + 32j + l, sub-blocks 8h + 2j and 8h + 2j + 1.
template <class Sink>
inline void walk_q2_k(const BlockQ2K& b, Sink& sink) {
    const float d = half_to_float(b.d), dmin = half_to_float(b.dmin);
    float scale[16], neg_min[16];
    for (int k = 0; k < 16; ++k)
        scale[k] = d * float(b.scales[k] & 0xF), neg_min[k] = -(dmin * float(b.scales[k] >> 4));
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
        const __m256i q = load32(b.qs + 32 * h);
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
            __m256i v[4];
            widen_signed(crumbs(q, j), v);
            const int e = 128 * h + 32 * j;
            for (int i = 0; i < 4; ++i) {
                const int k = e / 16 + i / 2;
                sink(e + 8 * i,
                     _mm256_fmadd_ps(to_ps(v[i]), _mm256_set1_ps(scale[k]), _mm256_set1_ps(neg_min[k])));
            }
        }
    }
}

// Q3_K: value = (d * (sc_k - 32)) * (q - 4) as the reference.
template <class Sink>
inline void walk_q3_k(const BlockQ3K& b, Sink& sink) {
    const float d = half_to_float(b.d);
    float step[16];
    for (int k = 0; k < 16; ++k) step[k] = d * float(q3_k_scale(b.scales, k) - 32);
    const __m256i hmask = load32(b.hmask), four = _mm256_set1_epi8(4);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
        const __m256i q = load32(b.qs + 32 * h);
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
            __m256i v[4];
            widen_signed(_mm256_sub_epi8(q3_k_levels(q, hmask, h, j), four), v);
            const int e = 128 * h + 32 * j;
            for (int i = 0; i < 4; ++i)
                sink(e + 8 * i, _mm256_mul_ps(_mm256_set1_ps(step[e / 16 + i / 2]), to_ps(v[i])));
        }
    }
}

// ---- int8 activations ----

// 16-bit lanes 0..7 holding byte 2g of sc8 sign-extended, lanes 8..15 byte 2g + 1: the scales of the two
// 16-element sub-blocks of 32 consecutive elements (as maddubs pairs them).
inline __m256i pair_scales(__m128i sc8, int g) {
    const __m128i pick = _mm_set_epi64x(0x0101010101010101 * (2 * g + 1), 0x0101010101010101 * (2 * g));
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, pick));
}

// sum_k sc_k * sum_l q_l x_l over a Q2_K / Q3_K super-block, unsigned levels q (Levels(h, j) gives those
// of elements 128h + 32j + l) and 16 signed scales sc8.
template <class Levels>
inline int k16_scaled_sum(const Levels& levels, __m128i sc8, const int8_t* x) {
    __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h)
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
            const int g = 4 * h + j;
            const __m256i p = _mm256_maddubs_epi16(levels(h, j), load32(x + 32 * g));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(pair_scales(sc8, g), p));
        }
    return hsum_i32(sumi);
}

struct IQ4NLDec {
    using Block = BlockIQ4NL;
    static constexpr const int8_t* kValues = kIQ4NLValues;
    static float scale(const Block& b) { return half_to_float(b.d); }
};

struct MXFP4Dec {
    using Block = BlockMXFP4;
    static constexpr const int8_t* kValues = kMXFP4Values;
    static float scale(const Block& b) { return mxfp4_scale(b.e); }
};

// IQ4_NL / MXFP4 against BlockQ8A: scale_w * d_x * (exact integer lanes) per block, blocks 4k + j into
// chain j.
template <class Dec>
float nl_vec_dot(const void* w, const void* xq, int64_t n) {
    const auto* b = static_cast<const typename Dec::Block*>(w);
    const auto* y = static_cast<const BlockQ8A*>(xq);
    const __m256i table = table16(Dec::kValues);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t i = 0; i < n / kQK0; ++i) {
        prefetch_ahead<sizeof(b[i])>(b + i);
        const __m256i p = dot_i8i8(nibble_values(b[i].qs, table), load32(y[i].qs));
        acc[i & 3] = _mm256_fmadd_ps(_mm256_set1_ps(Dec::scale(b[i]) * y[i].d), to_ps(p), acc[i & 3]);
    }
    return hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

// IQ4_NL / MXFP4 levels: the grid values of the nibbles, one scale per block.
template <class Dec>
void nl_levels(const void* w, int8_t* q, float* scale, float* min, int64_t n) {
    const auto* b = static_cast<const typename Dec::Block*>(w);
    const __m256i table = table16(Dec::kValues);
    for (int64_t i = 0; i < n / kQK0; ++i) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + kQK0 * i), nibble_values(b[i].qs, table));
        scale[i] = Dec::scale(b[i]), min[i] = 0.0f;
    }
}

}  // namespace

float vec_dot_q2_k(const void* w, const void* xq, int64_t n) {
    const auto* b = static_cast<const BlockQ2K*>(w);
    const auto* y = static_cast<const BlockQ8K*>(xq);
    const __m128i m4 = _mm_set1_epi8(0xF);
    float acc = 0.0f;
    for (int64_t i = 0; i < n / kQKK; ++i) {
        prefetch_ahead<sizeof(BlockQ2K)>(b + i);
        const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].scales));
        const __m128i mins = _mm_and_si128(_mm_srli_epi16(sc, 4), m4);
        const int msum = hsum_i32(_mm256_madd_epi16(_mm256_cvtepu8_epi16(mins), load32(y[i].bsums)));
        const __m256i q0 = load32(b[i].qs), q1 = load32(b[i].qs + 32);
        const auto levels = [&](int h, int j) { return crumbs(h ? q1 : q0, j); };
        const int isum = k16_scaled_sum(levels, _mm_and_si128(sc, m4), y[i].qs);
        const float d = y[i].d * half_to_float(b[i].d), dmin = -y[i].d * half_to_float(b[i].dmin);
        acc = fma1(dmin, float(msum), fma1(d, float(isum), acc));
    }
    return acc;
}

// Q3_K: levels 0..7 against x, minus 4 * sum_k sc_k * bsums[k] (the offset), exactly the reference's sum.
float vec_dot_q3_k(const void* w, const void* xq, int64_t n) {
    const auto* b = static_cast<const BlockQ3K*>(w);
    const auto* y = static_cast<const BlockQ8K*>(xq);
    float acc = 0.0f;
    for (int64_t i = 0; i < n / kQKK; ++i) {
        prefetch_ahead<sizeof(BlockQ3K)>(b + i);
        alignas(16) int8_t sc[16];
        for (int k = 0; k < 16; ++k) sc[k] = int8_t(q3_k_scale(b[i].scales, k) - 32);
        const __m128i sc8 = _mm_load_si128(reinterpret_cast<const __m128i*>(sc));
        const int osum = hsum_i32(_mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), load32(y[i].bsums)));
        const __m256i q0 = load32(b[i].qs), q1 = load32(b[i].qs + 32), hmask = load32(b[i].hmask);
        const auto levels = [&](int h, int j) { return q3_k_levels(h ? q1 : q0, hmask, h, j); };
        const int isum = k16_scaled_sum(levels, sc8, y[i].qs) - 4 * osum;
        acc = fma1(y[i].d * half_to_float(b[i].d), float(isum), acc);
    }
    return acc;
}

float vec_dot_iq4_xs(const void* w, const void* xq, int64_t n) {
    const auto* b = static_cast<const BlockIQ4XS*>(w);
    const auto* y = static_cast<const BlockQ8K*>(xq);
    const __m256i table = table16(kIQ4NLValues);
    float acc = 0.0f;
    for (int64_t i = 0; i < n / kQKK; ++i) {
        prefetch_ahead<sizeof(BlockIQ4XS)>(b + i);
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 8; ++j) {
            const __m256i p = dot_i8i8(nibble_values(b[i].qs + 16 * j, table), load32(y[i].qs + 32 * j));
            sumi =
                _mm256_add_epi32(sumi, _mm256_mullo_epi32(p, _mm256_set1_epi32(iq4_xs_scale(b[i], j) - 32)));
        }
        acc = fma1(y[i].d * half_to_float(b[i].d), float(hsum_i32(sumi)), acc);
    }
    return acc;
}

void to_float_q2_k(const void* w, float* dst, int64_t n) {
    walk_to_float<BlockQ2K, kQKK, walk_q2_k<StoreSink>>(w, dst, n);
}
void to_float_q3_k(const void* w, float* dst, int64_t n) {
    walk_to_float<BlockQ3K, kQKK, walk_q3_k<StoreSink>>(w, dst, n);
}
void to_float_iq4_nl(const void* w, float* dst, int64_t n) {
    walk_to_float<BlockIQ4NL, kQK0, walk_iq4_nl<StoreSink>>(w, dst, n);
}
void to_float_iq4_xs(const void* w, float* dst, int64_t n) {
    walk_to_float<BlockIQ4XS, kQKK, walk_iq4_xs<StoreSink>>(w, dst, n);
}
void to_float_mxfp4(const void* w, float* dst, int64_t n) {
    walk_to_float<BlockMXFP4, kQK0, walk_mxfp4<StoreSink>>(w, dst, n);
}

float dot_q2_k(const void* w, const float* x, int64_t n) {
    return walk_dot<BlockQ2K, kQKK, walk_q2_k<DotSink>>(w, x, n);
}
float dot_q3_k(const void* w, const float* x, int64_t n) {
    return walk_dot<BlockQ3K, kQKK, walk_q3_k<DotSink>>(w, x, n);
}
float dot_iq4_nl(const void* w, const float* x, int64_t n) {
    return walk_dot<BlockIQ4NL, kQK0, walk_iq4_nl<DotSink>>(w, x, n);
}
float dot_iq4_xs(const void* w, const float* x, int64_t n) {
    return walk_dot<BlockIQ4XS, kQKK, walk_iq4_xs<DotSink>>(w, x, n);
}
float dot_mxfp4(const void* w, const float* x, int64_t n) {
    return walk_dot<BlockMXFP4, kQK0, walk_mxfp4<DotSink>>(w, x, n);
}

// ---- Integer levels (the references' bytes, scales as they compute them) ----

void levels_q3_k(const void* w, int8_t* q, float* scale, float* min, int64_t n) {
    const auto* b = static_cast<const BlockQ3K*>(w);
    for (int64_t i = 0; i < n / kQKK; ++i, q += kQKK) {
        const float d = half_to_float(b[i].d);
        for (int k = 0; k < 16; ++k)
            scale[16 * i + k] = d * float(q3_k_scale(b[i].scales, k) - 32), min[16 * i + k] = 0.0f;
        const __m256i hmask = load32(b[i].hmask), four = _mm256_set1_epi8(4);
        for (int h = 0; h < 2; ++h) {
            const __m256i qs = load32(b[i].qs + 32 * h);
            for (int j = 0; j < 4; ++j)
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 128 * h + 32 * j),
                                    _mm256_sub_epi8(q3_k_levels(qs, hmask, h, j), four));
        }
    }
}

void levels_iq4_nl(const void* w, int8_t* q, float* scale, float* min, int64_t n) {
    nl_levels<IQ4NLDec>(w, q, scale, min, n);
}
void levels_mxfp4(const void* w, int8_t* q, float* scale, float* min, int64_t n) {
    nl_levels<MXFP4Dec>(w, q, scale, min, n);
}

void levels_iq4_xs(const void* w, int8_t* q, float* scale, float* min, int64_t n) {
    const auto* b = static_cast<const BlockIQ4XS*>(w);
    const __m256i table = table16(kIQ4NLValues);
    for (int64_t i = 0; i < n / kQKK; ++i) {
        const float d = half_to_float(b[i].d);
        for (int j = 0; j < 8; ++j) {
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + kQKK * i + 32 * j),
                                nibble_values(b[i].qs + 16 * j, table));
            scale[8 * i + j] = d * float(iq4_xs_scale(b[i], j) - 32), min[8 * i + j] = 0.0f;
        }
    }
}

float vec_dot_iq4_nl(const void* w, const void* xq, int64_t n) {
    return nl_vec_dot<IQ4NLDec>(w, xq, n);
}
float vec_dot_mxfp4(const void* w, const void* xq, int64_t n) {
    return nl_vec_dot<MXFP4Dec>(w, xq, n);
}

}  // namespace minfer::quants::avx2
