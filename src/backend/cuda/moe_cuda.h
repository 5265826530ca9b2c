// A mixture of experts on the GPU (op::MoeFfn), as cpu::moe_ffn computes it and without a host round
// trip, so a decode step stays one captured graph:
//
//   moe_route(logits, nt, r, slots, s);           // each token's experts and weights, grouped by expert
//   matvec_swiglu_experts(gate, up, n_ff, x, {slots.order, slots.ids, nt * k, k}, h, s);  // quant_cuda.h
//   matvec_experts(down, n_embd, h, {slots.order, slots.ids, nt * k, 0}, out, bias, s);
//   moe_combine(out, slots, nt, k, n_embd, y, s);  // y[t] = sum_j w[t][j] * out[t][j]
//
// The pairs run grouped by expert, so the thread blocks of one expert run side by side and share its
// weights in L2; a pair's bits do not depend on where it runs nor on the others.
#pragma once
#include <cstdint>

#include "backend/cuda/quant_cuda.h"

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

// Routes nt tokens (logits [nt][n_expert]) into `slots`: cpu::moe_route's choice and weights (the
// probabilities in double), then the grouping; one thread block.
void moe_route(const float* logits, int64_t nt, const MoeRouting& r, const MoeSlots& slots, Stream s);

// y[t][i] = sum_j weights[t k + j] * out[where[t k + j]][i], added in j order from 0, for nt rows of d.
void moe_combine(const float* out, const MoeSlots& slots, int64_t nt, int64_t k, int64_t d, float* y,
                 Stream s);

}  // namespace minfer::cuda
