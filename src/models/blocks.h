// The building blocks the architecture files compose: graph inputs, self-attention (with the decode
// fusion classes), the SwiGLU FFN, the residual add that narrows to the n_out tail on the last layer,
// and the output head. Each reads only the model, the layer index and GraphParams (builder purity).
#pragma once
#include "graph/builder.h"
#include "models/model.h"

namespace minfer {

struct GraphInputs {
    NodeId tokens;  // [nt] i32
    KvIndex kv;     // positions [nt]; seq_slot [nt], block_table [max_blocks, max_seqs] when paged (data)
    // The sliding-window layers' index: kv, with window_block_table [max_blocks, max_seqs] for its table
    // when those layers keep their own blocks (CParams::window_ctx).
    KvIndex window_kv;
    NodeId out_ids;  // [n_out] i32: rows to keep after the last attention; -1 when n_out == nt
};

enum class QkNormKind : uint8_t { None, PerHead };  // PerHead: Qwen3's RMSNorm of each Q/K head

// One layer's attention settings beyond its weights; attention_options gives the model-wide ones
// (hyper-parameters' RoPE base and scale, 1/sqrt(head_dim), no window), which an architecture adjusts
// per layer (Gemma 3's local layers).
struct AttnOptions {
    QkNormKind qk_norm = QkNormKind::None;
    float rope_base = 10000.0f;
    float rope_scale = 1.0f;  // linear RoPE scaling: positions times this
    float scale = 1.0f;       // of the scores
    int64_t window = 0;       // a sliding window of this many positions; 0: every earlier position
    meta::Yarn yarn{};        // YaRN RoPE (off by default)
};
AttnOptions attention_options(const Model& m, QkNormKind qk_norm);

// Declares the input leaves at the graph head (out_ids too, though only the last layer reads it:
// a mid-graph input would split execution into extra backend segments).
GraphInputs declare_inputs(GraphBuilder& b, const GraphParams& p);

// The token embeddings: [nt] ids -> [n_embd, nt]. A vocabulary shard looks up its own rows (zeros for
// the others' tokens) and sums over the ranks.
NodeId embed(GraphBuilder& b, const Model& m, NodeId tokens);

// Q/K/V projections, optional Q/K norm, RoPE, KV store + load, causal GQA attention.
// x: [n_embd, nt] normed hidden state -> [n_q_embd, nt] attention output (before wo).
NodeId self_attention(GraphBuilder& b, const Model& m, int il, NodeId x, const GraphInputs& in,
                      const GraphParams& p, QkNormKind qk_norm);
NodeId self_attention(GraphBuilder& b, const Model& m, int il, NodeId x, const GraphInputs& in,
                      const GraphParams& p, const AttnOptions& o);

// The attention output projection, attn: [n_q_embd, nt] -> [n_embd, nt]. A shard whose attn_output is
// split by heads sums its partial products over the ranks; one whose attn_output's blocks do not split at
// a head boundary gathers every rank's heads and multiplies the whole matrix.
NodeId attn_output(GraphBuilder& b, const Model& m, int il, NodeId attn);

// down(silu(gate(x)) * up(x)); x: [n_embd, nt] -> [n_embd, nt]. A shard holds a slice of the n_ff
// columns and sums its partial down products over the ranks.
NodeId swiglu_ffn(GraphBuilder& b, const Model& m, int il, NodeId x, const GraphParams& p);

// down(gelu(gate(x)) * up(x)) with GELU's tanh form (Gemma); x: [n_embd, nt] -> [n_embd, nt].
NodeId geglu_ffn(GraphBuilder& b, const Model& m, int il, NodeId x);

// A mixture of experts: the router's logits [n_expert, nt], then each token's n_expert_used SwiGLU
// experts weighted by their probabilities (op::MoeFfn); x: [n_embd, nt] -> [n_embd, nt].
NodeId moe_ffn(GraphBuilder& b, const Model& m, int il, NodeId x);
// The same with the architecture's gating and expert activation (gpt-oss: the softmax of the chosen
// logits, the clamped SwiGLU); the router's and the experts' biases are added where the model has them.
NodeId moe_ffn(GraphBuilder& b, const Model& m, int il, NodeId x, ExpertGating gating, ExpertAct act);

// residual + cur; on the last layer with n_out < nt both operands are first narrowed to the out_ids rows,
// so the last FFN, final norm and lm_head run on n_out rows. -> [n_embd, nt or n_out].
NodeId residual_add(GraphBuilder& b, NodeId residual, NodeId cur, const GraphInputs& in, bool last_layer);

// Final RMSNorm and lm_head, marked as the graph output: [n_embd, n] -> [n_vocab, n]; with
// GraphOutput::Argmax each row's argmax: [n] i32; with GraphOutput::Hidden the normed rows themselves,
// [n_embd, n], and no lm_head. A vocabulary shard gathers every rank's logits first.
void output_head(GraphBuilder& b, const Model& m, NodeId h, const GraphParams& p);

}  // namespace minfer
