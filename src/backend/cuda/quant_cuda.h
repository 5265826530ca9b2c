// Quantized weights on the GPU, read in their GGUF block layout or, for Q4_K, in a tiled layout made at
// upload for the tensor cores (same bytes), or for Q6_K with its blocks padded to 16-byte alignment:
// matrix-vector products for decode, dequantization to half for the cuBLAS prefill GEMM, and
// embedding-row gathers. Activations stay f32 (except for matvec_int8_x); weights are dequantized in
// registers. All calls are asynchronous on `s` and capturable into a CUDA graph (no allocation, no
// synchronization).
#pragma once
#include <cstdint>

#include "gguf/ggml_type.h"

struct CUstream_st;

namespace minfer::cuda {

using Stream = CUstream_st*;

// F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, and the low-bit Q2_K, Q3_K, IQ4_NL,
// IQ4_XS, MXFP4: matvec, matvec_swiglu, the dequantizations and get_rows take each of them in the block
// layout. The other layouts and kernels take fewer (tiles_fit, pads_fit, dp4a_fits; mma_fits in
// quant_mma.h): of the low-bit types only the experts' tensor-core products take IQ4_NL and MXFP4, so
// their decode runs the f32-x matvec and their dense prefill dequant_f16 and cuBLAS.
bool quant_supported(GgmlType t);

// How one token's products with a matrix take x (matvec_int8_x): in f32, or quantized per 32 elements
// for int8 dot products, with one level (llama.cpp's arithmetic) or two (the CPU's default decode).
enum class XQuant : uint8_t { kF32, kInt8, kInt8x2 };

// Rows are output features: w holds n_out rows of n_in elements, each row in its block layout.
struct QMatrix {
    GgmlType type;
    const void* data;  // device
    int64_t n_in, n_out;
    bool tiled = false;        // rows in tile_matrix's layout instead of the block layout
    bool padded = false;       // Q6_K blocks padded to 16-byte aligned 224 bytes by pad_matrix
    XQuant xq = XQuant::kF32;  // how one token's products take x (matvec_int8_x; int8 needs dp4a_fits)
};

// Q6_K's 210-byte blocks are only 2-byte aligned, so its kernels load them 32 bits at a time and join
// the words with funnel shifts. pad_matrix copies a matrix with each block padded to 224 bytes (6.7% more
// bytes), which every kernel here then loads 16 bytes at a time. Whether type t has the padded layout:
bool pads_fit(GgmlType t);
// Bytes of one padded row of n_in elements of type t (pads_fit).
int64_t padded_row_bytes(GgmlType t, int64_t n_in);
// Writes `raw` (block layout, pads_fit) to dst (16-byte aligned) in the padded layout.
void pad_matrix(const QMatrix& raw, void* dst, Stream s);

// Whether tile_matrix takes this matrix: Q4_K, n_in <= 8192, n_out a multiple of 16. Rows 16k on of a
// tiled matrix start at the same byte offset as in the block layout, so a tiled concatenation of such
// matrices holds each of them tiled.
bool tiles_fit(GgmlType t, int64_t n_in, int64_t n_out);

// Writes `raw` (block layout, tiles_fit) to dst in the tiled layout: per 16 rows and 256 columns, the
// levels in the order of the tensor cores' operand fragments (2048 bytes), then the 16 rows' scales as
// they were (256 bytes). matvec, matvec_swiglu and the dequantizations read it; get_rows does not.
void tile_matrix(const QMatrix& raw, void* dst, Stream s);

// y[t][r] = sum_i w[r][i] * x[t][i] + bias[r] (bias may be null) + res[t][r] (res may be null, may
// alias y) for t < nt, 1 <= nt <= kMaxMatvecTokens. x: [nt][n_in], y: [nt][n_out].
constexpr int kMaxMatvecTokens = 8;
// Whether one token's products with w take x as int8: w.xq is not kF32 and nt == 1. Then matvec and
// matvec_swiglu run int8 dot products (quant_dp4a.h) on x quantized per 32 consecutive elements:
// - kInt8 (llama.cpp's arithmetic, the CPU's MINFER_INT8_DECODE=1): d * q, d = max|x| / 127, q = x *
//   (127 / max|x|) rounded to nearest even (q = 0 when max|x| = 0);
// - kInt8x2 (the CPU's default decode, quantize_q8x2): d * (254 hi + lo), d = max|x| / (127 * 254), hi =
//   rint(x / (254 d)), lo = rint((x - 254 d hi) / d), within max|x| / 64516 of x;
// and the result is the exact product with that x up to f32 rounding.
bool matvec_int8_x(const QMatrix& w, int64_t nt);
// Whether a matrix may take x as int8: Q4_K in the block layout or Q6_K padded, n_in a multiple of 256 up
// to 18944 (two-level x staged in 46 KB).
bool dp4a_fits(GgmlType t, int64_t n_in);

// matvec's int8 kernels quantize x in every thread block, which pays for matrices with many rows per
// block. For the others, x can be quantized once: quantize_x8 writes one token's x (n_in a multiple of
// 256) in format xq to x8 (int8_x_bytes(xq, n_in) bytes, 16-byte aligned), and matvec_x8 computes y = W x
// (+ bias) (+ res) from it for a matrix with that w.xq, the same values as matvec with nt = 1.
size_t int8_x_bytes(XQuant xq, int64_t n_in);
void quantize_x8(const float* x, int64_t n_in, XQuant xq, void* x8, Stream s);
void matvec_x8(const QMatrix& w, const void* x8, float* y, const float* bias, const float* res, Stream s);
void matvec(const QMatrix& w, const float* x, int64_t nt, float* y, const float* bias, const float* res,
            Stream s);

// y[t][r] = silu(gate_r . x_t) * (up_r . x_t): the decode FFN's two projections and SwiGLU in one
// kernel. gate and up have the same type and shape; 1 <= nt <= kMaxMatvecTokens.
void matvec_swiglu(const QMatrix& gate, const QMatrix& up, const float* x, int64_t nt, float* y, Stream s);

// The experts of a mixture (op::MoeFfn): n routed (token, expert) pairs, each a one-token product with its
// expert's matrix. A stack holds the experts' matrices back to back, `rows` rows each (w.n_out = rows *
// n_expert, block layout, x taken in f32 whatever w.xq says). Position i < n computes pair order[i] with
// expert ids[order[i]] into y row i; its x is row order[i] / k of x (k > 0: the tokens' rows, pair t * k
// + j reading token t) or row i (k == 0: the rows of an earlier expert product, in position order).
// The kernel layout depends on the matrix alone, so a pair's bits do not depend on the others routed.
struct ExpertPairs {
    const int32_t* order;  // [n] device: the pair at each position (grouped by expert: cuda::moe_route)
    const int32_t* ids;    // [pairs] device: each pair's expert
    int64_t n;
    int64_t k;
};
// y[i] = expert's rows . x_row (+ the expert's bias, bias + e * rows, when bias is not null).
void matvec_experts(const QMatrix& w, int64_t rows, const float* x, const ExpertPairs& p, float* y,
                    const float* bias, Stream s);
// y[i] = silu(gate rows . x_row) * (up rows . x_row): matvec_swiglu over the pairs.
void matvec_swiglu_experts(const QMatrix& gate, const QMatrix& up, int64_t rows, const float* x,
                           const ExpertPairs& p, float* y, Stream s);

// out[r][i] = w[r][i] as half (out is __half*), all n_out rows.
void dequant_f16(const QMatrix& w, void* out, Stream s);
// out[r][i] = w[r][i] as f32, all n_out rows.
void dequant_f32(const QMatrix& w, float* out, Stream s);

// out[t] = row ids[t] of w as f32, t < nt; ids are device int32 already checked to be in range.
void get_rows(const QMatrix& w, const int32_t* ids, int64_t nt, float* out, Stream s);

}  // namespace minfer::cuda
