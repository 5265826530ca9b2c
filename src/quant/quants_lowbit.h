// Internal to the quant traits table: the low-bit GGUF formats Q2_K, Q3_K, IQ4_NL, IQ4_XS and MXFP4 (block
// layouts byte for byte as ggml's block_q2_K, block_q3_K, block_iq4_nl, block_iq4_xs and block_mxfp4), their
// scalar references (quants_lowbit.cpp) and AVX2 kernels (quants_lowbit_avx2.cpp). As in quants_impl.h,
// everything defined here is `static` or constexpr: this header is compiled both for baseline x86-64 and
// with -mavx2 -mfma -mf16c.
#pragma once
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "quant/quants.h"
#include "quant/quants_impl.h"

namespace minfer::quants {

// ggml's kvalues_iq4nl: the 16 levels of IQ4_NL and IQ4_XS, a non-uniform grid denser near zero.
inline constexpr int8_t kIQ4NLValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// ggml's kvalues_mxfp4: the FP4 E2M1 values 0, 0.5, 1, 1.5, 2, 3, 4, 6 (nibbles 0..7; 8..15 the same
// negated, bit 3 the sign) doubled so that they are integers; the block scale is halved to match.
inline constexpr int8_t kMXFP4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// 16 sub-blocks of 16; value = d * sc_k * q - dmin * m_k, q in 0..3, with the 4-bit sc_k (low nibble) and
// m_k (high nibble) of scales[k], k = e / 16. Element e = 128h + 32j + l (l < 32) is bits 2j, 2j + 1 of
// qs[32h + l]. minfer evaluates fma(d * sc_k, q, -(dmin * m_k)) as for Q4_K (ggml rounds twice: <= 1 ulp).
struct BlockQ2K {
    uint8_t scales[kQKK / 16];
    uint8_t qs[kQKK / 4];
    uint16_t d;
    uint16_t dmin;
};
static_assert(sizeof(BlockQ2K) == 84);

// 16 sub-blocks of 16; value = (d * (sc_k - 32)) * (q - 4), q in 0..7, sc_k 6 bits (q3_k_scale). Element
// e = 128h + 32j + l (l < 32): bits 0..1 of q are bits 2j, 2j + 1 of qs[32h + l], bit 2 is bit e / 32 of
// hmask[l].
struct BlockQ3K {
    uint8_t hmask[kQKK / 8];
    uint8_t qs[kQKK / 4];
    uint8_t scales[12];
    uint16_t d;
};
static_assert(sizeof(BlockQ3K) == 110);

// 32 elements; value = d * kIQ4NLValues[q]. Element l < 16 is the low nibble of qs[l], l + 16 the high.
struct BlockIQ4NL {
    uint16_t d;
    uint8_t qs[kQK0 / 2];
};
static_assert(sizeof(BlockIQ4NL) == 18);

// 8 sub-blocks of 32; value = (d * (ls_j - 32)) * kIQ4NLValues[q], ls_j 6 bits (iq4_xs_scale). Sub-block j
// is qs[16j..16j + 16) in IQ4_NL's nibble order.
struct BlockIQ4XS {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[kQKK / 64];
    uint8_t qs[kQKK / 2];
};
static_assert(sizeof(BlockIQ4XS) == 136);

// 32 elements with an E8M0 shared exponent e; value = kMXFP4Values[q] * 2^(e - 128) (mxfp4_scale), nibbles
// in IQ4_NL's order. Every value is exact in f32 (2^-128 and 2^-127 are subnormal), or +-inf for e >= 253
// and |q| >= 8 levels; as ggml, e = 255 means 2^127, not NaN.
struct BlockMXFP4 {
    uint8_t e;
    uint8_t qs[kQK0 / 2];
};
static_assert(sizeof(BlockMXFP4) == 17);

// 6-bit scale of Q3_K sub-block k (0..15): low 4 bits are nibble k / 8 of scales[k % 8], top 2 bits are bits
// 2 (k / 4) and 2 (k / 4) + 1 of scales[8 + k % 4].
static inline int q3_k_scale(const uint8_t* s, int k) {
    return ((s[k % 8] >> (4 * (k / 8))) & 0xF) | (((s[8 + k % 4] >> (2 * (k / 4))) & 3) << 4);
}

// 6-bit scale of IQ4_XS sub-block j (0..7): low 4 bits are nibble j % 2 of scales_l[j / 2], top 2 bits are
// bits 2j and 2j + 1 of scales_h.
static inline int iq4_xs_scale(const BlockIQ4XS& b, int j) {
    return ((b.scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((b.scales_h >> (2 * j)) & 3) << 4);
}

// ggml's GGML_E8M0_TO_FP32_HALF: 2^(e - 128), built from its bits (subnormal for e < 2); a table, which the
// kernels read once per 32 elements.
inline constexpr std::array<float, 256> kMXFP4Scales = [] {
    std::array<float, 256> t{};
    for (uint32_t e = 0; e < 256; ++e) t[e] = std::bit_cast<float>(e < 2 ? 0x00200000u << e : (e - 1) << 23);
    return t;
}();

static inline float mxfp4_scale(uint8_t e) {
    return kMXFP4Scales[e];
}

// Table entries of the five types, in the order above (quants.cpp appends them to its table); simd: take
// the AVX2 kernels. Their int8x2 dots and integer levels (for the int16 GEMM: all but Q2_K, Q3_K's per 16
// elements) exist only where the AVX-512 dots run (quants_use_avx512()).
inline constexpr int kLowbitCount = 5;
void lowbit_traits(QuantTraits* out, bool simd);

namespace avx2 {

void to_float_q2_k(const void* blocks, float* dst, int64_t n);
void to_float_q3_k(const void* blocks, float* dst, int64_t n);
void to_float_iq4_nl(const void* blocks, float* dst, int64_t n);
void to_float_iq4_xs(const void* blocks, float* dst, int64_t n);
void to_float_mxfp4(const void* blocks, float* dst, int64_t n);
float dot_q2_k(const void* blocks, const float* x, int64_t n);
float dot_q3_k(const void* blocks, const float* x, int64_t n);
float dot_iq4_nl(const void* blocks, const float* x, int64_t n);
float dot_iq4_xs(const void* blocks, const float* x, int64_t n);
float dot_mxfp4(const void* blocks, const float* x, int64_t n);
// int8 activations: Q8_K (BlockQ8K) for Q2_K, Q3_K, IQ4_XS; Q8_0-style (BlockQ8A) for IQ4_NL, MXFP4.
float vec_dot_q2_k(const void* w, const void* xq, int64_t n);
float vec_dot_q3_k(const void* w, const void* xq, int64_t n);
float vec_dot_iq4_nl(const void* w, const void* xq, int64_t n);
float vec_dot_iq4_xs(const void* w, const void* xq, int64_t n);
float vec_dot_mxfp4(const void* w, const void* xq, int64_t n);
// QuantTraits::to_levels (the references' bytes).
void levels_q3_k(const void* w, int8_t* q, float* scale, float* min, int64_t n);
void levels_iq4_nl(const void* w, int8_t* q, float* scale, float* min, int64_t n);
void levels_iq4_xs(const void* w, int8_t* q, float* scale, float* min, int64_t n);
void levels_mxfp4(const void* w, int8_t* q, float* scale, float* min, int64_t n);

}  // namespace avx2

// quants_lowbit_avx512.cpp: int8x2 dots (BlockQ8X2 activations), two 32-element blocks per vector.
namespace avx512 {

float vec_dot_x2_q2_k(const void* w, const void* xq, int64_t n);
float vec_dot_x2_q3_k(const void* w, const void* xq, int64_t n);
float vec_dot_x2_iq4_nl(const void* w, const void* xq, int64_t n);
float vec_dot_x2_iq4_xs(const void* w, const void* xq, int64_t n);
float vec_dot_x2_mxfp4(const void* w, const void* xq, int64_t n);
void vec_dot_x2_cols_q2_k(const void* w, const void* xq, size_t xq_stride, int64_t n, int ncols, float* out);
void vec_dot_x2_cols_q3_k(const void* w, const void* xq, size_t xq_stride, int64_t n, int ncols, float* out);
void vec_dot_x2_cols_iq4_nl(const void* w, const void* xq, size_t xq_stride, int64_t n, int ncols,
                            float* out);
void vec_dot_x2_cols_iq4_xs(const void* w, const void* xq, size_t xq_stride, int64_t n, int ncols,
                            float* out);
void vec_dot_x2_cols_mxfp4(const void* w, const void* xq, size_t xq_stride, int64_t n, int ncols, float* out);

}  // namespace avx512
}  // namespace minfer::quants
