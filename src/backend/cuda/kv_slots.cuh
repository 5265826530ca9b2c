// Device-side addressing of the KV regions through a KvSlots (ops_cuda.h): the slot of row j of a
// token's sequence, and how many rows a sequence can hold.
#pragma once
#include <cstdint>

#include "backend/cuda/ops_cuda.h"

namespace minfer::cuda {

// The block-table row of token t's sequence (null when unpaged).
__device__ __forceinline__ const int32_t* seq_blocks(const KvSlots& at, int64_t t) {
    return at.table ? at.table + int64_t(at.slot[t]) * at.max_blocks : nullptr;
}

// Slot of row j of the sequence whose block-table row is `blocks` (null: slot j).
__device__ __forceinline__ int64_t row_slot(const int32_t* blocks, int32_t shift, int64_t j) {
    if (!blocks) return j;
    return int64_t(blocks[j >> shift]) << shift | (j & ((int64_t(1) << shift) - 1));
}

// Rows one sequence can hold: its block-table row's blocks, or the whole region when unpaged.
__device__ __forceinline__ int64_t seq_capacity(const KvSlots& at, const KvRegion& r) {
    return at.table ? int64_t(at.max_blocks) << at.block_shift : r.n_ctx;
}

// The keys token t sees: rows [0, pos[t]] of its sequence, at most its capacity (none for a negative
// position).
__device__ __forceinline__ int keys_seen(const KvSlots& at, const KvRegion& r, int64_t t) {
    const int64_t limit = int64_t(at.pos[t]) + 1, cap = seq_capacity(at, r);
    return int(limit < 0 ? 0 : limit < cap ? limit : cap);
}

// The slot token t's own K and V go to, or -1 when its position is outside its sequence's capacity.
__device__ __forceinline__ int64_t own_slot(const KvSlots& at, const KvRegion& r, int64_t t) {
    const int64_t p = at.pos[t];
    if (p < 0 || p >= seq_capacity(at, r)) return -1;
    const int64_t s = row_slot(seq_blocks(at, t), at.block_shift, p);
    return s < r.n_ctx ? s : -1;
}

// Whether token t is alone in its chunk of the batch: no neighbouring row of the same sequence (with no
// table, the batch is one sequence: alone when nt == 1).
__device__ __forceinline__ bool single_row(const KvSlots& at, int64_t t, int64_t nt) {
    if (!at.table) return nt == 1;
    return (t == 0 || at.slot[t - 1] != at.slot[t]) && (t + 1 == nt || at.slot[t + 1] != at.slot[t]);
}

// Whether a launch for `rows` serves token t.
__device__ __forceinline__ bool serves_row(AttnRows rows, const KvSlots& at, int64_t t, int64_t nt) {
    return rows == AttnRows::kAll || single_row(at, t, nt) == (rows == AttnRows::kSingle);
}

}  // namespace minfer::cuda
