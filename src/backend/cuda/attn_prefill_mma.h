// Prefill attention on the f16 tensor cores at f32 accuracy (attn_prefill_mma.cu): the same causal GQA
// attention as attention_prefill (ops_cuda.h) for head_dim 64 and 128, every operand carried as two
// halves. A block per 64 query rows of a head walks key tiles of 64 from key 0, with no split of the keys,
// so a row's result depends only on its query and its keys.
#pragma once
#include <cstdint>

#include "backend/cuda/ops_cuda.h"

namespace minfer::cuda {

// Whether attention_prefill_mma serves the shape: head_dim 64 or 128, whole GQA groups, no sliding window
// and no sinks (attention_prefill serves those).
bool attention_prefill_mma_fits(const AttnShape& a, int64_t nt);
// Whether its grid (a block per 64 rows of a head) has a block for every SM. A smaller grid leaves SMs
// idle, where attention_prefill splits the keys instead (H200, Qwen2.5-0.5B's 14 heads at 512 rows:
// pp512 98,690 tok/s against 116,279 with the f32 kernel; Qwen2.5-7B's 28 heads: 27,413 against 25,842).
bool attention_prefill_mma_fills(const AttnShape& a, int64_t nt);
// out: [nt][n_head * head_dim]; query t sees rows [0, pos[t]] of its sequence. K and V rows 16-byte
// aligned. Throws on a shape attention_prefill_mma_fits refuses.
void attention_prefill_mma(const float* q, const KvRegion& r, const KvSlots& at, int64_t nt,
                           const AttnShape& a, float* out, Stream s, AttnRows rows = AttnRows::kAll);

}  // namespace minfer::cuda
