// AVX2 helpers shared by the quant kernel files (quants_avx2.cpp, quants_q8_avx2.cpp,
// quants_lowbit_avx2.cpp): conversions, integer dot steps, and the walker drivers of the f32 kernels.
// Include it only from files compiled with -mavx2 -mfma -mf16c; everything here has internal linkage (an
// unnamed namespace), so no AVX2-compiled copy can be merged with baseline code by the linker.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "util/simd_avx2.h"

namespace minfer::quants::avx2 {
namespace {

inline __m256 to_ps(__m256i v) {
    return _mm256_cvtepi32_ps(v);
}

// The 32 signed bytes of v as four 8-wide vectors of 32-bit integers.
inline void widen_signed(__m256i v, __m256i out[4]) {
    const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
    out[0] = _mm256_cvtepi8_epi32(lo);
    out[1] = _mm256_cvtepi8_epi32(_mm_unpackhi_epi64(lo, lo));
    out[2] = _mm256_cvtepi8_epi32(hi);
    out[3] = _mm256_cvtepi8_epi32(_mm_unpackhi_epi64(hi, hi));
}

inline float fma1(float a, float b, float c) {  // a * b + c, rounded once
    return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}

inline int hsum_i32(__m128i s) {
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

inline int hsum_i32(__m256i v) {
    return hsum_i32(_mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)));
}

inline __m256i load32(const void* p) {
    return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// Products of 32 unsigned bytes w and signed bytes x, summed in groups of four into 8 int32 lanes.
inline __m256i dot_u8i8(__m256i w, __m256i x) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
}

inline __m256i dot_i8i8(__m256i w, __m256i x) {
    return dot_u8i8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
}

// ---- f32 kernels: a walker dequantizes a block 8 elements at a time and hands each piece to a sink
// (StoreSink for to_float, DotSink for dot) ----

// Four accumulators; the 8-wide piece at element offset e of a block goes to lane (e / 8) % 4, so pieces
// emitted one after another feed independent FMA chains.
struct DotSink {
    const float* x;
    __m256 acc[4];
    void operator()(int e, __m256 w) {
        const int k = (e >> 3) & 3;
        acc[k] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + e), acc[k]);
    }
    float sum() const {
        return simd::hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    }
};

struct StoreSink {
    float* y;
    void operator()(int e, __m256 w) { _mm256_storeu_ps(y + e, w); }
};

template <class Block, int QK, void (*Walk)(const Block&, StoreSink&)>
void walk_to_float(const void* w, float* dst, int64_t n) {
    const auto* b = static_cast<const Block*>(w);
    StoreSink sink{dst};
    for (int64_t i = 0; i < n / QK; ++i, sink.y += QK) Walk(b[i], sink);
}

template <class Block, int QK, void (*Walk)(const Block&, DotSink&)>
float walk_dot(const void* w, const float* x, int64_t n) {
    const auto* b = static_cast<const Block*>(w);
    DotSink sink{x, {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()}};
    for (int64_t i = 0; i < n / QK; ++i, sink.x += QK) {
        simd::prefetch_ahead<sizeof(Block)>(b + i);
        Walk(b[i], sink);
    }
    return sink.sum();
}

}  // namespace
}  // namespace minfer::quants::avx2
