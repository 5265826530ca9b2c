// The pre-tokenizers whose vocabularies the test data does not hold, against references made by
// tests/tokenizer/data/make-<name>-ref.py: llama.cpp's ids, and the pieces of each one's original regex as
// Python's `regex` module splits them. "tekken" (Mistral Nemo, Small 3.x, Ministral) and "gpt-4o"
// (tiktoken's o200k_base: gpt-oss's o200k_harmony and other o200k vocabularies). The vocabulary is Llama
// 3's with tokenizer.ggml.pre set and the reference's extra merges appended, as the script gave it to
// llama.cpp.
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

struct RefCase {
    const char* pre;   // tokenizer.ggml.pre
    const char* file;  // in tests/tokenizer/data
};

nlohmann::json load_reference(const RefCase& c) {
    const std::string path = std::string(MINFER_SOURCE_DIR) + "/tests/tokenizer/data/" + c.file;
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot open " + path);
    return nlohmann::json::parse(in);
}

// llama3-vocab.gguf with tokenizer.ggml.pre = c.pre and the reference's extra tokens and merges; with
// keep_add_bos false, without its tokenizer.ggml.add_bos_token.
std::unique_ptr<Tokenizer> ref_tokenizer(const RefCase& c, const nlohmann::json& ref, const std::string& path,
                                         bool keep_add_bos = true) {
    const auto vocab = GgufFile::open(test::model_path("llama3-vocab.gguf"));
    GgufWriter w;
    for (const auto& [key, value] : vocab->metadata())
        if (keep_add_bos || key != "tokenizer.ggml.add_bos_token") w.set(key, value);
    w.set_str("tokenizer.ggml.pre", c.pre);
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

class PreTokenizerRef : public ::testing::TestWithParam<RefCase> {};

// Where llama.cpp's approximation of the regex splits a text otherwise (or, for gpt-4o, merges a piece
// that is a whole vocabulary entry, which tiktoken takes whole), the reference's ids_by_piece are the
// answer; elsewhere llama.cpp's ids of the text.
TEST_P(PreTokenizerRef, GivesLlamaCppIds) {
    MINFER_REQUIRE_FILE(test::model_path("llama3-vocab.gguf"));
    const nlohmann::json ref = load_reference(GetParam());
    test::TempDir dir;
    const auto tok = ref_tokenizer(GetParam(), ref, dir.file("vocab.gguf"));
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
    std::printf("%s: %d/%zu texts give llama.cpp's ids for the whole text\n", GetParam().pre,
                same_as_llamacpp, cases.size());
}

TEST_P(PreTokenizerRef, SplitsLikeTheOriginalRegex) {
    const nlohmann::json ref = load_reference(GetParam());
    const PreTokenizer pre(GetParam().pre, "vocab.gguf");
    EXPECT_TRUE(pre.ignore_merges());
    EXPECT_FALSE(pre.nfc());
    for (const auto& c : ref.at("cases")) {
        const std::string text = c.at("text");
        const std::vector<std::string> want = c.at("pieces");
        const std::vector<std::string_view> pieces = pre.split(text);
        EXPECT_EQ(std::vector<std::string>(pieces.begin(), pieces.end()), want) << text;
    }
}

INSTANTIATE_TEST_SUITE_P(Llamacpp, PreTokenizerRef,
                         ::testing::Values(RefCase{"tekken", "tekken.llamacpp.json"},
                                           RefCase{"gpt-4o", "gpt4o.llamacpp.json"}),
                         [](const auto& info) {
                             std::string name = info.param.pre;
                             std::erase(name, '-');
                             return name;
                         });

// A tekken file that does not say whether to add BOS gets one, as llama.cpp gives it.
TEST(TokenizerTekken, AddsBosWhenTheFileDoesNotSay) {
    MINFER_REQUIRE_FILE(test::model_path("llama3-vocab.gguf"));
    const RefCase tekken{"tekken", "tekken.llamacpp.json"};
    test::TempDir dir;
    const auto tok = ref_tokenizer(tekken, load_reference(tekken), dir.file("tekken.gguf"), false);
    ASSERT_GE(tok->bos_id(), 0);
    const std::vector<int32_t> ids = tok->encode("Hello", true, true);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids.front(), tok->bos_id());
}

}  // namespace
}  // namespace minfer
