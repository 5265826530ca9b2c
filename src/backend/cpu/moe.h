// Mixture-of-experts FFN on the CPU (op::MoeFfn): each token's routing from its router logits, then the
// experts' products grouped by expert, so each expert's weights are read once per forward for all the
// tokens routed to it. Experts whose products take the integer dots (decode, small batches) run together,
// one pool dispatch for all their gate and up rows and one for their down rows; so do those whose products
// take the int16 GEMM (prefill on AVX-512 VNNI) or the f32 tiles (prefill elsewhere), their weight panels
// claimed one at a time by the threads; the others take one cpu::matmul per expert and projection over the
// gathered rows.
//
//   cpu::MoeExperts w{...};                    // the stacked weights, as the GGUF holds them
//   cpu::moe_ffn(w, o, x, logits, nt, y, pool, decode, invariant, scratch);
//
// A token's output is sum_j p_j * down_j(act(gate_j x, up_j x)) added in selection order (act: SwiGLU or
// gpt-oss's clamped form; each product plus its expert's bias where the model has them), its expert
// products computed by cpu::matmul: with `invariant`, each row's bits are those of the token alone, so a
// sequence's tokens do not depend on what else is in the batch.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/cpu/gemm_i16.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/threadpool.h"
#include "graph/op.h"
#include "quant/quants.h"

namespace minfer::cpu {

// One token's routing: ids[k] the k experts of highest probability (the lower id first on ties), in
// descending order, and w[k] their probabilities (softmax or sigmoid of the logits [n_expert], or the
// softmax of the k chosen logits alone), divided by their sum when `norm`.
void moe_route(const float* logits, int64_t n_expert, int64_t k, ExpertGating gating, bool norm, int32_t* ids,
               float* w);

// The stacked expert matrices, row-major as the GGUF stores them: expert e's gate and up rows are
// e * n_ff .. (e + 1) * n_ff - 1 of [n_ff * n_expert][n_embd], its down rows e * n_embd .. of
// [n_embd * n_expert][n_ff].
struct MoeExperts {
    const QuantTraits *q_gate, *q_up, *q_down;
    const void *gate, *up, *down;
    int64_t n_embd, n_ff, n_expert;
    // Optional per-expert biases: expert e's at b_gate + e * n_ff, b_up + e * n_ff, b_down + e * n_embd.
    const float *b_gate = nullptr, *b_up = nullptr, *b_down = nullptr;
};

// Buffers moe_ffn grows and reuses across calls.
struct MoeScratch {
    std::vector<int32_t> ids, order;  // [nt * k] routing; (t, j) pairs grouped by expert
    std::vector<int32_t> where;       // [nt * k] each pair's index in order
    std::vector<int64_t> first;       // [n_expert + 1] where each expert's pairs begin in order
    std::vector<float> weights;       // [nt * k]
    // In the grouped order: [nt * k][n_embd], [nt * k][n_ff] (gate, up), [nt * k][n_embd].
    std::vector<float> x, gate, up, out;
    std::vector<int32_t> fused;               // the experts computed together by the integer dots
    std::vector<uint8_t> xq_gate, xq_up, hq;  // their quantized inputs and activations (moe.cpp)
    std::vector<int32_t> wide;                // the experts computed together by the int16 GEMM
    std::vector<i16::Tokens> xt, ht;          // [wide] their packed inputs and activations (moe.cpp)
    std::vector<int32_t> tiled;               // the experts computed together by the f32 tiles
    std::vector<int64_t> packed_at;           // [tiled + 1] where each one's packed columns begin
    std::vector<float> xp, hp;                // their packed inputs and activations (moe.cpp)
};

// y [nt][n_embd] = the MoE FFN of x [nt][n_embd] with router logits [nt][o.n_expert].
void moe_ffn(const MoeExperts& w, const op::MoeFfn& o, const float* x, const float* logits, int64_t nt,
             float* y, ThreadPool& pool, DecodeDot decode, bool invariant, MoeScratch& s);

// Scalar reference twin: each token alone, each expert through matmul_ref, sums in double.
void moe_ffn_ref(const MoeExperts& w, const op::MoeFfn& o, const float* x, const float* logits, int64_t nt,
                 float* y);

}  // namespace minfer::cpu
