// Token ids against references produced by other implementations: HF tokenizers (tokenizer.ref.json) for
// the byte-level BPE vocabularies and llama.cpp (stories260K.llamacpp.json) for SentencePiece.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "test_data.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer_test_util.h"

namespace minfer {
namespace {

nlohmann::json load_json(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot open " + path);
    return nlohmann::json::parse(in);
}

// Every case of `suite` must give exactly the reference ids (no BOS, special tokens parsed); the decoded
// text must equal HF's and, when the input is already NFC, the input itself.
void check_suite(const std::string& suite, const std::string& model) {
    const nlohmann::json cases = load_json(test::ref_path("tokenizer.ref.json")).at(suite);
    const Tokenizer& tok = test::shared_tokenizer(model);
    ASSERT_GT(cases.size(), 0u);
    int exact = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
        const std::string text = cases[i].at("text");
        const std::vector<int32_t> want = cases[i].at("ids");
        const std::vector<int32_t> got = tok.encode(text, false, true);
        EXPECT_EQ(got, want) << suite << " case " << i << ": " << text;
        exact += got == want;
        const std::string decoded = tok.decode(got);
        if (cases[i].contains("decoded")) {
            EXPECT_EQ(decoded, cases[i].at("decoded").get<std::string>()) << suite << " case " << i;
        }
        if (unicode::nfc(text) == text) {
            EXPECT_EQ(decoded, text) << suite << " case " << i;
        }
    }
    std::printf("%s: %d/%zu cases give the reference ids\n", suite.c_str(), exact, cases.size());
}

TEST(TokenizerReference, QwenFull) {
    MINFER_REQUIRE_FILE(test::ref_path("tokenizer.ref.json"));
    MINFER_REQUIRE_FILE(test::model_path("qwen-vocab.gguf"));
    check_suite("qwen-full", "qwen-vocab.gguf");
}

TEST(TokenizerReference, QwenMini) {
    MINFER_REQUIRE_FILE(test::ref_path("tokenizer.ref.json"));
    MINFER_REQUIRE_FILE(test::model_path("qwen2-mini-F16.gguf"));
    check_suite("qwen-mini", "qwen2-mini-F16.gguf");
}

TEST(TokenizerReference, Llama3Full) {
    MINFER_REQUIRE_FILE(test::ref_path("tokenizer.ref.json"));
    MINFER_REQUIRE_FILE(test::model_path("llama3-vocab.gguf"));
    check_suite("llama3-full", "llama3-vocab.gguf");
}

TEST(TokenizerReference, Stories260K) {
    MINFER_REQUIRE_FILE(test::ref_path("stories260K.llamacpp.json"));
    MINFER_REQUIRE_FILE(test::model_path("stories260K.gguf"));
    const nlohmann::json prompts = load_json(test::ref_path("stories260K.llamacpp.json")).at("prompts");
    const Tokenizer& tok = test::shared_tokenizer("stories260K.gguf");
    ASSERT_GT(prompts.size(), 0u);
    for (const auto& p : prompts) {
        const std::string text = p.at("text");
        const std::vector<int32_t> want = p.at("ids");
        const std::vector<int32_t> got = tok.encode(text, true, true);
        EXPECT_EQ(got, want) << text;
        ASSERT_FALSE(got.empty());
        EXPECT_EQ(got[0], tok.bos_id());
        // SentencePiece prepends one space; everything after BOS decodes back to it.
        EXPECT_EQ(tok.decode(std::vector<int32_t>(got.begin() + 1, got.end())), " " + text);
    }
}

TEST(TokenizerReference, BosFollowsTheVocabulary) {
    MINFER_REQUIRE_FILE(test::model_path("qwen-vocab.gguf"));
    MINFER_REQUIRE_FILE(test::model_path("llama3-vocab.gguf"));
    const Tokenizer& qwen = test::shared_tokenizer("qwen-vocab.gguf");  // add_bos_token = false
    EXPECT_EQ(qwen.encode("Hello world", true, true), (std::vector<int32_t>{9707, 1879}));
    const Tokenizer& llama3 = test::shared_tokenizer("llama3-vocab.gguf");  // add_bos_token = true
    EXPECT_EQ(llama3.encode("Hello world", true, true), (std::vector<int32_t>{128000, 9906, 1917}));
    EXPECT_EQ(llama3.encode("Hello world", false, true), (std::vector<int32_t>{9906, 1917}));
    EXPECT_EQ(llama3.encode("", true, true), (std::vector<int32_t>{128000}));
}

// Pieces that are whole vocabulary entries but that merging by rank would split (HF's ignore_merges).
TEST(TokenizerReference, Llama3LooksUpWholePieces) {
    MINFER_REQUIRE_FILE(test::model_path("llama3-vocab.gguf"));
    const Tokenizer& llama3 = test::shared_tokenizer("llama3-vocab.gguf");
    EXPECT_EQ(llama3.encode("mektedir", false, false), (std::vector<int32_t>{102909}));
    EXPECT_EQ(llama3.encode(".:.:.:.:.:.:.:.:", false, false), (std::vector<int32_t>{105356}));
}

TEST(TokenizerReference, EndOfGeneration) {
    MINFER_REQUIRE_FILE(test::model_path("qwen-vocab.gguf"));
    MINFER_REQUIRE_FILE(test::model_path("llama3-vocab.gguf"));
    MINFER_REQUIRE_FILE(test::model_path("stories260K.gguf"));
    const Tokenizer& qwen = test::shared_tokenizer("qwen-vocab.gguf");
    EXPECT_TRUE(qwen.is_eog(151643));   // <|endoftext|>
    EXPECT_TRUE(qwen.is_eog(151645));   // <|im_end|>
    EXPECT_FALSE(qwen.is_eog(151644));  // <|im_start|>
    EXPECT_FALSE(qwen.is_eog(9707));
    EXPECT_FALSE(qwen.is_eog(-1));
    const Tokenizer& llama3 = test::shared_tokenizer("llama3-vocab.gguf");
    EXPECT_TRUE(llama3.is_eog(128009));   // <|eot_id|>
    EXPECT_TRUE(llama3.is_eog(128001));   // <|end_of_text|>
    EXPECT_FALSE(llama3.is_eog(128000));  // <|begin_of_text|>
    const Tokenizer& stories = test::shared_tokenizer("stories260K.gguf");
    EXPECT_TRUE(stories.is_eog(2));
    EXPECT_FALSE(stories.is_eog(1));
    EXPECT_EQ(stories.bos_id(), 1);
    EXPECT_EQ(stories.eos_id(), 2);
}

}  // namespace
}  // namespace minfer
