// Products of quantized matrices with a few dozen to a few hundred columns on the f16 tensor cores
// (quant_mma_f16.cu): each weight dequantized to half in registers, exactly as dequant_f16 writes it,
// times x in half (split_f16), summed in f32 by mma.sync m16n8k16. The dequantize-then-cuBLAS path
// writes and reads every weight as a half in memory each step; here the weights are read once, as
// blocks. Each output's arithmetic depends on its row and column only (the row's blocks in order, split
// by shape alone), so the product is batch invariant over its range of widths.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/cuda/quant_cuda.h"

namespace minfer::cuda {

// Whether matmul_mma_f16 takes w: a matrix mma_fits takes whose rows are whole shared-memory stages
// (K-quants, or 32-element formats with a multiple of four blocks a row).
bool mma_f16_fits(const QMatrix& w);

// y[t][r] = sum_i half(w[r][i]) * x16[t][i] + bias[r] (bias may be null) + res[t][r] (res may be null,
// may alias y) for t < nt; x16 is [nt][n_in] halves, 16-byte aligned; scratch holds
// mma_scratch_floats(w, nt) floats (null when that is 0).
void matmul_mma_f16(const QMatrix& w, const void* x16, int64_t nt, float* y, const float* bias,
                    const float* res, float* scratch, Stream s);

}  // namespace minfer::cuda
