// Small AVX2/F16C helpers shared by the *_avx2.cpp and *_avx512.cpp kernel files. Include it only from
// files compiled with -mavx2 -mfma -mf16c (or more); everything here has internal linkage (an unnamed
// namespace), so no AVX2-compiled copy can be merged with baseline code by the linker.
#pragma once
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace minfer::simd {
namespace {

inline float half_to_float(uint16_t h) {
    return _cvtsh_ss(h);
}

inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// Weight rows stream from memory once per token, and the hardware prefetcher alone leaves one core's
// stream well short of the dot kernels' speed (measured: Q8_0 int8x2 dots 6.4 GB/s streamed vs 14.6 GB/s
// from L2; 9.6 GB/s with this). A loop step that reads kBytes at p asks for the lines kPrefetchBytes
// ahead of them.
constexpr int kPrefetchBytes = 1024;

template <size_t kBytes>
inline void prefetch_ahead(const void* p) {
    const char* ahead = static_cast<const char*>(p) + kPrefetchBytes;
    for (size_t o = 0; o < kBytes; o += 64) _mm_prefetch(ahead + o, _MM_HINT_T0);
}

// The eight 6-bit scales and mins of a Q4_K/Q5_K super-block as 16-bit lanes (see k_scale_min): bytes
// 0..3 (4..7) hold those of sub-blocks 0..3 in their low 6 bits; sub-blocks 4..7 take their low 4 bits
// from the nibbles of bytes 8..11 and their top 2 bits from the top of bytes 0..3 (4..7).
inline void k_scales_mins(const uint8_t* s, __m128i* scales, __m128i* mins) {
    uint32_t w[3];
    std::memcpy(w, s, sizeof w);
    const uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, top2 = 0x30303030;
    const uint64_t sc = (w[0] & low6) | uint64_t((w[2] & low4) | ((w[0] >> 2) & top2)) << 32;
    const uint64_t mn = (w[1] & low6) | uint64_t(((w[2] >> 4) & low4) | ((w[1] >> 2) & top2)) << 32;
    *scales = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(int64_t(sc)));
    *mins = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(int64_t(mn)));
}

inline double hsum(__m256d v) {
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
    return _mm_cvtsd_f64(s);
}

}  // namespace
}  // namespace minfer::simd
