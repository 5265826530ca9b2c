#include "models/synth.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "gguf/gguf_writer.h"
#include "models/registry.h"
#include "quant/quants.h"
#include "util/error.h"

namespace minfer {

namespace {

class SynthWriter {
  public:
    explicit SynthWriter(const SynthSpec& s) : s_(s), rng_(s.seed) {}

    // A [n_in, n_out] matrix, values ~ N(0, 1/n_in) so activations keep their scale through layers; of
    // the mix's more-bits type when `more_bits` and the spec has one.
    void matrix(const std::string& name, int64_t n_in, int64_t n_out, bool more_bits = false) {
        const bool mix = more_bits && s_.more_bits_type;
        const GgmlType want = mix ? *s_.more_bits_type : s_.type;
        const GgmlType type =
            fits(want, n_in) ? want : (mix ? s_.more_bits_fallback : s_.fallback_type).value_or(want);
        if (!fits(type, n_in))
            throw Error(std::string("synth: cannot write ") + ggml_type_name(type) + " rows of " +
                        std::to_string(n_in));
        w_.add_tensor(name, type, {n_in, n_out}, quantized_rows(*quant_traits(type), n_in, n_out));
    }
    // Stacked experts: a [n_in, n_out, n_expert] tensor, each expert's matrix as matrix() writes one.
    void experts(const std::string& name, int64_t n_in, int64_t n_out, int64_t n_expert) {
        const GgmlType type = fits(s_.type, n_in) ? s_.type : s_.fallback_type.value_or(s_.type);
        if (!fits(type, n_in))
            throw Error(std::string("synth: cannot write ") + ggml_type_name(type) + " rows of " +
                        std::to_string(n_in));
        w_.add_tensor(name, type, {n_in, n_out, n_expert},
                      quantized_rows(*quant_traits(type), n_in, n_out * n_expert));
    }
    void vector(const std::string& name, int64_t n, double mean, double sd) {
        std::vector<float> v = values(n, sd, mean);
        w_.add_tensor(name, GgmlType::F32, {n}, v.data(), v.size() * sizeof(float));
    }
    // An F32 [n, m] tensor of biases (one row of n per expert).
    void biases(const std::string& name, int64_t n, int64_t m) {
        std::vector<float> v = values(n * m, 0.1, 0.0);
        w_.add_tensor(name, GgmlType::F32, {n, m}, v.data(), v.size() * sizeof(float));
    }
    GgufWriter& writer() { return w_; }

  private:
    static bool fits(GgmlType type, int64_t n_in) {
        const QuantTraits* q = quant_traits(type);
        return q && n_in % q->block_size == 0;
    }
    std::vector<float> values(int64_t n, double sd, double mean) {
        std::normal_distribution<float> dist{float(mean), float(sd)};
        std::vector<float> v(static_cast<size_t>(n));
        for (float& x : v) x = dist(rng_);
        return v;
    }
    // n_out rows of N(0, 1/n_in) values quantized, drawn in chunks of kChunkRows rows on every core.
    // Chunk c draws from its own generator, seeded by the matrix's draw from rng_ and c, so the bytes do
    // not depend on the number of threads.
    std::vector<uint8_t> quantized_rows(const QuantTraits& q, int64_t n_in, int64_t n_out) {
        constexpr int64_t kChunkRows = 64;
        const size_t row_bytes = quant_row_bytes(q, n_in);
        std::vector<uint8_t> bytes(row_bytes * size_t(n_out));
        const uint64_t seed = rng_();
        const auto sd = float(1.0 / std::sqrt(double(n_in)));
        const int64_t chunks = (n_out + kChunkRows - 1) / kChunkRows;
        std::atomic<int64_t> next{0};
        const auto work = [&] {
            std::vector<float> v;
            for (int64_t c = next++; c < chunks; c = next++) {
                const int64_t r0 = c * kChunkRows, rows = std::min(kChunkRows, n_out - r0);
                std::mt19937_64 rng(seed + uint64_t(c) * 0x9E3779B97F4A7C15ull);
                std::normal_distribution<float> dist(0.0f, sd);
                v.resize(size_t(rows * n_in));
                for (float& x : v) x = dist(rng);
                q.from_float_ref(v.data(), bytes.data() + size_t(r0) * row_bytes, rows * n_in);
            }
        };
        std::vector<std::thread> helpers(std::max(1u, std::thread::hardware_concurrency()) - 1);
        for (auto& t : helpers) t = std::thread(work);
        work();
        for (auto& t : helpers) t.join();
        return bytes;
    }
    const SynthSpec& s_;
    std::mt19937_64 rng_;
    GgufWriter w_;
};

void write_hparams(GgufWriter& w, const SynthSpec& s, bool moe) {
    const std::string a = s.arch;
    w.set_str("general.architecture", a);
    w.set_str("general.name", "synthetic " + a);
    w.set_u32(a + ".block_count", uint32_t(s.n_layer));
    w.set_u32(a + ".context_length", uint32_t(s.n_ctx_train));
    w.set_u32(a + ".embedding_length", uint32_t(s.n_embd));
    w.set_u32(a + ".feed_forward_length", uint32_t(s.n_ff));
    w.set_u32(a + ".attention.head_count", uint32_t(s.n_head));
    w.set_u32(a + ".attention.head_count_kv", uint32_t(s.n_head_kv));
    w.set_u32(a + ".attention.key_length", uint32_t(s.head_dim));
    w.set_u32(a + ".attention.value_length", uint32_t(s.head_dim));
    w.set_f32(a + ".attention.layer_norm_rms_epsilon", 1e-6f);
    w.set_f32(a + ".rope.freq_base", 1e6f);
    if (s.n_swa > 0) w.set_u32(a + ".attention.sliding_window", uint32_t(s.n_swa));
    if (moe) {
        w.set_u32(a + ".expert_count", uint32_t(s.n_expert));
        w.set_u32(a + ".expert_used_count", uint32_t(s.n_expert_used));
        w.set_u32(a + ".expert_feed_forward_length", uint32_t(s.n_ff_exp));
    }
    for (const auto& [key, value] : s.extra_metadata) w.set(key, value);
}

}  // namespace

bool use_more_bits(int il, int n) {
    return il < n / 8 || il >= 7 * n / 8 || (il - n / 8) % 3 == 2;
}

namespace {

void write_attention(SynthWriter& sw, const SynthSpec& s, const ArchInfo* arch, const std::string& p,
                     bool more_bits) {
    const int64_t d = s.n_embd, dq = s.n_head * s.head_dim, dkv = s.n_head_kv * s.head_dim;
    sw.vector(p + "attn_norm.weight", d, 1.0, 0.1);
    sw.matrix(p + "attn_q.weight", d, dq);
    sw.matrix(p + "attn_k.weight", d, dkv);
    sw.matrix(p + "attn_v.weight", d, dkv, more_bits);
    sw.matrix(p + "attn_output.weight", dq, d);
    if (arch && arch->qkv_bias) {
        sw.vector(p + "attn_q.bias", dq, 0.0, 0.1);
        sw.vector(p + "attn_k.bias", dkv, 0.0, 0.1);
        sw.vector(p + "attn_v.bias", dkv, 0.0, 0.1);
    }
    if (arch && arch->qk_norm) {
        sw.vector(p + "attn_q_norm.weight", s.head_dim, 1.0, 0.1);
        sw.vector(p + "attn_k_norm.weight", s.head_dim, 1.0, 0.1);
    }
    if (arch && arch->attn_sinks) {
        sw.vector(p + "attn_output.bias", d, 0.0, 0.1);
        sw.vector(p + "attn_sinks.weight", s.n_head, 0.0, 1.0);
    }
    if (arch && arch->post_norms) {
        sw.vector(p + "post_attention_norm.weight", d, 1.0, 0.1);
        sw.vector(p + "post_ffw_norm.weight", d, 1.0, 0.1);
    }
}

void write_ffn(SynthWriter& sw, const SynthSpec& s, const ArchInfo* arch, const std::string& p,
               bool more_bits) {
    const int64_t d = s.n_embd;
    sw.vector(p + (arch ? arch->ffn_norm : "ffn_norm") + ".weight", d, 1.0, 0.1);
    if (!arch || !arch->moe) {
        sw.matrix(p + "ffn_gate.weight", d, s.n_ff);
        sw.matrix(p + "ffn_up.weight", d, s.n_ff);
        sw.matrix(p + "ffn_down.weight", s.n_ff, d, more_bits);
        return;
    }
    sw.matrix(p + "ffn_gate_inp.weight", d, s.n_expert);
    sw.experts(p + "ffn_gate_exps.weight", d, s.n_ff_exp, s.n_expert);
    sw.experts(p + "ffn_up_exps.weight", d, s.n_ff_exp, s.n_expert);
    sw.experts(p + "ffn_down_exps.weight", s.n_ff_exp, d, s.n_expert);
    if (!arch->expert_biases) return;
    sw.vector(p + "ffn_gate_inp.bias", s.n_expert, 0.0, 0.1);
    sw.biases(p + "ffn_gate_exps.bias", s.n_ff_exp, s.n_expert);
    sw.biases(p + "ffn_up_exps.bias", s.n_ff_exp, s.n_expert);
    sw.biases(p + "ffn_down_exps.bias", d, s.n_expert);
}

}  // namespace

void write_synth_model(const SynthSpec& s, const std::string& path) {
    // An architecture minfer does not know gets only the tensors every one has (files for the tests of
    // unsupported models).
    const ArchInfo* arch = find_arch(s.arch);
    SynthWriter sw(s);
    write_hparams(sw.writer(), s, arch && arch->moe);
    sw.matrix("token_embd.weight", s.n_embd, s.n_vocab, s.tied_output);
    sw.vector("output_norm.weight", s.n_embd, 1.0, 0.1);
    if (!s.tied_output) sw.matrix("output.weight", s.n_embd, s.n_vocab, true);
    for (int il = 0; il < s.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        const bool more_bits = use_more_bits(il, s.n_layer);
        write_attention(sw, s, arch, p, more_bits);
        write_ffn(sw, s, arch, p, more_bits);
    }
    sw.writer().write(path);
}

}  // namespace minfer
