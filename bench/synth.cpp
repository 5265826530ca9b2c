// minfer-synth PRESET TYPE OUT.gguf [--vocab FILE] [--seed N] [--layers N]: a random-valued GGUF with the
// exact tensor shapes of a real model, for benchmarks (speed depends on shapes and types, not on the
// values). --layers keeps the layers' shapes but not their number (a 4-layer qwen3-30b-a3b to iterate on).
//
// TYPE is the type of every 2-D matrix (norms and biases stay F32), except in the _M mixes, which follow
// llama-quantize: Q4_K_M and Q5_K_M put the output (the embedding when tied), and attn_v and ffn_down of
// the first and last eighth of the layers and every third layer between, in Q6_K; the rest in Q4_K or
// Q5_K. Matrices whose rows a 256-element K-quant cannot hold (qwen2.5-0.5b's 896) fall back as
// llama-quantize does: Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0 (so the qwen2.5-0.5b Q4_K_M has
// llama.cpp's type census: Q5_0 132, Q8_0 13, Q4_K 12, Q6_K 12).
//
// --vocab copies the tokenizer.* metadata of a vocabulary GGUF (e.g. ../shared/models/qwen-vocab.gguf),
// padding the token list with unused "[PADn]" tokens up to the embedding's rows, so that `minfer run -p`
// and llama.cpp's tools accept the file. Without it the file has no tokenizer.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "models/synth.h"
#include "util/error.h"

namespace {

using minfer::GgmlType;
using minfer::GgufValue;
using minfer::GgufValueType;
using minfer::SynthSpec;

// The shape of a preset: arch, layers, embd, heads, kv heads, head_dim, ff, vocab, ctx, tied, and for a
// mixture of experts: experts, experts per token, expert width; for sliding-window layers the window.
struct Shape {
    const char* arch;
    int n_layer;
    int64_t n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx_train;
    bool tied;
    int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0;
    int64_t n_swa = 0;
};

SynthSpec preset(const std::string& name) {
    static const std::map<std::string, Shape> presets = {
        {"qwen2.5-0.5b", {"qwen2", 24, 896, 14, 2, 64, 4864, 151936, 32768, true}},
        {"qwen2.5-1.5b", {"qwen2", 28, 1536, 12, 2, 128, 8960, 151936, 32768, true}},
        {"qwen2.5-7b", {"qwen2", 28, 3584, 28, 4, 128, 18944, 152064, 32768, false}},
        {"qwen3-0.6b", {"qwen3", 28, 1024, 16, 8, 128, 3072, 151936, 40960, true}},
        {"qwen3-8b", {"qwen3", 36, 4096, 32, 8, 128, 12288, 151936, 40960, false}},
        {"llama3-8b", {"llama", 32, 4096, 32, 8, 128, 14336, 128256, 8192, false}},
        {"llama3-70b", {"llama", 80, 8192, 64, 8, 128, 28672, 128256, 8192, false}},
        {"qwen3-30b-a3b", {"qwen3moe", 48, 2048, 32, 4, 128, 6144, 151936, 40960, false, 128, 8, 768}},
        {"gemma3-12b", {"gemma3", 48, 3840, 16, 8, 256, 15360, 262208, 131072, true, 0, 0, 0, 1024}},
        {"gpt-oss-20b", {"gpt-oss", 24, 2880, 64, 8, 64, 2880, 201088, 131072, false, 32, 4, 2880, 128}},
    };
    const auto it = presets.find(name);
    if (it == presets.end()) throw minfer::Error("unknown preset " + name);
    const Shape& p = it->second;
    SynthSpec s;
    s.arch = p.arch;
    s.n_layer = p.n_layer;
    s.n_embd = p.n_embd, s.n_head = p.n_head, s.n_head_kv = p.n_head_kv, s.head_dim = p.head_dim;
    s.n_ff = p.n_ff, s.n_vocab = p.n_vocab, s.n_ctx_train = p.n_ctx_train;
    s.tied_output = p.tied;
    s.n_expert = p.n_expert, s.n_expert_used = p.n_expert_used, s.n_ff_exp = p.n_ff_exp;
    s.n_swa = p.n_swa;
    if (s.arch == "gpt-oss")  // YaRN x32 over 4096 positions, as the released files say
        s.extra_metadata = {
            {"gpt-oss.rope.scaling.type", GgufValue{GgufValueType::STRING, std::string("yarn")}},
            {"gpt-oss.rope.scaling.factor", GgufValue{GgufValueType::F32, 32.0}},
            {"gpt-oss.rope.scaling.original_context_length", GgufValue{GgufValueType::U32, uint64_t(4096)}}};
    return s;
}

// Sets the matrix types and their fallbacks for rows the types' blocks do not divide.
void set_type(SynthSpec& s, const std::string& name) {
    struct Mix {
        GgmlType type, fallback;
        std::optional<GgmlType> more_bits, more_bits_fallback;
    };
    const GgmlType q6 = GgmlType::Q6_K, q8 = GgmlType::Q8_0;
    static const std::map<std::string, Mix> types = {
        {"F16", {GgmlType::F16, GgmlType::F16, {}, {}}},
        {"BF16", {GgmlType::BF16, GgmlType::BF16, {}, {}}},
        {"Q8_0", {q8, q8, {}, {}}},
        {"Q4_0", {GgmlType::Q4_0, GgmlType::Q4_0, {}, {}}},
        {"Q6_K", {q6, q8, {}, {}}},
        {"Q5_K", {GgmlType::Q5_K, GgmlType::Q5_1, {}, {}}},
        {"Q5_K_M", {GgmlType::Q5_K, GgmlType::Q5_1, q6, q8}},
        {"Q4_K", {GgmlType::Q4_K, GgmlType::Q5_0, {}, {}}},
        {"Q4_K_M", {GgmlType::Q4_K, GgmlType::Q5_0, q6, q8}},
        {"MXFP4", {GgmlType::MXFP4, q8, {}, {}}},
        {"IQ4_NL", {GgmlType::IQ4_NL, q8, {}, {}}},
        {"IQ4_XS", {GgmlType::IQ4_XS, GgmlType::IQ4_NL, {}, {}}},
        {"Q3_K", {GgmlType::Q3_K, GgmlType::Q4_0, {}, {}}},
        {"Q2_K", {GgmlType::Q2_K, GgmlType::Q4_0, {}, {}}},
    };
    const auto it = types.find(name);
    if (it == types.end()) throw minfer::Error("unknown type " + name);
    s.type = it->second.type;
    s.fallback_type = it->second.fallback;
    s.more_bits_type = it->second.more_bits;
    s.more_bits_fallback = it->second.more_bits_fallback;
}

// `value` (an array) extended to `n` items with `pad(i)`.
GgufValue padded(const GgufValue& value, size_t n, GgufValue (*pad)(size_t)) {
    const auto& array = *std::get<std::shared_ptr<minfer::GgufArray>>(value.v);
    std::vector<GgufValue> items = array.items;
    if (items.size() > n)
        throw minfer::Error("the vocabulary has " + std::to_string(items.size()) + " tokens, more than the " +
                            std::to_string(n) + " embedding rows");
    for (size_t i = items.size(); i < n; ++i) items.push_back(pad(i));
    return minfer::GgufWriter::make_array(array.elem_type, std::move(items));
}

void copy_vocab(SynthSpec& s, const std::string& path) {
    const auto file = minfer::GgufFile::open(path);
    const size_t n = size_t(s.n_vocab);
    for (const auto& [key, value] : file->metadata()) {
        if (key.rfind("tokenizer.", 0) != 0) continue;
        if (key == "tokenizer.ggml.tokens")
            s.extra_metadata.emplace_back(
                key, padded(value, n, [](size_t i) {
                    return GgufValue{GgufValueType::STRING, "[PAD" + std::to_string(i) + "]"};
                }));
        else if (key == "tokenizer.ggml.token_type")  // 5: unused
            s.extra_metadata.emplace_back(key, padded(value, n, [](size_t) {
                                              return GgufValue{GgufValueType::I32, int64_t(5)};
                                          }));
        else if (key == "tokenizer.ggml.scores")
            s.extra_metadata.emplace_back(key, padded(value, n, [](size_t) {
                                              return GgufValue{GgufValueType::F32, 0.0};
                                          }));
        else
            s.extra_metadata.emplace_back(key, value);
    }
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"Write a random-valued GGUF with a real model's tensor shapes, for benchmarks"};
    std::string preset_name, type_name, out, vocab;
    uint64_t seed = 1;
    int layers = 0;
    app.add_option(
           "preset", preset_name,
           "qwen2.5-0.5b qwen2.5-1.5b qwen2.5-7b qwen3-0.6b qwen3-8b llama3-8b llama3-70b qwen3-30b-a3b "
           "gemma3-12b gpt-oss-20b")
        ->required();
    app.add_option("type", type_name,
                   "F16 BF16 Q8_0 Q6_K Q5_K Q5_K_M Q4_K Q4_K_M Q4_0 MXFP4 IQ4_NL IQ4_XS Q3_K Q2_K")
        ->required();
    app.add_option("out", out, "Output GGUF")->required();
    app.add_option("--vocab", vocab, "Copy the tokenizer.* metadata of this GGUF");
    app.add_option("--seed", seed, "Random seed");
    app.add_option("--layers", layers, "Layers, if not the preset's")->check(CLI::Range(1, 1024));
    CLI11_PARSE(app, argc, argv);
    try {
        SynthSpec s = preset(preset_name);
        if (layers > 0) s.n_layer = layers;
        set_type(s, type_name);
        s.seed = seed;
        if (!vocab.empty()) copy_vocab(s, vocab);
        minfer::write_synth_model(s, out);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "minfer-synth: %s\n", e.what());
        return 1;
    }
    return 0;
}
