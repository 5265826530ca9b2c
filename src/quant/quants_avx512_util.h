// Internal to the AVX-512 int8x2 dot files (quants_q8_avx512.cpp, quants_lowbit_avx512.cpp): the
// activation side of a two-block vector and the exact int8x2 lane sums. Include it only from files
// compiled with the AVX-512 flags; everything here has internal linkage (an unnamed namespace), so no
// AVX-512 copy can be merged with code that runs on any CPU (see quants_impl.h).
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "quant/quants_impl.h"
#include "util/simd_avx2.h"

namespace minfer::quants::avx512 {
namespace {

// 64 levels 0..15 of two 32-element nibble blocks (qs a and b, 16 bytes each) in element order: each
// block's 16 low nibbles (elements 0..15), then its 16 high nibbles (16..31).
inline __m512i nibbles64(const uint8_t* a, const uint8_t* b) {
    const __m256i q =
        _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
                                _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1);  // [qs a | qs b]
    const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1);
    const __m512i ordered = _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));  // a lo, a hi, b lo, b hi
    return _mm512_and_si512(ordered, _mm512_set1_epi8(0x0F));
}

// Sum of the 16 lanes (the reduce intrinsics trip GCC 12's -Wuninitialized).
inline float lane_sum(__m512 v) {
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, v);
    return simd::hsum(_mm256_add_ps(_mm256_load_ps(lanes), _mm256_load_ps(lanes + 8)));
}

inline __m512i join(const int8_t* a, const int8_t* b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a))),
                              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)), 1);
}

// int8x2 lane sums of 64 unsigned levels q against two activation blocks whose hi and lo levels are xh
// and xl (as join gives them): 254 * sum(q hi) + sum(q lo) over four levels per int32 lane, exact (the
// AVX2 kernels' x2_sum).
inline __m512i x2_sum(__m512i q, __m512i xh, __m512i xl) {
    const __m512i hi = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, xh);
    const __m512i lo = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, xl);
    __m512i k254 = _mm512_set1_epi32(254);
    asm("" : "+v"(k254));  // one vpmulld: GCC 12 would multiply by three shifts and subtracts
    return _mm512_add_epi32(_mm512_mullo_epi32(hi, k254), lo);
}

// The same against the pair of activation blocks 2p (lanes 0..7) and 2p + 1 (lanes 8..15) of the row's
// wide copy.
inline __m512i x2_sum(__m512i q, const X2Wide& x, int64_t p) {
    return x2_sum(q, _mm512_loadu_si512(x.pairs + 128 * p), _mm512_loadu_si512(x.pairs + 128 * p + 64));
}

}  // namespace
}  // namespace minfer::quants::avx512
