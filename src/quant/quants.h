// Quant formats as a traits table (as ggml's type_traits): block layout, dequantize, dot with a float
// vector, a scalar quantizer, and for the quantized types an int8 path (activations quantized to int8
// blocks, integer dot products). Each entry has scalar reference twins (`*_ref`) that the SIMD versions
// are tested against; the plain pointers point at the best version this CPU supports (chosen at startup).
#pragma once
#include <cstddef>
#include <cstdint>

#include "gguf/ggml_type.h"

namespace minfer {

// Activation format of a type's int8 dot (vec_dot_q8). These are minfer's own layouts with f32 scales
// (quants_impl.h), named after the ggml blocks they follow: Q8_0 = 32 elements with a block sum, Q8_K = 256
// elements with 16-element sums. F32: the type has no int8 dot and keeps f32 activations.
enum class VecDotType { F32, Q8_0, Q8_K };

// Most activation rows one QuantTraits::vec_dot_x2_cols call takes.
inline constexpr int kX2MaxCols = 4;

struct QuantTraits {
    GgmlType type;
    const char* name;
    int block_size;    // elements per block
    size_t type_size;  // bytes per block
    // dst[0..n) = dequantized blocks; n is a multiple of block_size.
    void (*to_float)(const void* blocks, float* dst, int64_t n);
    // sum_i w[i] * x[i] over n elements of quantized row `blocks` and float vector `x`.
    float (*dot)(const void* blocks, const float* x, int64_t n);
    void (*to_float_ref)(const void* blocks, float* dst, int64_t n);
    float (*dot_ref)(const void* blocks, const float* x, int64_t n);
    // Scalar round-to-nearest quantizer (no search), for tests, bench/synth and writing files.
    void (*from_float_ref)(const float* x, void* blocks, int64_t n);

    // int8 activations (nullptr when vec_dot_type is F32): quantize_act turns n floats into
    // act_row_bytes(n) bytes of vec_dot_type blocks (scale = max |x| / 127, round to nearest even);
    // vec_dot_q8 is sum_i w[i] * x[i] with x given that way, integer products summed exactly per block.
    VecDotType vec_dot_type;
    void (*quantize_act)(const float* x, void* xq, int64_t n);
    float (*vec_dot_q8)(const void* blocks, const void* xq, int64_t n);
    void (*quantize_act_ref)(const float* x, void* xq, int64_t n);
    float (*vec_dot_q8_ref)(const void* blocks, const void* xq, int64_t n);

    // int8x2 activations, for the types with an int8 path (the low-bit ones, Q2_K, Q3_K, IQ4_NL, IQ4_XS and
    // MXFP4, only where quants_use_avx512(); elsewhere nullptr, as for the float types): quantize_x2 turns n
    // floats into act_x2_row_bytes(n) bytes of two-level blocks, x ~ d * (254 * hi + lo) per 32 elements
    // (quants_impl.h); vec_dot_x2 is sum_i w[i] * x[i] with x given that way: two integer dots per block
    // (hi and lo, the weight levels unpacked once) merged exactly as 254 * hi-sum + lo-sum, minimum terms
    // times the block sum of the represented x. Activation error <= max |x| / 64516 per block of 32,
    // 1/254 of int8's.
    void (*quantize_x2)(const float* x, void* xq, int64_t n);
    float (*vec_dot_x2)(const void* blocks, const void* xq, int64_t n);
    void (*quantize_x2_ref)(const float* x, void* xq, int64_t n);
    float (*vec_dot_x2_ref)(const void* blocks, const void* xq, int64_t n);
    // One weight row against ncols (1..kX2MaxCols) int8x2 activation rows, row c at xq + c * xq_stride:
    // out[c] is bit for bit vec_dot_x2(blocks, row c, n) (the same lanes, accumulator chains and fold
    // order per column), the weight levels, scales and minimums unpacked once for all columns, so a
    // batch of tokens reads each weight row once. vec_dot_x2_cols_ref runs vec_dot_x2_ref per column.
    void (*vec_dot_x2_cols)(const void* blocks, const void* xq, size_t xq_stride, int64_t n, int ncols,
                            float* out);
    void (*vec_dot_x2_cols_ref)(const void* blocks, const void* xq, size_t xq_stride, int64_t n, int ncols,
                                float* out);

    // Integer levels, for the int16 prefill GEMM (nullptr for the float types, Q2_K, and the other low-bit
    // formats where they lack int8x2 dots): to_levels writes a row's n weights as int8 levels q with
    // w[i] = fma(scale[i / level_block], q[i], -min[i / level_block]), bit for bit to_float_ref's w; min is
    // all zeros unless level_min. level_block is 32, or 16 for Q6_K and Q3_K (each 16-element sub-block has
    // its own scale). to_levels_ref is the scalar twin, whose bytes the SIMD version gives.
    void (*to_levels)(const void* blocks, int8_t* q, float* scale, float* min, int64_t n);
    void (*to_levels_ref)(const void* blocks, int8_t* q, float* scale, float* min, int64_t n);
    int level_block;
    bool level_min;
};

// nullptr when minfer cannot compute with `t` (callers turn that into a clear error).
const QuantTraits* quant_traits(GgmlType t);
size_t quant_row_bytes(const QuantTraits& q, int64_t n);  // bytes of a row of n elements
size_t act_row_bytes(const QuantTraits& q, int64_t n);    // bytes of n activations as vec_dot_type
size_t act_x2_row_bytes(int64_t n);                       // bytes of n activations as int8x2 blocks

// True when the AVX2/FMA/F16C versions were selected on this CPU.
bool quants_use_avx2();
// AVX-512 F/BW/VL/VNNI present (the OS saving the ZMM state included) and MINFER_NO_AVX512 unset: the
// table's int8x2 dots (Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K, and the low-bit formats') and the prefill
// micro-kernels then use 512-bit vectors.
bool quants_use_avx512();

}  // namespace minfer
