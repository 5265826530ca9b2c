// Gemma 3 (gemma-3-1b/4b/12b/27b, text): embeddings scaled by sqrt(n_embd); Qwen3's attention (per-head
// Q/K RMSNorm) in five local sliding-window layers to every global one; RMSNorm before and after both
// the attention and the FFN; a GeGLU FFN (GELU in its tanh form). The GGUF's norm weights already hold
// Gemma's 1 + w. Local layers turn RoPE with base 10000 (or rope.freq_base_swa) and no scaling; global
// ones with rope.freq_base and the file's linear scaling. No logit soft-capping in Gemma 3.
#include <cmath>

#include "models/blocks.h"
#include "models/registry.h"

namespace minfer {

namespace {

// Layers il with (il + 1) % 6 != 0 attend within the window (llama.cpp's swa pattern for gemma3).
constexpr int kLocalPeriod = 6;
constexpr float kLocalRopeBase = 10000.0f;  // when the file has no rope.freq_base_swa
constexpr int kLayersOf27B = 62;            // the one size whose queries scale by n_embd / n_head

bool is_local(const Hparams& hp, int il) {
    return hp.n_swa > 0 && (il + 1) % kLocalPeriod != 0;
}

AttnOptions layer_attention(const Model& m, int il) {
    const Hparams& hp = m.hp;
    AttnOptions o = attention_options(m, QkNormKind::PerHead);
    // query_pre_attn_scalar: head_dim, except 27B's n_embd / n_head.
    const int64_t pre = hp.n_layer == kLayersOf27B ? hp.n_embd / hp.n_head : hp.head_dim;
    o.scale = float(1.0 / std::sqrt(double(pre)));
    if (is_local(hp, il)) {
        o.window = hp.n_swa;
        o.rope_base = hp.rope_base_swa > 0 ? hp.rope_base_swa : kLocalRopeBase;
        o.rope_scale = 1.0f;
    }
    return o;
}

}  // namespace

ComputeGraph build_gemma3(const Model& m, const GraphParams& p) {
    GraphBuilder b;
    const GraphInputs in = declare_inputs(b, p);
    const float eps = m.hp.rms_eps;
    NodeId h = b.scale(embed(b, m, in.tokens), std::sqrt(float(m.hp.n_embd)));  // [n_embd, nt]
    for (int il = 0; il < m.hp.n_layer; ++il) {
        b.set_layer(il);
        const LayerWeights& l = m.layers[size_t(il)];
        const bool last = il == m.hp.n_layer - 1;

        NodeId x = b.rms_norm(h, l.attn_norm, eps);                       // [n_embd, nt]
        x = self_attention(b, m, il, x, in, p, layer_attention(m, il));   // [n_head * head_dim, nt]
        x = b.rms_norm(attn_output(b, m, il, x), l.attn_post_norm, eps);  // [n_embd, nt]
        h = residual_add(b, h, x, in, last);                              // [n_embd, nt | n_out]

        x = b.rms_norm(h, l.ffn_norm, eps);
        h = b.add(h, b.rms_norm(geglu_ffn(b, m, il, x), l.ffn_post_norm, eps));  // [n_embd, nt | n_out]
    }
    output_head(b, m, h, p);  // [n_vocab, n_out] | [n_out] ids | [n_embd, n_out] hidden
    return std::move(b).build();
}

}  // namespace minfer
