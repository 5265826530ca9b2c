// Quant formats as a traits table (as ggml's type_traits): block layout, dequantize, dot with a float
// vector, and a scalar quantizer. Each entry has scalar reference twins (`*_ref`) that the SIMD versions
// are tested against; `to_float`/`dot` point at the best version this CPU supports (chosen at startup).
#pragma once
#include <cstddef>
#include <cstdint>

#include "gguf/ggml_type.h"

namespace minfer {

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
};

// nullptr when minfer cannot compute with `t` (callers turn that into a clear error).
const QuantTraits* quant_traits(GgmlType t);
size_t quant_row_bytes(const QuantTraits& q, int64_t n);  // bytes of a row of n elements

// True when the AVX2/FMA/F16C versions were selected on this CPU.
bool quants_use_avx2();

}  // namespace minfer
