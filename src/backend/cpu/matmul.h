// Quantized-weight matrix multiply on the CPU: Y[t][o] = sum_i W[o][i] * X[t][i] (+ bias[o]).
// W is row-major [n_out][n_in] in the blocks of `q` (straight from the GGUF mapping, no copy);
// X is [nt][n_in] f32, Y is [nt][n_out] f32. Rows of W are split across the pool's threads.
// One column (decode) of a type with integer dots runs the DecodeDot chosen. More columns of a quantized
// type with integer levels on AVX-512 VNNI run the int16 GEMM's arithmetic (gemm_i16.h: the int8x2
// activation levels, integer products) unless decode is DecodeDot::F32: its few-token form for batched
// decode, the GEMM for prefill. Elsewhere up to kIntDotMaxTokens columns run the integer dots a few per
// weight load (vec_dot_x2_cols) and wider ones keep f32 activations (weights dequantized against a
// register-blocked f32 tile). Decode of other types: the f32 quant dot.
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
// GEMM's arithmetic for every nt: its few-token form (i16::gemv) up to gemv_max_tokens(q) columns, the
// GEMM itself for more. Other types with the chosen integer dot run it for every nt, each column bit for bit
// as decode (nt == 1) computes it: activations quantized per column, weights read once for all columns
// (vec_dot_x2_cols). Other types (and DecodeDot::F32) run the f32 tiles for every nt, decode included.
// invariant == false: the fastest path for each nt, as described above.
//
// Without invariance, where the int16 GEMM runs (AVX-512 VNNI, a type with levels, decode not F32), one
// column takes the chosen integer dot, 2 to gemv_max_tokens(q) columns the GEMM's few-token form
// (i16::gemv: each panel's weights unpacked once for up to four tokens, read from memory once for all)
// and wider products the GEMM; elsewhere up to kIntDotMaxTokens columns take the integer dots (weights
// read once for all columns) and wider ones the f32 tiles. gemv beat both the dots and the GEMM in batched
// decode up to 12 columns of the 32-element formats and 8 of the K-quants; beyond, the GEMM did as well or
// better (bench/STANDING-CPU.md, "Batched decode").
inline constexpr int64_t kIntDotMaxTokens = 16, kGemvMaxTokens32 = 12, kGemvMaxTokensK = 8;
int64_t int_dot_max_tokens(const QuantTraits& q, DecodeDot decode);  // 1 where the int16 GEMM runs
int64_t gemv_max_tokens(const QuantTraits& q);

void matmul(const QuantTraits& q, const void* w, int64_t n_in, int64_t n_out, const float* x, int64_t nt,
            float* y, const float* bias, ThreadPool& pool, DecodeDot decode = DecodeDot::F32,
            bool invariant = false);

// Whether matmul of nt columns of q runs the integer dots (int8 or int8x2 activations, one dot per (row,
// column)), as described above.
bool int_dots_run(const QuantTraits& q, int64_t nt, DecodeDot decode, bool invariant);
// Whether it runs the int16 GEMM's arithmetic (i16::gemv or i16::gemm: the same bits).
bool int16_runs(const QuantTraits& q, int64_t nt, DecodeDot decode, bool invariant);

// matmul's integer dots a row range at a time, for callers that gather many small products into one pool
// dispatch (cpu::moe_ffn): each column quantized once by `quantize` (and shared by every product whose
// IntDot has the same quantize), then rows [o0, o1) of a product computed on the calling thread by
// int_dot_rows, each (row, column) bit for bit what matmul computes where int_dots_run.
struct IntDot {
    void (*quantize)(const float* x, void* xq, int64_t n);  // one column of n_in activations
    size_t bytes;                                           // ... as this many bytes
    float (*dot)(const void* w, const void* xq, int64_t n);
    // Several columns per weight row (QuantTraits::vec_dot_x2_cols); null for int8, dotted per column.
    void (*cols)(const void* w, const void* xq, size_t xq_stride, int64_t n, int ncols, float* out);
};
IntDot int_dot(const QuantTraits& q, DecodeDot decode, int64_t n_in);

// y [nt][n_out] = W [n_out][n_in] x + bias, the nt columns of x quantized by int_dot(*q, ...) at
// xq + t * stride.
struct IntDotProduct {
    const QuantTraits* q;
    const void* w;
    int64_t n_in, n_out;
    const uint8_t* xq;
    size_t stride;
    int64_t nt;
    float* y;
    const float* bias;  // [n_out] or null
};
void int_dot_rows(const IntDot& d, const IntDotProduct& p, int64_t o0, int64_t o1);

// Whether matmul of nt columns of q runs the f32 tiles (weights dequantized against packed f32 x).
bool tiles_run(const QuantTraits& q, int64_t nt, DecodeDot decode, bool invariant);

// matmul's f32 tiles a weight panel at a time, for callers that gather many products' panels into one
// pool dispatch (cpu::moe_ffn): nt columns of x [nt][n_in] packed once by tile_pack into xp
// (tile_pack_floats(nt, n_in) floats), then tile_panel computes rows p * kTileRows .. (at most
// kTileRows, below n_out) of y [nt][n_out] (+ bias), on the calling thread, each output bit for bit what
// matmul computes where tiles_run.
inline constexpr int64_t kTileRows = 16;
size_t tile_pack_floats(int64_t nt, int64_t n_in);
void tile_pack(const float* x, int64_t nt, int64_t n_in, float* xp);
void tile_panel(const QuantTraits& q, const void* w, int64_t n_in, int64_t n_out, const float* xp, int64_t nt,
                int64_t p, float* y, const float* bias);

// Weight bytes a thread of the row-wise paths claims at a time (ThreadPool::parallel_for_stealing): long
// enough to keep the hardware prefetcher streaming.
inline constexpr size_t kDotChunkBytes = 32 << 10;

// Scalar reference twin (dequantize with to_float_ref, double accumulation), single-threaded.
void matmul_ref(const QuantTraits& q, const void* w, int64_t n_in, int64_t n_out, const float* x, int64_t nt,
                float* y, const float* bias);

}  // namespace minfer::cpu
