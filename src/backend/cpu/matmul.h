// Quantized-weight matrix multiply on the CPU: Y[t][o] = sum_i W[o][i] * X[t][i] (+ bias[o]).
// W is row-major [n_out][n_in] in the blocks of `q` (straight from the GGUF mapping, no copy);
// X is [nt][n_in] f32, Y is [nt][n_out] f32. Rows of W are split across the pool's threads.
// Up to kIntDotMaxTokens columns (decode, batched decode) of a type with integer dots run the DecodeDot
// chosen, one column at a time (nt == 1) or a few per weight load (vec_dot_x2_cols). Wider products
// (prefill) of a quantized type on AVX-512 VNNI run the int16 GEMM (gemm_i16.h: the int8x2 activation
// levels, integer products) unless decode is DecodeDot::F32; otherwise they keep f32 activations
// (weights dequantized against a register-blocked f32 tile). Decode of other types: the f32 quant dot.
#pragma once
#include <cstdint>

#include "backend/cpu/threadpool.h"
#include "quant/quants.h"

namespace minfer::cpu {

// How decode dots a quantized row with x: F32 dequantizes the weights in registers against f32 x (f32
// rounding only); Int8 quantizes x once to int8 blocks and runs integer dots per row, as llama.cpp does
// (activation error up to 1/254 of each block's max |x|: the golden references diverge); Int8x2 quantizes
// x once to two int8 levels per element (q.quantize_x2) and runs two integer dots per block (error up to
// 1/64516 of the block max |x|).
enum class DecodeDot { F32, Int8, Int8x2 };

// invariant: each column's bits do not depend on nt nor on its position among the columns (batched
// decode of many sequences). With Int8x2 on AVX-512 VNNI, the types with integer levels take the int16
// GEMM's arithmetic for every nt: the GEMM itself for several columns, its one-token form (i16::gemv)
// for one. Other types with the chosen integer dot run it for every nt, each column bit for bit as
// decode (nt == 1) computes it: activations quantized per column, weights read once for all columns
// (vec_dot_x2_cols). Other types (and DecodeDot::F32) run the f32 tiles for every nt, decode included.
// invariant == false: the fastest path for each nt, as described above.
//
// Without invariance, products of up to int_dot_max_tokens(q, decode) columns of a type with the chosen
// integer dot take those dots (weights read once for all columns), wider ones the int16 GEMM where it
// runs (AVX-512 VNNI, a type with levels, decode not F32), else the f32 tiles. Where the GEMM runs, the
// dots keep up to kIntDotBeforeGemm columns (kIntDotBeforeGemmQ8_0 for Q8_0, whose levels are its bytes):
// in the model, weights streamed from memory, the GEMM's one pass over each panel wins from there
// (PERF-NOTES.md, "The dots' width before the int16 GEMM"); elsewhere kIntDotMaxTokens.
inline constexpr int64_t kIntDotMaxTokens = 16, kIntDotBeforeGemm = 8, kIntDotBeforeGemmQ8_0 = 12;
int64_t int_dot_max_tokens(const QuantTraits& q, DecodeDot decode);

void matmul(const QuantTraits& q, const void* w, int64_t n_in, int64_t n_out, const float* x, int64_t nt,
            float* y, const float* bias, ThreadPool& pool, DecodeDot decode = DecodeDot::F32,
            bool invariant = false);

// Scalar reference twin (dequantize with to_float_ref, double accumulation), single-threaded.
void matmul_ref(const QuantTraits& q, const void* w, int64_t n_in, int64_t n_out, const float* x, int64_t nt,
                float* y, const float* bias);

}  // namespace minfer::cpu
