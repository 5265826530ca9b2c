// Products of quantized matrices with 2 to a few hundred columns on the int8 tensor cores (quant_mma.cu):
// the weights' integer levels times x quantized to two int8 levels per element (the CPU's int8x2,
// quant_cuda.h), as exact integer sums per 32-element block, scaled in f32 block by block in the order of
// the row. Each output's arithmetic depends on its row and its column alone, never on how many columns
// share the product, so the result is batch invariant, and the same for one column as for 64.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/cuda/quant_cuda.h"

namespace minfer::cuda {

// Whether matmul_mma takes w: Q4_K in the block layout, Q6_K padded (pad_matrix), Q8_0, Q5_0 or Q4_0,
// with rows a whole number of blocks. IQ4_NL and MXFP4 have readers too, which only the products per
// expert take (experts_mma_fits): the widths at which the backend picks each dense product were measured
// without them.
bool mma_fits(const QMatrix& w);

// Bytes of nt columns of n_in elements quantized by quantize_x_mma (16-byte aligned).
size_t mma_x_bytes(int64_t n_in, int64_t nt);

// Floats of scratch matmul_mma needs for w and nt columns: partial sums when it splits the rows' blocks
// between thread blocks (a split that depends on w's shape and the device, never on nt); 0 when unsplit.
size_t mma_scratch_floats(const QMatrix& w, int64_t nt);

// xq = x [nt][n_in] (n_in a multiple of 32) quantized per 32 elements as kInt8x2 (the same levels and
// steps as quantize_x8), in the layout matmul_mma reads.
void quantize_x_mma(const float* x, int64_t n_in, int64_t nt, void* xq, Stream s);

// Which kernel computes the product: Direct loads each block from global memory as it multiplies it;
// Staged copies the weights and x into shared memory stages ahead (cp.async), for rows of whole stages
// (K-quants, or a multiple of four 32-element blocks; otherwise Direct). Both give the same bits.
enum class MmaKernel : uint8_t { Auto, Direct, Staged };

// y[t][r] = sum_i w[r][i] * xq[t][i] + bias[r] (bias may be null) + res[t][r] (res may be null, may
// alias y) for t < nt; scratch holds mma_scratch_floats(w, nt) floats (null when that is 0).
void matmul_mma(const QMatrix& w, const void* xq, int64_t nt, float* y, const float* bias, const float* res,
                float* scratch, Stream s, MmaKernel kernel = MmaKernel::Auto);

// The experts of a mixture as tensor-core products: each expert's (token, expert) pairs are the columns
// of one product with its matrix, read once for all of them. The columns of one expert are consecutive
// and start at a multiple of 8; tiles of tile_cols columns (a multiple of 8) cover each expert's columns,
// so that a thread block's columns belong to one expert. cuda::moe_route lays them out on the device.
struct ExpertTile {
    int32_t expert;  // -1: no tile (the table has room for the most tiles any routing needs)
    int32_t col, cols;
    int32_t unused;
};
struct MoeColumns {
    int32_t* col;       // [pairs] each pair's column
    int32_t* token;     // [n_cols] each column's token; -1: padding
    ExpertTile* tiles;  // [n_tiles]
    int64_t n_cols;     // a multiple of 8
    int64_t n_tiles;
    int tile_cols;
};

// Whether matmul_mma_experts takes the stack w: mma_fits's formats, IQ4_NL or MXFP4 (block layout), with
// rows of whole stages (K-quants, or a multiple of four 32-element blocks). Tile widths it takes: 8, 16,
// 32 or 64 columns.
bool experts_mma_fits(const QMatrix& w);
bool experts_tile_fits(int tile_cols);

// xq = the columns of x quantized as quantize_x_mma does, n_cols of them (a multiple of 8): column c is
// row token[c] of x (gather), or row c (otherwise), and zeros where token[c] < 0.
void quantize_x_mma_columns(const float* x, int64_t n_in, const int32_t* token, bool gather, int64_t n_cols,
                            void* xq, Stream s);

// y[c][r] = row r of expert e . xq column c (+ bias[e rows + r] when bias is not null) for the columns c of
// every tile of expert e, where w stacks the experts' matrices of `rows` rows each (block layout, Q6_K
// padded; mma_fits) and xq holds cols.n_cols columns. Each output adds its row's blocks in order, never
// split: a column's bits depend on its expert, its x and nothing else.
void matmul_mma_experts(const QMatrix& w, int64_t rows, const void* xq, const MoeColumns& cols, float* y,
                        const float* bias, Stream s);

}  // namespace minfer::cuda
