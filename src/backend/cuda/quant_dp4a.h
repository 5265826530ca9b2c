// Q4_K and Q6_K decode products on int8 dot products (quant_dp4a.cu): matvec and matvec_swiglu dispatch
// here for one token of a matrix that takes x as int8 (QMatrix::xq); quantize_x8 and matvec_x8 live there
// too (quant_cuda.h).
#pragma once
#include <cstdint>

#include "backend/cuda/quant_cuda.h"

namespace minfer::cuda {

// y = W x (+ bias) (+ res) for one token, x quantized as matvec_int8_x describes; as matvec.
void matvec_dp4a(const QMatrix& w, const float* x, float* y, const float* bias, const float* res, Stream s);
// y = silu(gate x) * (up x) for one token, likewise; as matvec_swiglu.
void matvec_swiglu_dp4a(const QMatrix& gate, const QMatrix& up, const float* x, float* y, Stream s);

}  // namespace minfer::cuda
