// Writes the checked-in seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/): tiny models of
// every architecture with a small SPM or BPE vocabulary, the chat templates of the shared test models,
// and text for the tokenizers. Run once: fuzz_make_seeds OUT_DIR [MODELS_DIR].
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "models/synth.h"

namespace minfer {
namespace {

GgufValue array_of(GgufValueType t, std::vector<GgufValue> items) {
    return GgufWriter::make_array(t, std::move(items));
}

// tokenizer.* keys of a vocabulary of `n` tokens: SPM (llama) or byte-level BPE (gpt2).
std::vector<std::pair<std::string, GgufValue>> vocab(int64_t n, bool bpe) {
    std::vector<GgufValue> tokens, scores, types, merges;
    for (int64_t i = 0; i < n; ++i) {
        const std::string t = i < 3 ? std::vector<std::string>{"<unk>", "<s>", "</s>"}[size_t(i)]
                                    : std::string(1, char('a' + (i - 3) % 26)) + (i >= 29 ? "b" : "");
        tokens.push_back({GgufValueType::STRING, bpe ? (i < 3 ? t : "\u0120" + t) : "\u2581" + t});
        scores.push_back({GgufValueType::F32, -double(i)});
        types.push_back({GgufValueType::I32, int64_t(i == 0 ? 2 : i < 3 ? 3 : 1)});
    }
    merges.push_back({GgufValueType::STRING, std::string("\u0120 a")});
    std::vector<std::pair<std::string, GgufValue>> kv = {
        {"tokenizer.ggml.model", {GgufValueType::STRING, std::string(bpe ? "gpt2" : "llama")}},
        {"tokenizer.ggml.tokens", array_of(GgufValueType::STRING, tokens)},
        {"tokenizer.ggml.token_type", array_of(GgufValueType::I32, types)},
        {"tokenizer.ggml.bos_token_id", {GgufValueType::U32, uint64_t(1)}},
        {"tokenizer.ggml.eos_token_id", {GgufValueType::U32, uint64_t(2)}},
        {"tokenizer.chat_template",
         {GgufValueType::STRING, std::string("{{ bos_token }}{% for m in messages %}"
                                             "{{ m.content }}{% endfor %}")}},
    };
    if (bpe) {
        kv.emplace_back("tokenizer.ggml.merges", array_of(GgufValueType::STRING, merges));
        kv.emplace_back("tokenizer.ggml.pre", GgufValue{GgufValueType::STRING, std::string("qwen2")});
    } else {
        kv.emplace_back("tokenizer.ggml.scores", array_of(GgufValueType::F32, scores));
        kv.emplace_back("tokenizer.ggml.unknown_token_id", GgufValue{GgufValueType::U32, uint64_t(0)});
    }
    return kv;
}

void write_file(const std::filesystem::path& p, const std::string& bytes) {
    std::ofstream(p, std::ios::binary) << bytes;
}

void gguf_seeds(const std::filesystem::path& dir) {
    int i = 0;
    for (const std::string arch : {"qwen2", "qwen3", "llama", "qwen3moe", "gemma3", "gpt-oss"}) {
        for (bool bpe : {false, true}) {
            SynthSpec s;
            s.arch = arch;
            s.n_layer = 1;
            s.n_embd = 8, s.n_head = 2, s.n_head_kv = 1, s.head_dim = 4, s.n_ff = 16, s.n_vocab = 32;
            s.n_expert = 4, s.n_expert_used = 2, s.n_ff_exp = 8;
            s.n_swa = arch == "gemma3" || arch == "gpt-oss" ? 2 : 0;  // their sliding-window keys
            s.extra_metadata = vocab(s.n_vocab, bpe);
            if (arch == "gpt-oss")
                s.extra_metadata.emplace_back("gpt-oss.rope.scaling.type",
                                              GgufValue{GgufValueType::STRING, std::string("yarn")});
            write_synth_model(s, (dir / ("model-" + std::to_string(i++) + ".gguf")).string());
        }
    }
}

void template_seeds(const std::filesystem::path& dir, const std::filesystem::path& models) {
    for (const char* m : {"qwen-vocab", "llama3-vocab", "qwen2-mini-Q8_0"}) {
        const auto path = models / (std::string(m) + ".gguf");
        if (!std::filesystem::exists(path)) continue;
        write_file(dir / (std::string(m) + ".jinja"),
                   GgufFile::open(path.string())->get_str("tokenizer.chat_template"));
    }
    write_file(dir / "loops.jinja",
               "{% set ns = namespace(n=0) %}{% for m in messages if m.role != 'tool' %}{{ loop.index }}"
               "{{ m.content | trim | upper }}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}{{ tools | "
               "tojson(indent=2) }}");
    write_file(
        dir / "macros.jinja",
        "{% macro f(x, y=2) %}{{ x ~ y }}{% endmacro %}{{ f(1) }}{{ [1, 2, 3] | map('string') | join(',') }}"
        "{{ 'a b'.split() }}{{ {'k': [1, (2, 3)]}.items() | list }}{{ x if x is defined else 'none' }}");
}

void text_seeds(const std::filesystem::path& dir) {
    const std::vector<std::string> texts = {"Hello world",
                                            "<|im_start|>user\nhi<|im_end|>",
                                            "  leading spaces",
                                            "数字 123 émoji 🙂",
                                            "def main():\n\treturn 0",
                                            "<s>[INST] x [/INST]"};
    for (size_t i = 0; i < texts.size(); ++i)
        for (char sel : {'\x00', '\x11', '\x22', '\x30'})
            write_file(dir / ("text-" + std::to_string(i) + "-" + std::to_string(int(sel)) + ".txt"),
                       std::string(1, sel) + texts[i]);
}

}  // namespace
}  // namespace minfer

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: fuzz_make_seeds OUT_DIR [MODELS_DIR]\n");
        return 2;
    }
    const std::filesystem::path out = argv[1];
    for (const char* t : {"gguf", "jinja", "tokenizer"}) std::filesystem::create_directories(out / t);
    minfer::gguf_seeds(out / "gguf");
    minfer::template_seeds(out / "jinja", argc > 2 ? argv[2] : "../shared/models");
    minfer::text_seeds(out / "tokenizer");
    return 0;
}
