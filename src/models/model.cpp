#include "models/model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "gguf/gguf.h"
#include "models/registry.h"
#include "quant/quants.h"
#include "util/error.h"

namespace minfer {

namespace {

class WeightReader {
  public:
    explicit WeightReader(const GgufFile& f) : f_(f) {}

    // A tensor the graph will read; checks presence, shape and that minfer can compute with its type.
    WeightRef get(const std::string& name, int64_t n_in, int64_t n_out, bool required = true) const {
        const GgufTensor* t = f_.find_tensor(name);
        if (!t) {
            if (required) fail("missing tensor '" + name + "'");
            return {};
        }
        const int64_t got_out = t->dims.size() > 1 ? t->dims[1] : 1;
        if (t->dims.empty() || t->dims[0] != n_in || got_out != n_out || t->dims.size() > 2)
            fail("tensor '" + name + "' has shape " + dims_str(t->dims) + ", expected [" +
                 std::to_string(n_in) + ", " + std::to_string(n_out) + "]");
        const QuantTraits* q = quant_traits(t->type);
        if (!q)
            fail("tensor '" + name + "' has type " + ggml_type_name(t->type) +
                 ", which minfer cannot compute with");
        return WeightRef{name, t->type, n_in, n_out};
    }
    WeightRef vec(const std::string& name, int64_t n, bool required = true) const {
        return get(name, n, 1, required);
    }
    // Stacked experts: a [n_in, n_out, n_expert] tensor, named as the [n_in, n_out * n_expert] matrix it is.
    WeightRef experts(const std::string& name, int64_t n_in, int64_t n_out, int64_t n_expert) const {
        const GgufTensor* t = f_.find_tensor(name);
        if (!t) fail("missing tensor '" + name + "'");
        if (t->dims != std::vector<int64_t>{n_in, n_out, n_expert})
            fail("tensor '" + name + "' has shape " + dims_str(t->dims) + ", expected [" +
                 std::to_string(n_in) + ", " + std::to_string(n_out) + ", " + std::to_string(n_expert) + "]");
        if (!quant_traits(t->type))
            fail("tensor '" + name + "' has type " + ggml_type_name(t->type) +
                 ", which minfer cannot compute with");
        return WeightRef{name, t->type, n_in, n_out * n_expert};
    }

    [[noreturn]] void fail(const std::string& what) const { throw Error(f_.path() + ": " + what); }

  private:
    static std::string dims_str(const std::vector<int64_t>& d) {
        std::string s = "[";
        for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
        return s + "]";
    }
    const GgufFile& f_;
};

std::string format_number(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}

// Reads hyper-parameter `key` and checks it: an error names the key and the file.
class HparamReader {
  public:
    HparamReader(const GgufFile& f, std::string arch) : f_(f), arch_(std::move(arch)) {}

    // An integer in [lo, hi]; `dflt` when absent (required when dflt is unset).
    int64_t integer(const std::string& key, int64_t lo, int64_t hi, std::optional<int64_t> dflt = {}) const {
        const std::string k = arch_ + "." + key;
        const int64_t v = dflt && !f_.has(k) ? *dflt : f_.get_int(k);
        if (v < lo || v > hi)
            fail(k,
                 "is " + std::to_string(v) + ", expected " + std::to_string(lo) + ".." + std::to_string(hi));
        return v;
    }
    // A finite number > 0; `dflt` when absent.
    float positive(const std::string& key, double dflt) const {
        const std::string k = arch_ + "." + key;
        const double v = f_.get_float_or(k, dflt);
        if (!std::isfinite(v) || v <= 0 || !std::isfinite(float(v)) || float(v) <= 0)
            fail(k, "is " + format_number(v) + ", expected a positive finite number");
        return float(v);
    }
    [[noreturn]] void fail(const std::string& key, const std::string& what) const {
        throw Error(f_.path() + ": " + key + " " + what);
    }

  private:
    const GgufFile& f_;
    std::string arch_;
};

// A mixture of experts' keys; the gating and the renormalisation default to Qwen3-MoE's (softmax, on).
void read_experts(const GgufFile& f, const HparamReader& r, Hparams& hp) {
    hp.n_expert = r.integer("expert_count", 1, 4096);
    hp.n_expert_used = r.integer("expert_used_count", 1, hp.n_expert);
    hp.n_ff_exp = r.integer("expert_feed_forward_length", 1, int64_t{1} << 20);
    hp.expert_gating =
        std::array{ExpertGating::Softmax, ExpertGating::Sigmoid,
                   ExpertGating::SoftmaxWeight}[size_t(r.integer("expert_gating_func", 1, 3, 1) - 1)];
    const std::string norm = hp.arch + ".expert_weights_norm";
    hp.expert_norm = !f.has(norm) || f.get_bool(norm);
}

// RoPE scaling: "linear" divides the positions by rope.scaling.factor; "yarn" records its parameters
// for the architectures that apply it (Hparams::yarn_factor).
void read_rope_scaling(const GgufFile& f, const HparamReader& r, Hparams& hp) {
    const std::string type = hp.arch + ".rope.scaling.type";
    const std::string kind = f.has(type) ? f.get_str(type) : "none";
    if (kind == "linear") hp.rope_freq_scale = 1.0f / r.positive("rope.scaling.factor", 1.0);
    if (kind != "yarn") return;
    hp.yarn_factor = r.positive("rope.scaling.factor", 1.0);
    hp.yarn_orig_ctx = r.integer("rope.scaling.original_context_length", 1, int64_t{1} << 30, hp.n_ctx_train);
    hp.yarn_beta_fast = r.positive("rope.scaling.yarn_beta_fast", 32.0);
    hp.yarn_beta_slow = r.positive("rope.scaling.yarn_beta_slow", 1.0);
}

Hparams read_hparams(const GgufFile& f, const ArchInfo& arch) {
    constexpr int64_t kMaxDim = int64_t{1} << 20, kMaxHeads = int64_t{1} << 12;
    const HparamReader r(f, arch.name);
    Hparams hp;
    hp.arch = arch.name;
    hp.n_layer = int(r.integer("block_count", 1, 100000));
    hp.n_embd = r.integer("embedding_length", 1, kMaxDim);
    hp.n_ff = arch.moe ? r.integer("feed_forward_length", 0, kMaxDim * 4, 0)
                       : r.integer("feed_forward_length", 1, kMaxDim * 4);
    hp.n_head = r.integer("attention.head_count", 1, kMaxHeads);
    hp.n_head_kv = r.integer("attention.head_count_kv", 1, hp.n_head, hp.n_head);
    if (hp.n_head % hp.n_head_kv != 0)
        r.fail(hp.arch + ".attention.head_count_kv", "(" + std::to_string(hp.n_head_kv) +
                                                         ") does not divide head_count (" +
                                                         std::to_string(hp.n_head) + ")");
    hp.head_dim =
        r.integer("attention.key_length", 1, kMaxDim / 16, std::max<int64_t>(hp.n_embd / hp.n_head, 1));
    hp.n_rot = r.integer("rope.dimension_count", 2, hp.head_dim, hp.head_dim);
    if (hp.n_rot % 2 != 0)
        r.fail(hp.arch + ".rope.dimension_count", "is odd (" + std::to_string(hp.n_rot) + ")");
    hp.n_ctx_train = r.integer("context_length", 1, int64_t{1} << 30, 4096);
    hp.rms_eps = r.positive("attention.layer_norm_rms_epsilon", 1e-6);
    hp.rope_base = r.positive("rope.freq_base", 10000.0);
    hp.rope_base_swa = f.has(hp.arch + ".rope.freq_base_swa") ? r.positive("rope.freq_base_swa", 0) : 0.0f;
    read_rope_scaling(f, r, hp);
    hp.n_swa = r.integer("attention.sliding_window", 0, int64_t{1} << 30, 0);
    hp.rope_style = arch.rope_style;
    hp.pooling = Pooling(r.integer("pooling_type", -1, 4, -1));
    if (arch.moe) read_experts(f, r, hp);
    return hp;
}

// The vocabulary and the layers the file holds must agree with the hyper-parameters: the embedding
// has one row per token of tokenizer.ggml.tokens (when the file has a vocabulary), and tensors
// blk.0 .. blk.(block_count - 1) exist, no more.
void check_consistency(const GgufFile& f, const Hparams& hp) {
    if (const GgufValue* tokens = f.find("tokenizer.ggml.tokens")) {
        const auto* arr = std::get_if<std::shared_ptr<GgufArray>>(&tokens->v);
        const size_t n = arr && *arr ? (*arr)->items.size() : 0;
        if (int64_t(n) != hp.n_vocab)
            throw Error(f.path() + ": token_embd.weight has " + std::to_string(hp.n_vocab) +
                        " rows but the vocabulary (tokenizer.ggml.tokens) has " + std::to_string(n) +
                        " tokens");
    }
    int64_t max_layer = -1;
    for (const GgufTensor& t : f.tensors()) {
        if (t.name.rfind("blk.", 0) != 0) continue;
        const int64_t il = std::strtoll(t.name.c_str() + 4, nullptr, 10);
        max_layer = std::max(max_layer, il);
    }
    if (max_layer + 1 > hp.n_layer)
        throw Error(f.path() + ": " + hp.arch + ".block_count is " + std::to_string(hp.n_layer) +
                    " but the file has tensors of layer blk." + std::to_string(max_layer));
}

LayerWeights read_layer(const WeightReader& r, const Hparams& hp, const ArchInfo& arch, int il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    const int64_t d = hp.n_embd, dq = hp.n_q_embd(), dkv = hp.n_kv_embd();
    LayerWeights l;
    l.attn_norm = r.vec(p + "attn_norm.weight", d);
    l.wq = r.get(p + "attn_q.weight", d, dq);
    l.wk = r.get(p + "attn_k.weight", d, dkv);
    l.wv = r.get(p + "attn_v.weight", d, dkv);
    l.wo = r.get(p + "attn_output.weight", dq, d);
    l.bq = r.vec(p + "attn_q.bias", dq, false);
    l.bk = r.vec(p + "attn_k.bias", dkv, false);
    l.bv = r.vec(p + "attn_v.bias", dkv, false);
    l.bo = r.vec(p + "attn_output.bias", d, false);
    l.attn_sinks = r.vec(p + "attn_sinks.weight", hp.n_head, arch.attn_sinks);
    l.q_norm = r.vec(p + "attn_q_norm.weight", hp.head_dim, arch.qk_norm);
    l.k_norm = r.vec(p + "attn_k_norm.weight", hp.head_dim, arch.qk_norm);
    l.ffn_norm = r.vec(p + arch.ffn_norm + ".weight", d);
    l.attn_post_norm = r.vec(p + "post_attention_norm.weight", d, arch.post_norms);
    l.ffn_post_norm = r.vec(p + "post_ffw_norm.weight", d, arch.post_norms);
    if (arch.moe) {
        l.ffn_gate_inp = r.get(p + "ffn_gate_inp.weight", d, hp.n_expert);
        l.ffn_gate_exps = r.experts(p + "ffn_gate_exps.weight", d, hp.n_ff_exp, hp.n_expert);
        l.ffn_up_exps = r.experts(p + "ffn_up_exps.weight", d, hp.n_ff_exp, hp.n_expert);
        l.ffn_down_exps = r.experts(p + "ffn_down_exps.weight", hp.n_ff_exp, d, hp.n_expert);
        if (!arch.expert_biases) return l;
        l.ffn_gate_inp_b = r.vec(p + "ffn_gate_inp.bias", hp.n_expert);
        l.ffn_gate_exps_b = r.get(p + "ffn_gate_exps.bias", hp.n_ff_exp, hp.n_expert);
        l.ffn_up_exps_b = r.get(p + "ffn_up_exps.bias", hp.n_ff_exp, hp.n_expert);
        l.ffn_down_exps_b = r.get(p + "ffn_down_exps.bias", d, hp.n_expert);
        return l;
    }
    l.ffn_gate = r.get(p + "ffn_gate.weight", d, hp.n_ff);
    l.ffn_up = r.get(p + "ffn_up.weight", d, hp.n_ff);
    l.ffn_down = r.get(p + "ffn_down.weight", hp.n_ff, d);
    return l;
}

}  // namespace

Model::~Model() = default;

std::unique_ptr<Model> Model::load(const std::string& path) {
    return from_file(GgufFile::open(path));
}

std::unique_ptr<Model> Model::from_file(std::unique_ptr<GgufFile> file) {
    auto m = std::make_unique<Model>();
    m->file = std::move(file);
    const GgufFile& f = *m->file;
    const std::string& path = f.path();
    const std::string arch_name = f.get_str("general.architecture");
    const ArchInfo* arch = find_arch(arch_name);
    if (!arch)
        throw Error(path + ": unsupported architecture '" + arch_name + "' (supported: " + known_archs() +
                    ")");
    m->hp = read_hparams(f, *arch);
    m->build_graph = arch->build;

    const WeightReader r(f);
    const GgufTensor* emb = f.find_tensor("token_embd.weight");
    if (!emb || emb->dims.size() != 2) r.fail("missing or malformed tensor 'token_embd.weight'");
    m->hp.n_vocab = emb->dims[1];
    if (m->hp.n_vocab <= 0) r.fail("tensor 'token_embd.weight' has no rows (an empty vocabulary)");
    check_consistency(f, m->hp);
    m->tok_embd = r.get("token_embd.weight", m->hp.n_embd, m->hp.n_vocab);
    m->output_norm = r.vec("output_norm.weight", m->hp.n_embd);
    m->output = r.get("output.weight", m->hp.n_embd, m->hp.n_vocab, false);
    if (!m->output.present()) m->output = m->tok_embd;  // tied embeddings
    for (int il = 0; il < m->hp.n_layer; ++il) m->layers.push_back(read_layer(r, m->hp, *arch, il));
    return m;
}

WeightSet Model::weight_set() const {
    WeightSet w{.layers = {}, .tok_embd = tok_embd, .output = output, .output_norm = output_norm};
    for (const LayerWeights& l : layers) {
        std::vector<WeightRef> matrices, experts;
        for (const WeightRef* m : {&l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down, &l.ffn_gate_inp})
            if (m->present()) matrices.push_back(*m);
        for (const WeightRef* m : {&l.ffn_gate_exps, &l.ffn_up_exps, &l.ffn_down_exps})
            if (m->present()) experts.push_back(*m);
        w.layers.push_back({.q = l.wq,
                            .k = l.wk,
                            .v = l.wv,
                            .matrices = std::move(matrices),
                            .experts = std::move(experts),
                            .vectors = {l.attn_norm, l.bq, l.bk, l.bv, l.bo, l.attn_sinks, l.q_norm, l.k_norm,
                                        l.ffn_norm, l.attn_post_norm, l.ffn_post_norm, l.ffn_gate_inp_b,
                                        l.ffn_gate_exps_b, l.ffn_up_exps_b, l.ffn_down_exps_b}});
    }
    return w;
}

}  // namespace minfer
