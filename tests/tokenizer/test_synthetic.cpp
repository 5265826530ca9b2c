// Small vocabularies written with GgufWriter, to check merge order, added-token matching and the errors
// for vocabularies we cannot handle.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "util/error.h"

namespace minfer {
namespace {

struct Spec {
    std::string model = "gpt2";
    std::string pre = "gpt-2";
    std::vector<std::string> extra;  // appended after the 256 byte tokens
    std::vector<int32_t> extra_types;
    std::vector<std::string> merges;
    std::vector<float> scores;  // written when not empty
    int first_byte_token = 0;   // byte tokens written: first_byte_token..255 (256: none)
    int bos = -1;               // written when >= 0, like unk
    int unk = -1;
};

class SyntheticVocab : public ::testing::Test {
  protected:
    void TearDown() override { std::filesystem::remove(path_); }

    // Writes a vocabulary: the byte tokens (GPT-2 mapping; ids 0..255 by default), then `spec.extra`.
    std::unique_ptr<Tokenizer> build(const Spec& spec) {
        std::vector<std::string> tokens;
        std::vector<int32_t> types;
        for (int b = spec.first_byte_token; b < 256; ++b) {
            tokens.push_back(unicode::byte_to_utf8()[b]);
            types.push_back(1);
        }
        tokens.insert(tokens.end(), spec.extra.begin(), spec.extra.end());
        types.insert(types.end(), spec.extra_types.begin(), spec.extra_types.end());
        GgufWriter w;
        w.set_str("tokenizer.ggml.model", spec.model);
        w.set_str("tokenizer.ggml.pre", spec.pre);
        w.set_str_array("tokenizer.ggml.tokens", tokens);
        w.set_i32_array("tokenizer.ggml.token_type", types);
        w.set_str_array("tokenizer.ggml.merges", spec.merges);
        if (!spec.scores.empty()) w.set_f32_array("tokenizer.ggml.scores", spec.scores);
        if (spec.bos >= 0) w.set_u32("tokenizer.ggml.bos_token_id", spec.bos);
        if (spec.unk >= 0) w.set_u32("tokenizer.ggml.unknown_token_id", spec.unk);
        w.write(path_);
        return Tokenizer::from_gguf(*GgufFile::open(path_));
    }

    std::vector<int32_t> bytes(std::string_view s) {
        std::vector<int32_t> ids;
        for (const char c : s) ids.push_back(static_cast<uint8_t>(c));
        return ids;
    }

    std::string path_ =
        (std::filesystem::temp_directory_path() / ("minfer_tok_" + std::to_string(getpid()) + ".gguf"))
            .string();
};

TEST_F(SyntheticVocab, MergesApplyByRankThenLeftmost) {
    Spec spec;
    spec.extra = {"ab", "bc", "abc", "aa"};  // ids 256..259
    spec.extra_types = {1, 1, 1, 1};
    spec.merges = {"b c", "a b", "ab c", "a a"};
    const auto tok = build(spec);
    EXPECT_EQ(tok->encode("abc", false, false), (std::vector<int32_t>{'a', 257}));  // "b c" outranks "a b"
    EXPECT_EQ(tok->encode("abd", false, false), (std::vector<int32_t>{256, 'd'}));
    EXPECT_EQ(tok->encode("aaa", false, false), (std::vector<int32_t>{259, 'a'}));  // leftmost pair first
    EXPECT_EQ(tok->encode("x", false, false), bytes("x"));
}

TEST_F(SyntheticVocab, LlamaBpeTakesWholePiecesFromTheVocabulary) {
    Spec spec;
    spec.extra = {"abc"};  // no merge leads to it
    spec.extra_types = {1};
    EXPECT_EQ(build(spec)->encode("abc", false, false), bytes("abc"));
    spec.pre = "llama-bpe";
    EXPECT_EQ(build(spec)->encode("abc", false, false), (std::vector<int32_t>{256}));
}

TEST_F(SyntheticVocab, AddedTokensMatchLongestFirst) {
    Spec spec;
    spec.extra = {"<x>", "<x><y>", "<u>"};  // ids 256..258: control, control, user-defined
    spec.extra_types = {3, 3, 4};
    const auto tok = build(spec);
    EXPECT_EQ(tok->encode("<x><y>", false, true), (std::vector<int32_t>{257}));
    EXPECT_EQ(tok->encode("<x><z>", false, true), (std::vector<int32_t>{256, '<', 'z', '>'}));
    EXPECT_EQ(tok->encode("<x><y>", false, false), bytes("<x><y>"));
    EXPECT_EQ(tok->encode("a<u>b", false, false), (std::vector<int32_t>{'a', 258, 'b'}));
    EXPECT_EQ(tok->decode({257, 'q'}), "<x><y>q");
}

TEST_F(SyntheticVocab, SentencePieceMergesByScoreThenLeftmost) {
    Spec spec;
    spec.model = "llama";
    spec.first_byte_token = 256;
    spec.extra = {"<unk>",
                  "<s>",
                  "</s>",
                  "\xE2\x96\x81",
                  "a",
                  "b",
                  "ab",
                  "ba",
                  "\xE2\x96\x81"
                  "b"};
    spec.extra_types = {2, 3, 3, 1, 1, 1, 1, 1, 1};
    spec.scores = {0, 0, 0, -1, -1, -1, -5, -5, -9};
    spec.bos = 1;
    spec.unk = 0;
    const auto tok = build(spec);
    EXPECT_EQ(tok->encode("aba", true, false), (std::vector<int32_t>{1, 3, 6, 4}));  // ▁ ab a: equal scores
    spec.scores[7] = -4;                                                             // now "ba" outranks "ab"
    EXPECT_EQ(build(spec)->encode("aba", false, false), (std::vector<int32_t>{3, 4, 7}));
    EXPECT_EQ(tok->encode("b c", false, false), (std::vector<int32_t>{8, 3, 0}));  // c: no byte tokens, <unk>
    EXPECT_EQ(tok->decode({8, 3, 6}), " b ab");
}

TEST_F(SyntheticVocab, UnknownPreTokenizerIsAnError) {
    Spec spec;
    spec.pre = "mystery-pre";
    try {
        build(spec);
        FAIL() << "expected an Error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(path_), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("mystery-pre"), std::string::npos) << e.what();
    }
}

TEST_F(SyntheticVocab, UnsupportedModelsAndMissingBytesAreErrors) {
    Spec unknown_model;
    unknown_model.model = "wordpiece";
    EXPECT_THROW(build(unknown_model), Error);
    Spec missing_bytes;
    missing_bytes.first_byte_token = 128;
    EXPECT_THROW(build(missing_bytes), Error);
    Spec bad_merge;
    bad_merge.merges = {"nospace"};
    EXPECT_THROW(build(bad_merge), Error);
}

// End of generation: <|end|> ends a turn (Phi-3 and others), but in gpt-oss's harmony vocabulary, which also
// has <|return|> and <|call|>, it only closes a message (the reasoning, before the final answer): there
// <|return|> and <|call|> end generation and <|end|> does not.
TEST_F(SyntheticVocab, HarmonyEndsGenerationAtReturnAndCallOnly) {
    const int32_t kControl = 3;
    Spec plain;
    plain.extra = {"<|end|>"};
    plain.extra_types = {kControl};
    EXPECT_TRUE(build(plain)->is_eog(256));
    Spec harmony;
    harmony.extra = {"<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>"};
    harmony.extra_types = std::vector<int32_t>(harmony.extra.size(), kControl);
    const auto tok = build(harmony);
    EXPECT_FALSE(tok->is_eog(256 + 3)) << "<|end|>";
    EXPECT_TRUE(tok->is_eog(256 + 4)) << "<|return|>";
    EXPECT_TRUE(tok->is_eog(256 + 5)) << "<|call|>";
    EXPECT_FALSE(tok->is_eog(256 + 1)) << "<|channel|>";
}

}  // namespace
}  // namespace minfer
