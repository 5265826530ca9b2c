// gpt-oss (gpt-oss-20b, gpt-oss-120b): attention with Q/K/V and output biases and a learned sink logit per
// head, in sliding-window layers (the even ones) alternating with global ones; YaRN RoPE on every layer;
// a mixture of experts whose router has a bias and weighs each token's chosen experts by the softmax of
// their logits alone, each expert a SwiGLU clamped at +-7 (gate: sigmoid(1.702 g), up: u + 1) with biases
// on all three products. The FFN's input norm is named post_attention_norm. YaRN's correction range is
// not rounded to whole dimensions (HF's truncate = false, which the model's config sets).
#include <cmath>
#include <numbers>

#include "models/blocks.h"
#include "models/registry.h"

namespace minfer {

namespace {

// Layers il with il % 2 == 0 attend within the window (llama.cpp's swa pattern 2 for gpt-oss).
bool is_local(const Hparams& hp, int il) {
    return hp.n_swa > 0 && il % 2 == 0;
}

// The pair index where RoPE makes `rotations` turns over the original context (YaRN's correction dim).
double correction_dim(const Hparams& hp, double rotations) {
    return double(hp.n_rot) * std::log(double(hp.yarn_orig_ctx) / (rotations * 2 * std::numbers::pi)) /
           (2 * std::log(double(hp.rope_base)));
}

meta::Yarn yarn(const Hparams& hp) {
    if (hp.yarn_factor <= 0) return {};
    const double low = std::max(0.0, correction_dim(hp, hp.yarn_beta_fast));
    const double high = std::min(double(hp.n_rot - 1), correction_dim(hp, hp.yarn_beta_slow));
    return {low, high, 0.1 * std::log(double(hp.yarn_factor)) + 1.0};
}

AttnOptions layer_attention(const Model& m, int il) {
    AttnOptions o = attention_options(m, QkNormKind::None);
    o.yarn = yarn(m.hp);
    if (o.yarn.on()) o.rope_scale = 1.0f / m.hp.yarn_factor;
    if (is_local(m.hp, il)) o.window = m.hp.n_swa;
    return o;
}

}  // namespace

ComputeGraph build_gptoss(const Model& m, const GraphParams& p) {
    GraphBuilder b;
    const GraphInputs in = declare_inputs(b, p);
    NodeId h = embed(b, m, in.tokens);  // [n_embd, nt]
    for (int il = 0; il < m.hp.n_layer; ++il) {
        b.set_layer(il);
        const LayerWeights& l = m.layers[size_t(il)];
        const bool last = il == m.hp.n_layer - 1;

        NodeId x = b.rms_norm(h, l.attn_norm, m.hp.rms_eps);             // [n_embd, nt]
        x = self_attention(b, m, il, x, in, p, layer_attention(m, il));  // [n_head * head_dim, nt]
        h = residual_add(b, h, attn_output(b, m, il, x), in, last);      // [n_embd, nt | n_out]

        x = b.rms_norm(h, l.ffn_norm, m.hp.rms_eps);  // post_attention_norm
        h = b.add(h, moe_ffn(b, m, il, x, ExpertGating::SoftmaxWeight, ExpertAct::SwiGLUOai));
    }
    output_head(b, m, h, p);  // [n_vocab, n_out] | [n_out] ids | [n_embd, n_out] hidden
    return std::move(b).build();
}

}  // namespace minfer
