// Kernels for Q4_K matrices in the tiled layout (quant_cuda.h, tile_matrix): the tensor-core decode
// matrix-vector products and dequantization. quant_matvec.cu and quant_dequant.cu dispatch here when a
// QMatrix is tiled.
#pragma once
#include <cstdint>

#include "backend/cuda/quant_cuda.h"

namespace minfer::cuda {

// y = W x (+ bias) (+ res) for one token; as matvec.
void matvec_tiled(const QMatrix& w, const float* x, float* y, const float* bias, const float* res, Stream s);
// y = silu(gate x) * (up x) for one token; as matvec_swiglu.
void matvec_swiglu_tiled(const QMatrix& gate, const QMatrix& up, const float* x, float* y, Stream s);
// out[r][i] = w[r][i]; Out is float or __half (bit-exact with the block layout's dequantization).
void dequant_tiled_f32(const QMatrix& w, float* out, Stream s);
void dequant_tiled_f16(const QMatrix& w, void* out, Stream s);

}  // namespace minfer::cuda
