// A mixture of experts on the GPU (op::MoeFfn), as cpu::moe_ffn computes it and without a host round
// trip, so a decode step stays one captured graph:
//
//   moe_route(logits, nt, r, slots, s);           // each token's experts and weights, grouped by expert
//   matvec_swiglu_experts(gate, up, n_ff, x, {slots.order, slots.ids, nt * k, k}, h, s);  // quant_cuda.h
//   matvec_experts(down, n_embd, h, {slots.order, slots.ids, nt * k, 0}, out, bias, s);
//   moe_combine(out, slots, nt, k, n_embd, y, s);  // y[t] = sum_j w[t][j] * out[t][j]
//
// The pairs run grouped by expert, so the thread blocks of one expert run side by side and share its
// weights in L2; a pair's bits do not depend on where it runs nor on the others. Wider steps (outside
// the invariant mode) take each expert's pairs as the columns of one tensor-core product instead, its
// weights read once for all of them:
//
//   moe_route(logits, nt, r, slots, s, &cols);     // and each expert's columns and tiles
//   quantize_x_mma_columns(x, n_embd, cols.token, true, cols.n_cols, xq, s);     // quant_mma.h
//   matmul_mma_experts(gate, n_ff, xq, cols, g, bias, s);  ... up, act(g, u) = h, quantize h, down
//   moe_combine(out, {.., where = cols.col}, nt, k, n_embd, y, s);
#pragma once
#include <cstdint>

#include "backend/cuda/quant_cuda.h"
#include "backend/cuda/quant_mma.h"

namespace minfer::cuda {

// How router logits become probabilities (op's ExpertGating): a softmax over all experts, a sigmoid of
// each, or a softmax over the chosen experts' logits alone.
enum class Gating : uint8_t { kSoftmax, kSigmoid, kSoftmaxChosen };

struct MoeRouting {
    int64_t n_expert, k;  // experts, experts per token (k <= n_expert <= kMaxExperts)
    Gating gating;
    bool norm;  // the k weights divided by their sum
};
constexpr int64_t kMaxExperts = 4096;

// Device buffers of a step's pairs (t, j), pair t * k + j.
struct MoeSlots {
    int32_t* ids;    // [nt * k] each pair's expert: token t's k experts of highest logit, descending (the
                     // lower id first on ties)
    float* weights;  // [nt * k] each pair's probability
    int32_t* order;  // [nt * k] the pair at each position, grouped by expert (in no order within one)
    int32_t* where;  // [nt * k] each pair's position in order
};

// Bounds of the columns layout of `pairs` pairs (MoeColumns): each expert that has pairs pads them to a
// multiple of 8 columns and adds at most one partial tile.
int64_t moe_max_columns(int64_t pairs, int64_t n_expert);
int64_t moe_max_tiles(int64_t pairs, int64_t n_expert, int tile_cols);

// Routes nt tokens (logits [nt][n_expert]) into `slots`: cpu::moe_route's choice and weights (the
// probabilities in double), then the grouping; one thread block. With `cols`, also each expert's
// columns and tiles (MoeColumns, quant_mma.h) for the products per expert.
void moe_route(const float* logits, int64_t nt, const MoeRouting& r, const MoeSlots& slots, Stream s,
               const MoeColumns* cols = nullptr);

// y[t][i] = sum_j weights[t k + j] * out[where[t k + j]][i], added in j order from 0, for nt rows of d.
void moe_combine(const float* out, const MoeSlots& slots, int64_t nt, int64_t k, int64_t d, float* y,
                 Stream s);

}  // namespace minfer::cuda
