// Qwen3-MoE (Qwen3-30B-A3B, Qwen3-235B-A22B): Qwen3's attention (per-head Q/K RMSNorm, no bias) with a
// mixture of experts in place of every dense FFN: a softmax router over expert_count experts, the
// expert_used_count most probable per token renormalised to sum 1, no shared expert.
#include "models/blocks.h"
#include "models/registry.h"

namespace minfer {

ComputeGraph build_qwen3moe(const Model& m, const GraphParams& p) {
    GraphBuilder b;
    const GraphInputs in = declare_inputs(b, p);
    NodeId h = embed(b, m, in.tokens);  // [n_embd, nt]
    for (int il = 0; il < m.hp.n_layer; ++il) {
        b.set_layer(il);
        const LayerWeights& l = m.layers[size_t(il)];
        const bool last = il == m.hp.n_layer - 1;

        NodeId x = b.rms_norm(h, l.attn_norm, m.hp.rms_eps);          // [n_embd, nt]
        x = self_attention(b, m, il, x, in, p, QkNormKind::PerHead);  // [n_head * head_dim, nt]
        h = residual_add(b, h, attn_output(b, m, il, x), in, last);   // [n_embd, nt | n_out]

        x = b.rms_norm(h, l.ffn_norm, m.hp.rms_eps);
        h = b.add(h, moe_ffn(b, m, il, x));  // [n_embd, nt | n_out]
    }
    output_head(b, m, h, p);  // [n_vocab, n_out] | [n_out] ids | [n_embd, n_out] hidden
    return std::move(b).build();
}

}  // namespace minfer
