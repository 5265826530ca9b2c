// The int16 prefill GEMM: Y[t][o] = sum_i W[o][i] * X[t][i] (+ bias[o]) for the quantized types, with the
// activations as int16 levels (the decode path's int8x2 blocks, x ~ d * (254 hi + lo) per 32 elements:
// error <= max |x| / 64516 of the block) and the weights as their integer levels (QuantTraits::
// to_levels), multiplied in integers (AVX-512 VNNI vpdpwssd: 32 products per instruction, twice the f32
// FMA rate) and scaled in f32 once per level block of 16 or 32 elements.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/cpu/threadpool.h"
#include "quant/quants.h"

namespace minfer::cpu::i16 {

// W is [n_out][n_in] rows of `q` blocks (row_bytes each), X [nt][n_in] f32, Y [nt][n_out]. Needs
// q.to_levels and quants_use_avx512().
void gemm(const QuantTraits& q, const uint8_t* w, int64_t n_in, int64_t n_out, const float* x, int64_t nt,
          float* y, const float* bias, ThreadPool& pool);

// A few tokens (decode), each output bit for bit what gemm gives that token: 16 rows' levels at a time
// (to_levels' copy, or for Q8_0, Q4_0, Q5_0, Q4_K and Q6_K the blocks themselves, unpacked once for up to
// kGemvGroup tokens) against each token's int16 levels, their pair products folded into per-row block sums
// rather than the rows packed k-major, and the same f32 chain with a row in each lane. Each panel's weights
// are read from memory once for all nt tokens. gemm_ref is its scalar twin. Needs what gemm needs.
void gemv(const QuantTraits& q, const uint8_t* w, int64_t n_in, int64_t n_out, const float* x, int64_t nt,
          float* y, const float* bias, ThreadPool& pool);

// ---- Products that share their activations (cpu::moe_ffn: an expert's tokens packed once for its gate
// and up rows, and every expert's panels in one pool dispatch) ----

// nt tokens' int8x2 levels as gemv reads them (`rows`: levels [nt][n_in], steps and sums [nt][n_in / 32])
// or as gemm does (groups of kTokens, as Group: pairs [n_in / 2][kTokens], steps and sums
// [n_in / 32][kTokens] per group). reset() sizes the buffers, which only grow; pack() fills one token, and
// different tokens may be packed concurrently.
struct Tokens {
    int64_t nt = 0, n_in = 0;
    bool rows = false;
    std::vector<int16_t> levels;  // rows
    std::vector<int32_t> pairs;   // groups
    std::vector<float> d, s;

    void reset(int64_t n_tokens, int64_t n, bool as_rows);
    void pack(int64_t t, const float* x);  // x: token t's n_in activations
};

// y[t * n_out + o] = W_o . X_t (+ bias[o]) for the rows o of panel p (p * kRows .. at most kRows, below
// n_out) of W [n_out][n_in] and every token t of x: gemv's arithmetic where x.rows, else gemm's (the same
// bits). Needs what gemm needs.
void panel(const QuantTraits& q, const uint8_t* w, int64_t n_out, const Tokens& x, int64_t p, float* y,
           const float* bias);

// Scalar twin, single-threaded: the same levels, the same integer sums and the same f32 operations in the
// same order, so gemm gives its bits.
void gemm_ref(const QuantTraits& q, const uint8_t* w, int64_t n_in, int64_t n_out, const float* x, int64_t nt,
              float* y, const float* bias);

// ---- Internal: the operands of the micro-kernels (gemm_i16_avx512.cpp) ----

inline constexpr int64_t kRows = 16;    // weight rows per panel: one vector of 16 int32 lanes
inline constexpr int64_t kTokens = 12;  // tokens per activation group: 12 accumulator chains

// A weight panel: q[p * 16 + r] holds row r's levels of elements 2p (low half) and 2p + 1 (high half)
// ([n_in / 2, 16] int16 pairs); scale and min [n_in / level_block, 16]. Rows past nr are zeros.
struct Panel {
    const int32_t* q;
    const float* scale;
    const float* min;
};

// An activation group: q[p * 12 + t] holds token t's levels of elements 2p and 2p + 1 ([n_in / 2, 12]
// int16 pairs); d and s [n_in / 32, 12]: the block's step and the sum of the values it represents.
struct Group {
    const int32_t* q;
    const float* d;
    const float* s;
};

// y[t * y_stride + r] (r < nr) = W_r . X_t (+ bias[r]) for the T tokens of the group: micros[T - 1].
using MicroFn = void (*)(const Panel& w, const Group& x, int64_t n_in, float* y, int64_t y_stride, int64_t nr,
                         const float* bias);

// y[r] (r < nr) = row r . x (+ bias[r]) for 16 rows given by their levels, scales and minimums
// (to_levels: [16][n_in] and [16][n_in / level_block]; rows past nr are computed, not stored) and gemv's
// x (int16 levels [n_in], steps and sums [n_in / 32]): the micro-kernels' arithmetic for one token.
using RowsFn = void (*)(const int8_t* levels, const float* scale, const float* min, const int16_t* xq,
                        const float* xd, const float* xs, int64_t n_in, float* y, int64_t nr,
                        const float* bias);

// RowsFn's arithmetic for 16 rows of Q8_0, Q4_0, Q5_0, Q4_K or Q6_K (w: the first row's blocks, row_bytes
// apart) and the tokens the function is made for (blocks_dot's nt; x token-major: levels [nt][n_in], steps
// and sums [nt][n_in / 32]; y[t * y_stride + r]), their levels, scales and minimums read straight from the
// blocks; the next_bytes at next (the following panel) are prefetched on the way.
using BlocksFn = void (*)(const uint8_t* w, size_t row_bytes, const int16_t* xq, const float* xd,
                          const float* xs, int64_t n_in, float* y, int64_t y_stride, int64_t nr,
                          const float* bias, const uint8_t* next, size_t next_bytes);
inline constexpr int kGemvGroup = 4;  // tokens a BlocksFn takes at most

namespace avx512 {
const MicroFn* micros(int level_block, bool level_min);  // nullptr for other block sizes
// Panel::q from 16 rows of int8 levels ([16, n_in], n_in a multiple of 32).
void pack_rows(const int8_t* rows, int64_t n_in, int32_t* q);
// Token t of a Group: x's int8x2 levels (quantize_q8x2's arithmetic) as pairs, steps and sums.
void pack_token(const float* x, int64_t n_in, int64_t t, int32_t* q, float* d, float* s);
// x's int8x2 levels as pack_token computes them, one int16 row ([n_in]), with the blocks' steps and sums.
void token_row(const float* x, int64_t n_in, int16_t* q, float* d, float* s);
RowsFn rows_dot(int level_block, bool level_min);  // nullptr for other block sizes
// For nt (1 .. kGemvGroup) tokens of Q8_0, Q4_0, Q5_0, Q4_K or Q6_K; nullptr for the other types.
BlocksFn blocks_dot(GgmlType type, int nt);
}  // namespace avx512

}  // namespace minfer::cpu::i16
