// The "gpt-4o" pre-tokenizer (tiktoken's o200k_base: gpt-oss's o200k_harmony and other o200k
// vocabularies) against tests/tokenizer/data/gpt4o.llamacpp.json, made by make-gpt4o-ref.py beside it:
// llama.cpp's ids, and the pieces of tiktoken's o200k regex as Python's `regex` module splits them. The
// test data holds no o200k vocabulary, so the vocabulary is Llama 3's with tokenizer.ggml.pre = "gpt-4o"
// and the reference's extra merges appended, as the script gave it to llama.cpp.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "gguf/gguf_test_util.h"
#include "gguf/gguf_writer.h"
#include "test_data.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

namespace minfer {
namespace {

nlohmann::json load_reference() {
    const std::string path = std::string(MINFER_SOURCE_DIR) + "/tests/tokenizer/data/gpt4o.llamacpp.json";
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot open " + path);
    return nlohmann::json::parse(in);
}

// llama3-vocab.gguf with tokenizer.ggml.pre = "gpt-4o" and the reference's extra tokens and merges.
std::unique_ptr<Tokenizer> gpt4o_tokenizer(const nlohmann::json& ref, const std::string& path) {
    const auto vocab = GgufFile::open(test::model_path("llama3-vocab.gguf"));
    GgufWriter w;
    for (const auto& [key, value] : vocab->metadata()) w.set(key, value);
    w.set_str("tokenizer.ggml.pre", "gpt-4o");
    std::vector<std::string> tokens = vocab->get_str_array("tokenizer.ggml.tokens");
    const std::vector<int64_t> types64 = vocab->get_int_array("tokenizer.ggml.token_type");
    std::vector<int32_t> types(types64.begin(), types64.end());
    std::vector<std::string> merges = vocab->get_str_array("tokenizer.ggml.merges");
    for (const auto& token : ref.at("extra_tokens")) {
        tokens.push_back(token.get<std::string>());
        types.push_back(1);  // normal
    }
    for (const auto& merge : ref.at("extra_merges")) merges.push_back(merge.get<std::string>());
    w.set_str_array("tokenizer.ggml.tokens", tokens);
    w.set_i32_array("tokenizer.ggml.token_type", types);
    w.set_str_array("tokenizer.ggml.merges", merges);
    w.write(path);
    return Tokenizer::from_gguf(*GgufFile::open(path));
}

// Where llama.cpp's approximation of the regex splits a text otherwise, or merges a piece that is a whole
// vocabulary entry (tiktoken takes it whole), the reference's ids_by_piece are the answer; elsewhere
// llama.cpp's ids of the text.
TEST(TokenizerGpt4o, GivesLlamaCppIds) {
    MINFER_REQUIRE_FILE(test::model_path("llama3-vocab.gguf"));
    const nlohmann::json ref = load_reference();
    test::TempDir dir;
    const auto tok = gpt4o_tokenizer(ref, dir.file("gpt4o.gguf"));
    const nlohmann::json& cases = ref.at("cases");
    ASSERT_GT(cases.size(), 0u);
    int same_as_llamacpp = 0;
    for (const auto& c : cases) {
        const std::string text = c.at("text");
        const std::vector<int32_t> llamacpp = c.at("ids");
        const std::vector<int32_t> want = c.contains("ids_by_piece") ? c.at("ids_by_piece") : c.at("ids");
        const std::vector<int32_t> got = tok->encode(text, false, true);
        EXPECT_EQ(got, want) << text;
        EXPECT_EQ(tok->decode(got), text);
        same_as_llamacpp += got == llamacpp;
    }
    std::printf("gpt-4o: %d/%zu texts give llama.cpp's ids for the whole text\n", same_as_llamacpp,
                cases.size());
}

TEST(TokenizerGpt4o, SplitsLikeTiktokensRegex) {
    const nlohmann::json ref = load_reference();
    const PreTokenizer pre("gpt-4o", "gpt4o.gguf");
    EXPECT_TRUE(pre.ignore_merges());
    EXPECT_FALSE(pre.nfc());
    for (const auto& c : ref.at("cases")) {
        const std::string text = c.at("text");
        const std::vector<std::string> want = c.at("pieces");
        const std::vector<std::string_view> pieces = pre.split(text);
        EXPECT_EQ(std::vector<std::string>(pieces.begin(), pieces.end()), want) << text;
    }
}

}  // namespace
}  // namespace minfer
