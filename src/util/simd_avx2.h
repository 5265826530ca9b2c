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

// e^x for the vector kernels (exp8 in ops_avx2.cpp, exp16 in attention_avx512.cpp): x = n ln2 + r with
// |r| <= ln2/2, ln2 split in two (Cody-Waite) so that n ln2 is exact enough, and e^r from its degree-7
// Taylor polynomial (coefficients highest first), whose truncation error r^8/8! < 6e-9 is below float
// rounding.
inline constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
inline constexpr float kExpPoly[] = {1.0f / 5040.0f, 1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f,
                                     1.0f / 6.0f,    0.5f,          1.0f,          1.0f};

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

// The levels 0..63 of one 128-element half of a Q6_K super-block (ql64 = ql + 64 h, qh32 = qh + 32 h) in
// byte lanes: group g of 32 takes the low (g < 2) or high nibble of ql64[32 (g & 1) + l] and bits 2g,
// 2g + 1 of qh32[l] as its top two bits.
inline void q6_k_groups(const uint8_t* ql64, const uint8_t* qh32, __m256i g[4]) {
    const __m256i low4 = _mm256_set1_epi8(0x0F), top2 = _mm256_set1_epi8(0x30);
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql64));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql64 + 32));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh32));
    g[0] = _mm256_or_si256(_mm256_and_si256(a, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), top2));
    g[1] = _mm256_or_si256(_mm256_and_si256(c, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), top2));
    g[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), low4), _mm256_and_si256(qh, top2));
    g[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), low4),
                           _mm256_and_si256(_mm256_srli_epi16(qh, 2), top2));
}

inline double hsum(__m256d v) {
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
    return _mm_cvtsd_f64(s);
}

}  // namespace
}  // namespace minfer::simd
