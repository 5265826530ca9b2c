// AVX2/F16C integer levels of the quantized types (QuantTraits::to_levels, for the int16 prefill GEMM):
// the scalar reference's levels, scales and minimums (quants.cpp), 32 levels per byte-lane vector.
//
// This file is compiled with -mavx2 -mfma -mf16c: only internal-linkage helpers (see quants_avx2.cpp).
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "quant/quants_impl.h"
#include "util/simd_avx2.h"

namespace minfer::quants::avx2 {
namespace {

using simd::half_to_float;
using simd::k_scales_mins;
using simd::q6_k_groups;

inline __m256i load32(const uint8_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

inline void store32(int8_t* q, __m256i v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), v);
}

// Levels 0..15 of a Q4_0 / Q5_0 block in element order: the 16 low nibbles of qs, then the 16 high ones.
inline __m256i nibbles(const uint8_t* qs) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0F));
}

// 16 in byte e where bit e of the little-endian word at qh is set, else 0.
inline __m256i fifth_bits(const uint8_t* qh) {
    uint32_t w;
    std::memcpy(&w, qh, sizeof w);
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(int(w)), _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                                    2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201));
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(16));
}

template <class Block, int Offset>  // Q8_0 / Q4_0 / Q5_0: w = d * (q - offset)
void block32_levels(const void* w, int8_t* q, float* scale, float* min, int64_t n) {
    const auto* b = static_cast<const Block*>(w);
    for (int64_t i = 0; i < n / kQK0; ++i, q += kQK0) {
        if constexpr (std::is_same_v<Block, BlockQ8_0>) {
            std::memcpy(q, b[i].qs, kQK0);
        } else {
            __m256i v = nibbles(b[i].qs);
            if constexpr (std::is_same_v<Block, BlockQ5_0>) v = _mm256_or_si256(v, fifth_bits(b[i].qh));
            store32(q, _mm256_sub_epi8(v, _mm256_set1_epi8(Offset)));
        }
        scale[i] = half_to_float(b[i].d), min[i] = 0.0f;
    }
}

// Q4_K / Q5_K: sub-blocks 2p and 2p + 1 are the low and high nibbles of qs[32p ..), Q5_K adds bits 2p and
// 2p + 1 of qh as 16; scale d * sc_j, min dmin * m_j.
template <class Block>
void k_type1_levels(const void* w, int8_t* q, float* scale, float* min, int64_t n) {
    const auto* b = static_cast<const Block*>(w);
    const __m256i low4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    for (int64_t i = 0; i < n / kQKK; ++i, q += kQKK, scale += 8, min += 8) {
        __m128i sc, m;  // the eight 6-bit scales and minimums (k_scale_min's), 16-bit lanes
        k_scales_mins(b[i].scales, &sc, &m);
        _mm256_storeu_ps(scale, _mm256_mul_ps(_mm256_set1_ps(half_to_float(b[i].d)),
                                              _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(sc))));
        _mm256_storeu_ps(min, _mm256_mul_ps(_mm256_set1_ps(half_to_float(b[i].dmin)),
                                            _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(m))));
        for (int p = 0; p < 4; ++p) {
            const __m256i v = load32(b[i].qs + 32 * p);
            __m256i lo = _mm256_and_si256(v, low4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
            if constexpr (std::is_same_v<Block, BlockQ5K>) {
                const __m256i qh = load32(b[i].qh);
                lo = _mm256_or_si256(
                    lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * p), one), 4));
                hi = _mm256_or_si256(
                    hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * p + 1), one), 4));
            }
            store32(q + 64 * p, lo);
            store32(q + 64 * p + 32, hi);
        }
    }
}

// Q6_K: levels q - 32 of each half's four groups (q6_k_groups), scale d * sc per 16 elements.
void q6_k_levels(const void* w, int8_t* q, float* scale, float* min, int64_t n) {
    const auto* b = static_cast<const BlockQ6K*>(w);
    const __m256i bias = _mm256_set1_epi8(32);
    for (int64_t i = 0; i < n / kQKK; ++i, q += kQKK, scale += 16, min += 16) {
        const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].scales));  // 16 int8
        const __m256 d = _mm256_set1_ps(half_to_float(b[i].d));
        _mm256_storeu_ps(scale, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))));
        _mm256_storeu_ps(scale + 8,
                         _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8)))));
        _mm256_storeu_ps(min, _mm256_setzero_ps());
        _mm256_storeu_ps(min + 8, _mm256_setzero_ps());
        for (int h = 0; h < 2; ++h) {
            __m256i g[4];
            q6_k_groups(b[i].ql + 64 * h, b[i].qh + 32 * h, g);
            for (int k = 0; k < 4; ++k) store32(q + 128 * h + 32 * k, _mm256_sub_epi8(g[k], bias));
        }
    }
}

}  // namespace

void levels_q8_0(const void* w, int8_t* q, float* scale, float* min, int64_t n) {
    block32_levels<BlockQ8_0, 0>(w, q, scale, min, n);
}
void levels_q4_0(const void* w, int8_t* q, float* scale, float* min, int64_t n) {
    block32_levels<BlockQ4_0, 8>(w, q, scale, min, n);
}
void levels_q5_0(const void* w, int8_t* q, float* scale, float* min, int64_t n) {
    block32_levels<BlockQ5_0, 16>(w, q, scale, min, n);
}
void levels_q4_k(const void* w, int8_t* q, float* scale, float* min, int64_t n) {
    k_type1_levels<BlockQ4K>(w, q, scale, min, n);
}
void levels_q5_k(const void* w, int8_t* q, float* scale, float* min, int64_t n) {
    k_type1_levels<BlockQ5K>(w, q, scale, min, n);
}
void levels_q6_k(const void* w, int8_t* q, float* scale, float* min, int64_t n) {
    q6_k_levels(w, q, scale, min, n);
}

}  // namespace minfer::quants::avx2
