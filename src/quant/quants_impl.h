// Internal to the quant traits table: ggml's block layouts (byte for byte as in GGUF files) and the
// AVX2/FMA/F16C kernels defined in quants_avx2.cpp. Call the avx2 functions only after
// quants_use_avx2() said yes.
//
// Everything defined here is `static` on purpose: this header is included both by quants.cpp (baseline
// x86-64) and by quants_avx2.cpp (-mavx2 -mfma -mf16c). Functions with external linkage compiled in both
// would be merged by the linker, which could hand an AVX2-compiled copy to the baseline code.
#pragma once
#include <cstddef>
#include <cstdint>

namespace minfer::quants {

inline constexpr int kQK0 = 32;   // elements per Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 block
inline constexpr int kQKK = 256;  // elements per K-quant super-block

struct BlockQ8_0 {
    uint16_t d;  // fp16 scale
    int8_t qs[kQK0];
};
static_assert(sizeof(BlockQ8_0) == 34);

// Element j (< 16) is the low nibble of qs[j], element j + 16 the high nibble; value = d * (q - 8).
struct BlockQ4_0 {
    uint16_t d;
    uint8_t qs[kQK0 / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

// Nibbles as Q4_0, unsigned levels with a minimum: value = d * q + m (0 <= q <= 15), evaluated by minfer
// as one fused multiply-add fma(q, d, m) as for Q4_K (ggml may round twice: <= 1 ulp apart).
struct BlockQ4_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qs[kQK0 / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

// Nibbles as Q4_0 plus a fifth bit: bit j of the little-endian 32-bit word qh is bit 4 of element j
// (so element j < 16 takes bit j, element j + 16 bit j + 16); value = d * (q - 16).
struct BlockQ5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[kQK0 / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

// Levels as Q5_0, unsigned with a minimum: value = d * q + m (0 <= q <= 31).
struct BlockQ5_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[kQK0 / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

// 8 sub-blocks of 32; value = d * sc_j * q - dmin * m_j with 6-bit sc_j, m_j packed in `scales`.
// qs[32p + l] holds element 64p + l (low nibble) and 64p + 32 + l (high nibble). minfer evaluates the
// value as one fused multiply-add, fma(d * sc_j, q, -(dmin * m_j)), so that the scalar and SIMD versions
// agree bit for bit whatever the compiler's contraction settings (ggml rounds twice: <= 1 ulp apart).
struct BlockQ4K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qs[kQKK / 2];
};
static_assert(sizeof(BlockQ4K) == 144);

// As Q4_K with a fifth bit: bit 2p of qh[l] for element 64p + l, bit 2p + 1 for element 64p + 32 + l.
struct BlockQ5K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qh[kQKK / 8];
    uint8_t qs[kQKK / 2];
};
static_assert(sizeof(BlockQ5K) == 176);

// 16 sub-blocks of 16 with int8 scales; value = d * scales[e / 16] * (q - 32). For element
// e = 128h + 32g + l: the low 4 bits are a nibble of ql[64h + l + 32 (g & 1)] (high nibble when g >= 2),
// the top 2 bits are bits 2g, 2g + 1 of qh[32h + l].
struct BlockQ6K {
    uint8_t ql[kQKK / 2];
    uint8_t qh[kQKK / 4];
    int8_t scales[kQKK / 16];
    uint16_t d;
};
static_assert(sizeof(BlockQ6K) == 210);

// 6-bit scale and min of Q4_K/Q5_K sub-block j (0..7), as ggml's get_scale_min_k4: sub-blocks 0..3 use
// the low 6 bits of bytes j and j + 4; sub-blocks 4..7 take their low 4 bits from byte j + 4 and their
// top 2 bits from the spare top bits of bytes j - 4 (scale) and j (min).
static inline void k_scale_min(const uint8_t* s, int j, int* sc, int* m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// ---- int8 activations (minfer's own layouts, never stored in files) ----

// 32-element activation block for the Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 dots: x ~ d * qs[l] with
// qs in [-127, 127]; s = d * sum(qs) feeds the minimum term of Q4_1 / Q5_1.
struct BlockQ8A {
    float d;
    float s;
    int8_t qs[kQK0];
};
static_assert(sizeof(BlockQ8A) == 40);

// 256-element activation block for the K-quant dots (ggml's block_q8_K): x ~ d * qs[l], qs in
// [-127, 127]; bsums[k] = sum of qs[16k..16k+16) feeds the Q4_K/Q5_K minimum and Q6_K offset terms.
struct BlockQ8K {
    float d;
    int8_t qs[kQKK];
    int16_t bsums[kQKK / 16];
};
static_assert(sizeof(BlockQ8K) == 292);

// 32-element two-level activation block for the int8x2 dots of every int8 type: x ~ d * (254 * hi[l] +
// lo[l]) with d = max |x| / (127 * 254). hi = round(x / (254 d)) in [-127, 127] (a BlockQ8A level); the
// residual r = x - 254 d * hi (exact, one fused multiply-add) is within 127 d (up to rounding), and
// lo = round(r / d) in [-127, 127], so |x - d * (254 hi + lo)| <= d / 2 = max |x| / 64516. One step for
// both levels lets the dots merge them in integers (254 * sum q hi + sum q lo). s = d * (254 * sum(hi) +
// sum(lo)), the sum of the values the block stands for, feeds the minimum and offset terms of Q4_0 / Q4_1
// / Q5_0 / Q5_1 / Q4_K / Q5_K. K-quant super-blocks use 8 consecutive blocks.
struct BlockQ8X2 {
    float d;
    float s;
    int8_t hi[kQK0];
    int8_t lo[kQK0];
};
static_assert(sizeof(BlockQ8X2) == 72);

// An int8x2 activation row of n elements (act_x2_row_bytes): n / 32 BlockQ8X2, then 8 int32 per block,
// offsets[8 b + k] = 32 * (254 * sum hi + sum lo) over elements 4k .. 4k + 3 of block b, then the same
// levels and steps again in the order the 512-bit dots load them (X2Wide). x2_fill_tail writes both from
// the blocks. The Q6_K dot multiplies its levels 0..63 unsigned and subtracts the offsets, one per int32
// lane of four products, which gives exactly the lanes of (q - 32) * x without flipping the signs of both
// activation levels; the Q5_0 / Q4_0 dots subtract a half / a quarter of them (Q5_0 offset 16, Q4_0
// offset 8).
void x2_fill_tail(void* xq, int64_t n);
inline const int32_t* x2_offsets(const void* xq, int64_t n) {
    return reinterpret_cast<const int32_t*>(static_cast<const BlockQ8X2*>(xq) + n / kQK0);
}
inline int32_t* x2_offsets(void* xq, int64_t n) {
    return reinterpret_cast<int32_t*>(static_cast<BlockQ8X2*>(xq) + n / kQK0);
}

// The wide copy: pairs[128 p ..] holds the hi levels of blocks 2p and 2p + 1 (64 bytes), then their lo
// levels (64 bytes), for p < n / 64 (an odd last block has no pair); d[b] and s[b] are block b's step and
// represented sum (n / 32 floats each).
struct X2Wide {
    const int8_t* pairs;
    const float* d;
    const float* s;
};
inline X2Wide x2_wide(const void* xq, int64_t n) {
    const auto* pairs = reinterpret_cast<const int8_t*>(x2_offsets(xq, n) + 8 * (n / kQK0));
    const auto* d = reinterpret_cast<const float*>(pairs + 128 * (n / 64));
    return {pairs, d, d + n / kQK0};
}

// Scalar references (quants_q8.cpp): activation quantizers and int8-activation dots.
namespace ref {

void quantize_q8a(const float* x, void* dst, int64_t n);
void quantize_q8k(const float* x, void* dst, int64_t n);
float vec_dot_q8_0(const void* w, const void* xq, int64_t n);
float vec_dot_q4_0(const void* w, const void* xq, int64_t n);
float vec_dot_q4_1(const void* w, const void* xq, int64_t n);
float vec_dot_q5_0(const void* w, const void* xq, int64_t n);
float vec_dot_q5_1(const void* w, const void* xq, int64_t n);
float vec_dot_q4_k(const void* w, const void* xq, int64_t n);
float vec_dot_q5_k(const void* w, const void* xq, int64_t n);
float vec_dot_q6_k(const void* w, const void* xq, int64_t n);

// int8x2 activations (BlockQ8X2) and dots.
void quantize_q8x2(const float* x, void* dst, int64_t n);
float vec_dot_x2_q8_0(const void* w, const void* xq, int64_t n);
float vec_dot_x2_q4_0(const void* w, const void* xq, int64_t n);
float vec_dot_x2_q4_1(const void* w, const void* xq, int64_t n);
float vec_dot_x2_q5_0(const void* w, const void* xq, int64_t n);
float vec_dot_x2_q5_1(const void* w, const void* xq, int64_t n);
float vec_dot_x2_q4_k(const void* w, const void* xq, int64_t n);
float vec_dot_x2_q5_k(const void* w, const void* xq, int64_t n);
float vec_dot_x2_q6_k(const void* w, const void* xq, int64_t n);

}  // namespace ref

namespace avx2 {

void to_float_f32(const void* blocks, float* dst, int64_t n);
void to_float_f16(const void* blocks, float* dst, int64_t n);
void to_float_bf16(const void* blocks, float* dst, int64_t n);
void to_float_q8_0(const void* blocks, float* dst, int64_t n);
void to_float_q4_0(const void* blocks, float* dst, int64_t n);
void to_float_q4_1(const void* blocks, float* dst, int64_t n);
void to_float_q5_0(const void* blocks, float* dst, int64_t n);
void to_float_q5_1(const void* blocks, float* dst, int64_t n);
void to_float_q4_k(const void* blocks, float* dst, int64_t n);
void to_float_q5_k(const void* blocks, float* dst, int64_t n);
void to_float_q6_k(const void* blocks, float* dst, int64_t n);

float dot_f32(const void* blocks, const float* x, int64_t n);
float dot_f16(const void* blocks, const float* x, int64_t n);
float dot_bf16(const void* blocks, const float* x, int64_t n);
float dot_q8_0(const void* blocks, const float* x, int64_t n);
float dot_q4_0(const void* blocks, const float* x, int64_t n);
float dot_q4_1(const void* blocks, const float* x, int64_t n);
float dot_q5_0(const void* blocks, const float* x, int64_t n);
float dot_q5_1(const void* blocks, const float* x, int64_t n);
float dot_q4_k(const void* blocks, const float* x, int64_t n);
float dot_q5_k(const void* blocks, const float* x, int64_t n);
float dot_q6_k(const void* blocks, const float* x, int64_t n);

// quants_levels_avx2.cpp: QuantTraits::to_levels of these types (the reference's levels, scales, mins).
void levels_q8_0(const void* w, int8_t* q, float* scale, float* min, int64_t n);
void levels_q4_0(const void* w, int8_t* q, float* scale, float* min, int64_t n);
void levels_q5_0(const void* w, int8_t* q, float* scale, float* min, int64_t n);
void levels_q4_k(const void* w, int8_t* q, float* scale, float* min, int64_t n);
void levels_q5_k(const void* w, int8_t* q, float* scale, float* min, int64_t n);
void levels_q6_k(const void* w, int8_t* q, float* scale, float* min, int64_t n);

// quants_q8_avx2.cpp: twins of the quants::ref functions above.
void quantize_q8a(const float* x, void* dst, int64_t n);
void quantize_q8k(const float* x, void* dst, int64_t n);
float vec_dot_q8_0(const void* w, const void* xq, int64_t n);
float vec_dot_q4_0(const void* w, const void* xq, int64_t n);
float vec_dot_q4_1(const void* w, const void* xq, int64_t n);
float vec_dot_q5_0(const void* w, const void* xq, int64_t n);
float vec_dot_q5_1(const void* w, const void* xq, int64_t n);
float vec_dot_q4_k(const void* w, const void* xq, int64_t n);
float vec_dot_q5_k(const void* w, const void* xq, int64_t n);
float vec_dot_q6_k(const void* w, const void* xq, int64_t n);
void quantize_q8x2(const float* x, void* dst, int64_t n);
float vec_dot_x2_q8_0(const void* w, const void* xq, int64_t n);
float vec_dot_x2_q4_0(const void* w, const void* xq, int64_t n);
float vec_dot_x2_q4_1(const void* w, const void* xq, int64_t n);
float vec_dot_x2_q5_0(const void* w, const void* xq, int64_t n);
float vec_dot_x2_q5_1(const void* w, const void* xq, int64_t n);
float vec_dot_x2_q4_k(const void* w, const void* xq, int64_t n);
float vec_dot_x2_q5_k(const void* w, const void* xq, int64_t n);
float vec_dot_x2_q6_k(const void* w, const void* xq, int64_t n);
// QuantTraits::vec_dot_x2_cols of the same types.
void vec_dot_x2_cols_q8_0(const void* w, const void* xq, size_t xq_stride, int64_t n, int ncols, float* out);
void vec_dot_x2_cols_q4_0(const void* w, const void* xq, size_t xq_stride, int64_t n, int ncols, float* out);
void vec_dot_x2_cols_q4_1(const void* w, const void* xq, size_t xq_stride, int64_t n, int ncols, float* out);
void vec_dot_x2_cols_q5_0(const void* w, const void* xq, size_t xq_stride, int64_t n, int ncols, float* out);
void vec_dot_x2_cols_q5_1(const void* w, const void* xq, size_t xq_stride, int64_t n, int ncols, float* out);
void vec_dot_x2_cols_q4_k(const void* w, const void* xq, size_t xq_stride, int64_t n, int ncols, float* out);
void vec_dot_x2_cols_q5_k(const void* w, const void* xq, size_t xq_stride, int64_t n, int ncols, float* out);
void vec_dot_x2_cols_q6_k(const void* w, const void* xq, size_t xq_stride, int64_t n, int ncols, float* out);

}  // namespace avx2

// AVX-512 (F, BW, VL, VNNI) int8x2 dots, two 32-element blocks per vector (quants_q8_avx512.cpp);
// chosen by the table where quants_use_avx512().
namespace avx512 {

float vec_dot_x2_q8_0(const void* w, const void* xq, int64_t n);
float vec_dot_x2_q4_0(const void* w, const void* xq, int64_t n);
float vec_dot_x2_q5_0(const void* w, const void* xq, int64_t n);
float vec_dot_x2_q4_k(const void* w, const void* xq, int64_t n);
float vec_dot_x2_q5_k(const void* w, const void* xq, int64_t n);
float vec_dot_x2_q6_k(const void* w, const void* xq, int64_t n);
void vec_dot_x2_cols_q8_0(const void* w, const void* xq, size_t xq_stride, int64_t n, int ncols, float* out);
void vec_dot_x2_cols_q4_0(const void* w, const void* xq, size_t xq_stride, int64_t n, int ncols, float* out);
void vec_dot_x2_cols_q5_0(const void* w, const void* xq, size_t xq_stride, int64_t n, int ncols, float* out);
void vec_dot_x2_cols_q4_k(const void* w, const void* xq, size_t xq_stride, int64_t n, int ncols, float* out);
void vec_dot_x2_cols_q5_k(const void* w, const void* xq, size_t xq_stride, int64_t n, int ncols, float* out);
void vec_dot_x2_cols_q6_k(const void* w, const void* xq, size_t xq_stride, int64_t n, int ncols, float* out);

}  // namespace avx512
}  // namespace minfer::quants
