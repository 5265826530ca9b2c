// Products of quantized matrices with a few dozen to a few hundred columns on the f16 tensor cores
// (quant_mma_f16.cu): each weight dequantized to half in registers (its block's scale and minimum
// rounded to half, then one rounding), times x in half (split_f16), summed in f32 by mma.sync m16n8k16.
// The dequantize-then-cuBLAS path writes and reads every weight as a half in memory each step; here the
// weights are read once, as blocks. The thread blocks of one wave share the matrix's stages in equal
// ranges (stream-K), and rows cut between ranges add their pieces in range order; the cuts depend on the
// shape and the device alone, so each output's arithmetic depends on its row and column only and the
// product is batch invariant over its range of widths.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/cuda/quant_cuda.h"

namespace minfer::cuda {

// Whether matmul_mma_f16 takes w: a matrix mma_fits takes whose rows are whole shared-memory stages
// (K-quants, or 32-element formats with a multiple of four blocks a row).
bool mma_f16_fits(const QMatrix& w);

// How matmul_mma_f16 divides w's rows among thread blocks, for tests and benchmarks: stream-K ranges
// (some rows cut between two or three of them when cut_rows), or rows split evenly.
struct MmaF16Division {
    bool stream_k, cut_rows;
};
MmaF16Division mma_f16_division(const QMatrix& w);

// Floats of matmul_mma_f16's scratch (the pieces of rows cut between ranges) and its tickets for nt
// columns of w.
size_t mma_f16_scratch_floats(const QMatrix& w, int64_t nt);
size_t mma_f16_tickets(const QMatrix& w, int64_t nt);

// y[t][r] = sum_i half(w[r][i]) * x16[t][i] + bias[r] (bias may be null) + res[t][r] (res may be null,
// may alias y) for t < nt; x16 is [nt][n_in] halves, 16-byte aligned; scratch holds
// mma_f16_scratch_floats(w, nt) floats, tickets mma_f16_tickets(w, nt) counters that are zero (each
// launch leaves them so).
void matmul_mma_f16(const QMatrix& w, const void* x16, int64_t nt, float* y, const float* bias,
                    const float* res, float* scratch, unsigned* tickets, Stream s);

}  // namespace minfer::cuda
