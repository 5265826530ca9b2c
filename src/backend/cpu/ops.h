// CPU kernels for the non-matmul ops. Activations are token-major rows of f32: x[t * n + i].
// Each kernel works on one row (or one token) so the backend can split rows across threads;
// scalar reference twins live in ops_ref.h and back the randomized op-vs-reference tests.
#pragma once
#include <cstdint>

namespace minfer::cpu {

// How pair i of n_rot turns at position p: by theta = p * scale * base^(-2i/n_rot), or with YaRN (yarn_high >
// 0) by p times the blend of base^(-2i/n_rot) * scale and base^(-2i/n_rot), the latter's weight
// 1 - clamp((i - yarn_low) / (yarn_high - yarn_low), 0, 1), cos and sin then times mscale. In double.
struct RopeFreq {
    float base;
    float scale = 1.0f;
    double yarn_low = 0.0, yarn_high = 0.0, mscale = 1.0;

    void cos_sin(int32_t pos, int64_t i, int64_t n_rot, float& c, float& s) const;  // pair i at pos
};

// y = x / sqrt(mean(x^2) + eps) * w, one row of n.
void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps);
// In place on one token row of n_head heads of head_dim: rotate the first n_rot dims of each head by pos.
// neox=false: adjacent pairs (x[2i], x[2i+1]); neox=true: halves (x[i], x[i + n_rot/2]).
// The angles are RopeFreq's.
void rope(float* x, int64_t n_head, int64_t head_dim, int64_t n_rot, int32_t pos, const RopeFreq& f,
          bool neox);
void silu(const float* x, float* y, int64_t n);                    // y = x * sigmoid(x)
void swiglu(const float* g, const float* u, float* y, int64_t n);  // y = silu(g) * u
// y = gelu(g) * u with GELU's tanh form: gelu(x) = x / 2 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))).
void geglu(const float* g, const float* u, float* y, int64_t n);
void scale(const float* x, float s, float* y, int64_t n);  // y = x * s
void add(const float* a, const float* b, float* y, int64_t n);
// The index of the largest of x[0, n) (n > 0), the lowest on ties.
int32_t argmax(const float* x, int64_t n);
void mul(const float* a, const float* b, float* y, int64_t n);

// One sequence's rows of a paged KV region: logical row j (its position) lives at physical row
// blocks[j / 2^block_shift] * 2^block_shift + j % 2^block_shift; rows are `stride` floats apart and k, v
// point at the region's first row (plus the KV head's column offset). Blocks hold at least 16 rows
// (block_shift >= 4), so the kernels' groups of 8 or 16 rows starting at a multiple of 16 are contiguous.
struct KvRows {
    const float* k;
    const float* v;
    int64_t stride;
    const int32_t* blocks;
    int block_shift;
    int64_t physical(int64_t j) const {
        const int64_t mask = (int64_t(1) << block_shift) - 1;
        return int64_t(blocks[j >> block_shift]) << block_shift | (j & mask);
    }
    const float* k_row(int64_t j) const { return k + physical(j) * stride; }
    const float* v_row(int64_t j) const { return v + physical(j) * stride; }
};
inline constexpr int kMinBlockShift = 4;
// Rows 0..n_rows-1 stored one after another: one block holding them all.
KvRows contiguous_rows(const float* k, const float* v, int64_t stride, int64_t n_rows);

// Causal GQA attention for one query token over its sequence's rows first..n_kv_rows-1 of a KV region
// (first > 0: a sliding window). q: [n_head * hd] (this token); head h reads kv head h / (n_head /
// n_head_kv) at column offset (h / group) * hd of each row. out: [n_head * hd]. scratch: at least
// n_kv_rows * (n_head / n_head_kv) floats. The result depends on the rows' values only, not on where the
// blocks lie. sinks (optional, [n_head]): each head's sink logit, which joins the softmax's sum but
// weighs no row (gpt-oss).
void attention(const float* q, const KvRows& kv, float* out, int64_t n_head, int64_t n_head_kv, int64_t hd,
               int64_t first, int64_t n_kv_rows, float scale, float* scratch, const float* sinks = nullptr);
// gpt-oss's expert activation: g' = min(g, 7), u' = clamp(u, -7, 7), y = g' * sigmoid(1.702 g') * (u' + 1).
void swiglu_oai(const float* g, const float* u, float* y, int64_t n);

}  // namespace minfer::cpu
