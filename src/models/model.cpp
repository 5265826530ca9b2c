#include "models/model.h"

#include "backend/cpu/quants.h"
#include "gguf/gguf.h"
#include "models/registry.h"
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

    [[noreturn]] void fail(const std::string& what) const { throw Error(f_.path() + ": " + what); }

  private:
    static std::string dims_str(const std::vector<int64_t>& d) {
        std::string s = "[";
        for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
        return s + "]";
    }
    const GgufFile& f_;
};

Hparams read_hparams(const GgufFile& f, const ArchInfo& arch) {
    const std::string a = arch.name;
    Hparams hp;
    hp.arch = a;
    hp.n_layer = int(f.get_int(a + ".block_count"));
    hp.n_embd = f.get_int(a + ".embedding_length");
    hp.n_ff = f.get_int(a + ".feed_forward_length");
    hp.n_head = f.get_int(a + ".attention.head_count");
    hp.n_head_kv = f.get_int_or(a + ".attention.head_count_kv", hp.n_head);
    hp.head_dim = f.get_int_or(a + ".attention.key_length", hp.n_head > 0 ? hp.n_embd / hp.n_head : 0);
    hp.n_rot = f.get_int_or(a + ".rope.dimension_count", hp.head_dim);
    hp.n_ctx_train = f.get_int_or(a + ".context_length", 4096);
    hp.rms_eps = float(f.get_float_or(a + ".attention.layer_norm_rms_epsilon", 1e-6));
    hp.rope_base = float(f.get_float_or(a + ".rope.freq_base", 10000.0));
    hp.rope_style = arch.rope_style;
    const bool sane = hp.n_layer > 0 && hp.n_embd > 0 && hp.n_ff > 0 && hp.n_head > 0 && hp.n_head_kv > 0 &&
                      hp.head_dim > 0 && hp.n_head % hp.n_head_kv == 0 && hp.n_rot > 0 &&
                      hp.n_rot <= hp.head_dim && hp.n_rot % 2 == 0 && hp.n_layer < 100000;
    if (!sane) throw Error(f.path() + ": inconsistent hyper-parameters for architecture '" + a + "'");
    return hp;
}

LayerWeights read_layer(const WeightReader& r, const Hparams& hp, int il) {
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
    const bool qk_norm = hp.arch == "qwen3";
    l.q_norm = r.vec(p + "attn_q_norm.weight", hp.head_dim, qk_norm);
    l.k_norm = r.vec(p + "attn_k_norm.weight", hp.head_dim, qk_norm);
    l.ffn_norm = r.vec(p + "ffn_norm.weight", d);
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
    m->tok_embd = r.get("token_embd.weight", m->hp.n_embd, m->hp.n_vocab);
    m->output_norm = r.vec("output_norm.weight", m->hp.n_embd);
    m->output = r.get("output.weight", m->hp.n_embd, m->hp.n_vocab, false);
    if (!m->output.present()) m->output = m->tok_embd;  // tied embeddings
    for (int il = 0; il < m->hp.n_layer; ++il) m->layers.push_back(read_layer(r, m->hp, il));
    return m;
}

WeightSet Model::weight_set() const {
    WeightSet w{.layers = {}, .tok_embd = tok_embd, .output = output, .output_norm = output_norm};
    for (const LayerWeights& l : layers)
        w.layers.push_back({.q = l.wq,
                            .k = l.wk,
                            .v = l.wv,
                            .matrices = {l.wo, l.ffn_gate, l.ffn_up, l.ffn_down},
                            .vectors = {l.attn_norm, l.bq, l.bk, l.bv, l.q_norm, l.k_norm, l.ffn_norm}});
    return w;
}

}  // namespace minfer
