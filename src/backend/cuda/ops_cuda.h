// The GPU's non-matmul ops: normalization, RoPE, element-wise ops, the KV store, attention over the
// persistent KV region and the fused QKV epilogue. Rows are token-major ([nt][d]); positions and ids
// are read on the device, so a captured CUDA graph replays for any position. All asynchronous on `s`.
#pragma once
#include <cstdint>

#include "backend/cuda/quant_cuda.h"

namespace minfer::cuda {

// y[r] = x[r] / rms(x[r]) * w for `rows` rows of d (QkNorm passes rows = nt * n_head, d = head_dim);
// when y_hi is not null, also y_hi = half(y), split_f16's hi (for the GEMM that reads y).
void rms_norm(const float* x, const float* w, float* y, int64_t d, int64_t rows, float eps, Stream s,
              void* y_hi = nullptr);

struct RopeShape {
    int64_t n_head, head_dim, n_rot;
    float freq_base;
    bool neox;                // pairs (i, i + n_rot/2) instead of (2i, 2i + 1)
    float freq_scale = 1.0f;  // linear RoPE scaling: positions times this
    // YaRN (yarn_high > 0): cpu::RopeFreq's blend of the scaled and unscaled frequencies, cos and sin
    // times yarn_mscale.
    double yarn_low = 0.0, yarn_high = 0.0, yarn_mscale = 1.0;
};
// y = RoPE(x) at positions pos[t] for nt rows of n_head * head_dim (y may alias x).
void rope(const float* x, float* y, const int32_t* pos, int64_t nt, const RopeShape& r, Stream s);

void add(const float* a, const float* b, float* y, int64_t n, Stream s);
void mul(const float* a, const float* b, float* y, int64_t n, Stream s);
void silu(const float* x, float* y, int64_t n, Stream s);
// y = silu(g) * u; y_hi as rms_norm's.
void swiglu(const float* g, const float* u, float* y, int64_t n, Stream s, void* y_hi = nullptr);
// y = gelu(g) * u, GELU's tanh form (cpu::geglu's formula).
void geglu(const float* g, const float* u, float* y, int64_t n, Stream s);
// y = min(g, 7) sigmoid(1.702 min(g, 7)) (clamp(u, -7, 7) + 1): gpt-oss's experts (cpu::swiglu_oai).
void swiglu_oai(const float* g, const float* u, float* y, int64_t n, Stream s);
void scale(const float* x, float factor, float* y, int64_t n, Stream s);  // y = x * factor

// y[t][i] += b[i] for nt rows of d (the bias of a GEMM).
void add_bias(float* y, const float* b, int64_t d, int64_t nt, Stream s);
// hi = half(x); lo = half(x - hi) when lo is not null: x ~ hi + lo to about 22 bits (GEMM activations).
void split_f16(const float* x, void* hi, void* lo, int64_t n, Stream s);

// ids[r] = the index of the largest of x[r][0, n), the lowest on ties (as cpu::argmax), for `rows` rows.
void argmax_rows(const float* x, int64_t n, int64_t rows, int32_t* ids, Stream s);

// out[t] = src[ids[t]] for rows of d floats.
void get_rows_f32(const float* src, int64_t d, const int32_t* ids, int64_t nt, float* out, Stream s);

// out[t][k * n + i] = src[k][t][i] for `ranks` blocks of rows x n: the rank-major blocks of an NCCL
// all-gather as rows that hold every rank's part, rank by rank (op::AllGather's layout).
void interleave_ranks(const float* src, int64_t n, int64_t rows, int ranks, float* out, Stream s);

// A layer's persistent K and V regions: [n_ctx][n_embd] f32 each (n_ctx token slots).
struct KvRegion {
    float* k;
    float* v;
    int64_t n_embd, n_ctx;
};

// Where the rows of each token's sequence live, read on the device: row j of token t's sequence is in
// slot table[slot[t] * max_blocks + j / 2^block_shift] * 2^block_shift + j % 2^block_shift (the paged
// layout), or in slot j when there is no table (the unpaged layout of one sequence). Token t itself is
// row pos[t]. Made from positions alone, it is the unpaged layout.
struct KvSlots {
    const int32_t* pos;              // [nt]
    const int32_t* slot = nullptr;   // [nt]: each token's block-table row; null: unpaged
    const int32_t* table = nullptr;  // [max_seqs][max_blocks]
    int32_t max_blocks = 1, block_shift = 0;
    KvSlots(const int32_t* positions) : pos(positions) {}  // NOLINT: positions alone are the unpaged layout
    KvSlots(const int32_t* positions, const int32_t* slots, const int32_t* tables, int32_t blocks,
            int32_t shift)
        : pos(positions), slot(slots), table(tables), max_blocks(blocks), block_shift(shift) {}
};
// Rows t < nt of k and v ([nt][n_embd]) into their slots (rows past their sequence's capacity skipped).
void kv_store(const float* k, const float* v, const KvSlots& at, int64_t nt, const KvRegion& r, Stream s);

struct AttnShape {
    int64_t n_head, n_head_kv, head_dim;
    int64_t q_stride;  // floats between token rows of q (q may sit in a wider buffer)
    float scale;
    bool one_token_splits = false;  // attention: split every row's keys as one decode row's (invariant)
    int64_t window = 0;  // > 0: a query at position p sees keys p - window + 1 .. p only (sliding window)
    const float* sinks = nullptr;  // optional [n_head] on the device: each head's sink logit (gpt-oss)
};

// Which query rows a launch serves: all, or in a paged batch the rows alone in their chunk (a decode
// token: no neighbouring row of its sequence) or the others (prefill chunks). A batch of both runs the
// per-row kernel (attention) on the single rows and the query-tiled one (attention_prefill) on the chunks.
enum class AttnRows : uint8_t { kAll, kSingle, kChunked };

// Causal GQA attention of nt query rows against the region: query t sees rows [0, pos[t]] of its sequence
// (with a window, rows [pos[t] - window + 1, pos[t]]).
// out: [nt][n_head * head_dim]. Decode (nt == 1, or any nt with one_token_splits) splits contexts of
// more than 64 keys over up to attention_splits() blocks per head, one thread-block cluster, which merge
// their partial softmaxes (1 where clusters are missing).
// Where the keys are not split (attention_splits 1), a block may serve every query head of a KV head,
// reading each K and V row once for them all (PerKvHead, groups of at most 8 heads, head_dim <= 128),
// instead of one query head (PerHead): the same bits either way. Auto takes PerKvHead for wide grids.
enum class AttnBlocks : uint8_t { Auto, PerHead, PerKvHead };
int attention_splits(const AttnShape& a, int64_t nt, int64_t n_ctx);
bool attention_blocks_per_kv_head(const AttnShape& a, int64_t nt, int64_t n_ctx);  // whether PerKvHead runs
void attention(const float* q, const KvRegion& r, const KvSlots& at, int64_t nt, const AttnShape& a,
               float* out, Stream s, AttnRows rows = AttnRows::kAll, AttnBlocks blocks = AttnBlocks::Auto);
// The same attention for prefill (nt > kMaxMatvecTokens), query-tiled: a block per 32 query rows of a
// head walks key tiles of 32 in shared memory with an online softmax, no score matrix in memory; the keys
// a block walks end at its rows' largest position (read on the device, in any order). A block whose rows
// belong to several sequences (paged) takes them one sequence after another. When the grid is small,
// the keys are split over the blocks of a thread-block cluster, which merge their softmaxes.
// head_dim % 4 == 0, at most 256; K and V rows 16-byte aligned.
void attention_prefill(const float* q, const KvRegion& r, const KvSlots& at, int64_t nt, const AttnShape& a,
                       float* out, Stream s, AttnRows rows = AttnRows::kAll);

// Prefill attention's middle step (the products around it run in cuBLAS): score rows
// scores[h][t][0..n_kv) become causal softmax rows in place, entries past pos[t] set to zero (and, with a
// window > 0, those before pos[t] - window + 1).
void causal_softmax(float* scores, const int32_t* pos, int64_t nt, int64_t n_head, int64_t n_kv, Stream s,
                    int64_t window = 0, const float* sinks = nullptr);

// The region's first n_kv key and value rows with each KV head repeated for its query heads:
// k_out[j][h * head_dim + i] = k[j][(h / group) * head_dim + i], likewise v ([n_kv][n_head * head_dim]),
// so that prefill attention runs as one batched product over all heads. head_dim % 4 == 0.
void expand_kv_heads(const KvRegion& r, int64_t n_kv, int64_t n_head, int64_t group, int64_t head_dim,
                     float* k_out, float* v_out, Stream s);

// RoPE's cos and sin for positions [0, n_pos): cs[(p * n_rot / 2 + i) * 2 + {0, 1}] for pair i, as
// rope_cos_sin computes them (in double), filled once by rope_table. qkv_epilogue reads it instead of
// evaluating the angles (null cs, or a position past n_pos: it evaluates them).
struct RopeTable {
    const float* cs = nullptr;
    int64_t n_pos = 0;
};
void rope_table(const RopeShape& r, int64_t n_pos, float* cs, Stream s);

// The QKV fusions' epilogue for nt rows: biases (nullable), optional per-head RMSNorm of Q and K
// (Qwen3), RoPE on Q and K (at pos[t]), Q to q_out ([nt][n_head * head_dim]), K and V into their slots.
struct QkvEpilogue {
    RopeShape rope;
    int64_t n_head_kv;
    const float *bq, *bk, *bv;     // [n_q], [n_kv], [n_kv] or null
    const float *q_norm, *k_norm;  // [head_dim] or null
    float eps;
    int64_t q_stride, k_stride, v_stride;  // floats between token rows of the three inputs
    RopeTable table;
};
void qkv_epilogue(const float* q, const float* k, const float* v, const KvSlots& at, int64_t nt,
                  const QkvEpilogue& e, float* q_out, const KvRegion& r, Stream s);

}  // namespace minfer::cuda
