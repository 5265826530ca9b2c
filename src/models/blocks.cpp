#include "models/blocks.h"

#include <cmath>

namespace minfer {

namespace {

// Graphs of at most this many tokens (decode steps and batches) take the QKV fusions; longer prefill
// chunks keep three products, whose cuBLAS GEMMs the prefill figures were measured with.
constexpr int64_t kMaxFusedQkvTokens = 64;

// The fusions need a GPU participant and are toggled by GraphParams. The QKV ones (one product with the
// concatenated weight, one epilogue kernel) take any graph of up to kMaxFusedQkvTokens tokens; the FFN
// one is a matrix-vector kernel and takes single-token graphs only.
bool qkv_fusion(const GraphParams& p) {
    return p.cparams.gpu && p.cparams.fuse_qkv && p.n_tokens <= kMaxFusedQkvTokens;
}

bool ffn_fusion(const GraphParams& p) {
    return p.cparams.gpu && p.cparams.fuse_ffn && p.n_tokens == 1;
}

meta::Paging paging(const GraphParams& p) {
    return {p.cparams.block(), p.cparams.max_blocks()};
}

// A layer's KV region: n_ctx slots, or window_ctx for a sliding-window layer when those keep their own
// blocks.
meta::Kv kv_meta(const Model& m, const GraphParams& p, bool windowed) {
    const int64_t slots = windowed && p.cparams.window_ctx > 0 ? p.cparams.window_ctx : p.cparams.n_ctx;
    return {m.hp.n_kv_embd(), slots, paging(p), p.cparams.kv_type};
}

meta::Rope rope_meta(const Hparams& hp, int64_t n_head, const AttnOptions& o) {
    return {n_head, hp.head_dim, hp.n_rot, o.rope_base, o.rope_scale, o.yarn};
}

meta::FusedQkv fused_qkv_meta(const Model& m, const LayerWeights& l, const meta::Kv& kv,
                              const AttnOptions& o) {
    const Hparams& hp = m.hp;
    return meta::FusedQkv{{l.wq, l.bq},
                          {l.wk, l.bk},
                          {l.wv, l.bv},
                          l.q_norm,
                          l.k_norm,
                          hp.rms_eps,
                          rope_meta(hp, hp.n_head, o),
                          hp.n_head_kv,
                          hp.rope_style,
                          kv};
}

// The unfused chain: three matmuls (bias inline), optional per-head norms, RoPE on Q and K, K/V store.
NodeId project_qkv(GraphBuilder& b, const Model& m, int il, NodeId x, const KvIndex& at, const meta::Kv& kv,
                   const AttnOptions& o) {
    const Hparams& hp = m.hp;
    const LayerWeights& l = m.layers[size_t(il)];
    NodeId q = b.matmul(x, l.wq, l.bq);  // [n_q_embd, nt]
    NodeId k = b.matmul(x, l.wk, l.bk);  // [n_kv_embd, nt]
    NodeId v = b.matmul(x, l.wv, l.bv);  // [n_kv_embd, nt]
    if (o.qk_norm == QkNormKind::PerHead) {
        q = b.qk_norm(q, l.q_norm, hp.n_head, hp.head_dim, hp.rms_eps);
        k = b.qk_norm(k, l.k_norm, hp.n_head_kv, hp.head_dim, hp.rms_eps);
    }
    q = b.rope(q, at.positions, hp.rope_style, rope_meta(hp, hp.n_head, o));
    k = b.rope(k, at.positions, hp.rope_style, rope_meta(hp, hp.n_head_kv, o));
    b.kvcache_store(il, k, v, at, kv);  // [n_kv_embd, n_ctx]
    return q;
}

}  // namespace

GraphInputs declare_inputs(GraphBuilder& b, const GraphParams& p) {
    GraphInputs in{};
    const CParams& c = p.cparams;
    in.tokens = b.input("token_ids", {p.n_tokens, 1, 1, 1}, DType::I32);
    in.kv.positions = b.input("positions", {p.n_tokens, 1, 1, 1}, DType::I32);
    in.kv.seq_slot = c.paged() ? b.input("seq_slot", {p.n_tokens, 1, 1, 1}, DType::I32) : -1;
    in.kv.block_table =
        c.paged() ? b.input("block_table", {c.max_blocks(), c.max_seqs, 1, 1}, DType::I32) : -1;
    in.window_kv = in.kv;
    if (c.paged() && c.window_ctx > 0)
        in.window_kv.block_table =
            b.input("window_block_table", {c.max_blocks(), c.max_seqs, 1, 1}, DType::I32);
    in.out_ids = p.n_out < p.n_tokens ? b.input("out_ids", {p.n_out, 1, 1, 1}, DType::I32) : -1;
    return in;
}

NodeId embed(GraphBuilder& b, const Model& m, NodeId tokens) {
    if (m.tok_embd.n_out == m.hp.n_vocab) return b.embedding(tokens, m.tok_embd);  // [n_embd, nt]
    return b.all_reduce(b.embedding_shard(tokens, m.tok_embd, m.shard.vocab_first));
}

AttnOptions attention_options(const Model& m, QkNormKind qk_norm) {
    return {qk_norm, m.hp.rope_base, m.hp.rope_freq_scale, float(1.0 / std::sqrt(double(m.hp.head_dim))), 0,
            {}};
}

NodeId self_attention(GraphBuilder& b, const Model& m, int il, NodeId x, const GraphInputs& in,
                      const GraphParams& p, QkNormKind qk_norm) {
    return self_attention(b, m, il, x, in, p, attention_options(m, qk_norm));
}

NodeId self_attention(GraphBuilder& b, const Model& m, int il, NodeId x, const GraphInputs& in,
                      const GraphParams& p, const AttnOptions& o) {
    const Hparams& hp = m.hp;
    const LayerWeights& l = m.layers[size_t(il)];
    // The concat fusions need Q and K of one type; V may differ (llama-quantize's _M mixes give some
    // layers' attn_v more bits), and then runs as its own product inside the node.
    const bool qk_same = l.wq.type == l.wk.type;
    const KvIndex& at = o.window > 0 ? in.window_kv : in.kv;
    const meta::Kv kvm = kv_meta(m, p, o.window > 0);
    NodeId q;
    if (qkv_fusion(p) && qk_same && o.qk_norm == QkNormKind::PerHead) {
        q = b.fused_qkv_norm(il, x, at, fused_qkv_meta(m, l, kvm, o));
    } else if (qkv_fusion(p) && qk_same) {
        q = b.fused_qkv(il, x, at, fused_qkv_meta(m, l, kvm, o));
    } else if (qkv_fusion(p) && o.qk_norm == QkNormKind::None) {
        const NodeId q0 = b.matmul(x, l.wq);  // biases are applied by the fused epilogue
        const NodeId k0 = b.matmul(x, l.wk);
        const NodeId v0 = b.matmul(x, l.wv);
        q = b.qkv_bias_rope_store(il, q0, k0, v0, at, fused_qkv_meta(m, l, kvm, o));
    } else {
        q = project_qkv(b, m, il, x, at, kvm, o);
    }
    const NodeId kv = b.kvcache_load(il, kvm);  // [n_kv_embd, n_ctx | window_ctx] view of the region
    const meta::Attn am{il,      hp.n_head, hp.n_head_kv,      hp.head_dim, hp.head_dim, hp.n_kv_embd(),
                        o.scale, paging(p), p.cparams.kv_type, l.attn_sinks};
    return b.attn(q, kv, at, am, o.window);  // [n_q_embd, nt]
}

NodeId attn_output(GraphBuilder& b, const Model& m, int il, NodeId attn) {
    const LayerWeights& l = m.layers[size_t(il)];
    const WeightRef& wo = l.wo;
    if (!m.shard.sharded()) return b.matmul(attn, wo, l.bo);                   // [n_embd, nt]
    if (wo.n_in == b[attn].shape[0]) return b.all_reduce(b.matmul(attn, wo));  // partial sums
    return b.matmul(b.all_gather(attn, m.shard.ranks), wo);  // [n_q_embd, nt] whole, then wo whole
}

namespace {

NodeId ffn_down(GraphBuilder& b, const Model& m, NodeId act, const WeightRef& down) {
    const NodeId y = b.matmul(act, down);  // [n_embd, nt]
    return m.shard.sharded() ? b.all_reduce(y) : y;
}

}  // namespace

NodeId swiglu_ffn(GraphBuilder& b, const Model& m, int il, NodeId x, const GraphParams& p) {
    const LayerWeights& l = m.layers[size_t(il)];
    // At every width: the GPU kernel reads the gate and up rows side by side (no concatenated matrix),
    // which measured faster than two products and a SwiGLU, 7B's n_ff = 18944 included.
    if (ffn_fusion(p) && l.ffn_gate.type == l.ffn_up.type)
        return ffn_down(b, m, b.fused_ffn(x, {l.ffn_gate, l.ffn_up}), l.ffn_down);
    const NodeId gate = b.matmul(x, l.ffn_gate);  // [n_ff, nt]
    const NodeId up = b.matmul(x, l.ffn_up);      // [n_ff, nt]
    const NodeId act = b.mul(b.silu(gate), up);   // becomes SwiGLU in the fusion pass
    return ffn_down(b, m, act, l.ffn_down);       // [n_embd, nt]
}

NodeId geglu_ffn(GraphBuilder& b, const Model& m, int il, NodeId x) {
    const LayerWeights& l = m.layers[size_t(il)];
    const NodeId gate = b.matmul(x, l.ffn_gate);           // [n_ff, nt]
    const NodeId up = b.matmul(x, l.ffn_up);               // [n_ff, nt]
    return ffn_down(b, m, b.geglu(gate, up), l.ffn_down);  // [n_embd, nt]
}

NodeId moe_ffn(GraphBuilder& b, const Model& m, int il, NodeId x) {
    return moe_ffn(b, m, il, x, m.hp.expert_gating, ExpertAct::SwiGLU);
}

NodeId moe_ffn(GraphBuilder& b, const Model& m, int il, NodeId x, ExpertGating gating, ExpertAct act) {
    const LayerWeights& l = m.layers[size_t(il)];
    const Hparams& hp = m.hp;
    const NodeId router = b.matmul(x, l.ffn_gate_inp, l.ffn_gate_inp_b);  // [n_expert, nt]
    const op::MoeFfn o{hp.n_expert, hp.n_expert_used, gating, hp.expert_norm, act};
    const meta::MoeFfn w{l.ffn_gate_exps,   l.ffn_up_exps,   l.ffn_down_exps,
                         l.ffn_gate_exps_b, l.ffn_up_exps_b, l.ffn_down_exps_b};
    return b.moe_ffn(x, router, o, w);  // [n_embd, nt]
}

NodeId residual_add(GraphBuilder& b, NodeId residual, NodeId cur, const GraphInputs& in, bool last_layer) {
    if (!last_layer || in.out_ids < 0) return b.add(residual, cur);
    const NodeId cur_out = b.get_rows(cur, in.out_ids);       // [n_embd, n_out]
    const NodeId res_out = b.get_rows(residual, in.out_ids);  // [n_embd, n_out]
    return b.add(res_out, cur_out);
}

void output_head(GraphBuilder& b, const Model& m, NodeId h, const GraphParams& p) {
    b.set_layer(-1);  // the head is outside the layers
    const NodeId normed = b.rms_norm(h, m.output_norm, m.hp.rms_eps);
    // GraphOutput::Hidden (embeddings) stops before lm_head: the output is normed, [n_embd, n_out].
    if (p.output == GraphOutput::Hidden) return b.output(normed);
    NodeId logits = b.matmul(normed, m.output);  // [n_vocab, n_out] ([n_vocab / ranks, n_out] in a shard)
    if (m.output.n_out != m.hp.n_vocab) logits = b.all_gather(logits, m.shard.ranks);
    b.output(p.output == GraphOutput::Argmax ? b.argmax(logits) : logits);  // [n_out] i32 | [n_vocab, n_out]
}

}  // namespace minfer
