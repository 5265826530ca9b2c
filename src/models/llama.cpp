// Llama (2/3, TinyStories) and Mistral files of its layout: pre-norm decoder without biases, GQA, RoPE on
// adjacent pairs (the GGUF converter permutes Q/K rows so this equals HF's rotate-half), separate output
// matrix. Where the file sets attention.sliding_window (Mistral 7B v0.1's 4096), every layer attends
// within it, as Mistral's HF config applies it.
#include "models/blocks.h"
#include "models/registry.h"

namespace minfer {

ComputeGraph build_llama(const Model& m, const GraphParams& p) {
    GraphBuilder b;
    const GraphInputs in = declare_inputs(b, p);
    NodeId h = embed(b, m, in.tokens);  // [n_embd, nt]
    AttnOptions attn = attention_options(m, QkNormKind::None);
    attn.window = m.hp.n_swa;
    for (int il = 0; il < m.hp.n_layer; ++il) {
        b.set_layer(il);
        const LayerWeights& l = m.layers[size_t(il)];
        const bool last = il == m.hp.n_layer - 1;

        NodeId x = b.rms_norm(h, l.attn_norm, m.hp.rms_eps);         // [n_embd, nt]
        x = self_attention(b, m, il, x, in, p, attn);                // [n_q_embd, nt]
        h = residual_add(b, h, attn_output(b, m, il, x), in, last);  // [n_embd, nt | n_out]

        x = b.rms_norm(h, l.ffn_norm, m.hp.rms_eps);
        h = b.add(h, swiglu_ffn(b, m, il, x, p));
    }
    output_head(b, m, h, p);  // [n_vocab, n_out] | [n_out] ids | [n_embd, n_out] hidden
    return std::move(b).build();
}

}  // namespace minfer
