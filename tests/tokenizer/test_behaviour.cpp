// Properties of the real vocabularies beyond the reference ids: lossless round trips on random text,
// invalid UTF-8, special-token parsing and streaming decode.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <thread>

#include "test_data.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer_test_util.h"
#include "util/error.h"

namespace minfer {
namespace {

// A code point from one of several classes that stress the pre-tokenizer, NFC and byte-level mapping.
char32_t random_code_point(std::mt19937& rng) {
    const auto pick = [&](char32_t lo, char32_t hi) {
        return std::uniform_int_distribution<uint32_t>(lo, hi)(rng);
    };
    static constexpr char32_t kSpaces[] = {0x20, 0x09, 0x0A, 0x0D, 0xA0, 0x85, 0x2028, 0x3000};
    static constexpr char32_t kEmojiGlue[] = {0x200D, 0xFE0F, 0x1F3FB, 0x1F3FD, 0x1F1EB, 0x1F1F7};
    switch (pick(0, 10)) {
        case 0:
            return pick(0x20, 0x7E);  // ASCII
        case 1:
            return pick(0, 1) ? pick(0x00, 0x1F) : pick(0x7F, 0x9F);  // C0/C1 controls, NUL included
        case 2:
            return pick(0xA0, 0x24F);  // Latin-1 and Latin Extended
        case 3:
            return pick(0x300, 0x36F);  // combining marks, which NFC composes
        case 4:
            return pick(0x4E00, 0x9FFF);  // CJK
        case 5:
            return pick(0, 1) ? pick(0x1100, 0x1175) : pick(0xAC00, 0xD7A3);  // Hangul jamo, syllables
        case 6:
            return pick(0x1F300, 0x1FAFF);  // emoji
        case 7:
            return kEmojiGlue[pick(0, 5)];
        case 8:
            return kSpaces[pick(0, 7)];
        case 9:
            return std::string_view("'sltvemdSLTVEMD0123456789")[pick(0, 24)];  // contractions, digits
        default: {
            const char32_t cp = pick(0, 0x10FFFF - 0x800);  // any scalar value: skip the surrogates
            return cp >= 0xD800 ? cp + 0x800 : cp;
        }
    }
}

std::vector<std::string> random_strings(uint32_t seed, int count) {
    std::mt19937 rng(seed);
    std::vector<std::string> out;
    for (int i = 0; i < count; ++i) {
        std::string s;
        const int n = std::uniform_int_distribution<int>(0, 40)(rng);
        for (int k = 0; k < n; ++k) unicode::append_utf8(s, random_code_point(rng));
        out.push_back(std::move(s));
    }
    return out;
}

TEST(TokenizerRoundTrip, QwenRandomTextDecodesToItsNfc) {
    MINFER_REQUIRE_FILE(test::model_path("qwen-vocab.gguf"));
    const Tokenizer& tok = test::shared_tokenizer("qwen-vocab.gguf");
    int changed_by_nfc = 0;
    for (const std::string& s : random_strings(20240601, 500)) {
        const std::vector<int32_t> ids = tok.encode(s, false, false);
        for (const int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok.n_vocab());
        const std::string want = unicode::nfc(s);
        changed_by_nfc += want != s;
        EXPECT_EQ(tok.decode(ids), want);
    }
    EXPECT_GT(changed_by_nfc, 0) << "the random strings should exercise NFC composition";
}

TEST(TokenizerRoundTrip, MiniAndLlama3RandomTextIsLossless) {
    MINFER_REQUIRE_FILE(test::model_path("qwen2-mini-F16.gguf"));
    MINFER_REQUIRE_FILE(test::model_path("llama3-vocab.gguf"));
    const Tokenizer& mini = test::shared_tokenizer("qwen2-mini-F16.gguf");
    const Tokenizer& llama3 = test::shared_tokenizer("llama3-vocab.gguf");
    for (const std::string& s : random_strings(7, 300)) {
        EXPECT_EQ(mini.decode(mini.encode(s, false, true)), unicode::nfc(s));
        EXPECT_EQ(llama3.decode(llama3.encode(s, false, true)), s);  // Llama 3 does not normalise
    }
}

TEST(TokenizerRoundTrip, SentencePieceRandomTextUsesByteFallback) {
    MINFER_REQUIRE_FILE(test::model_path("stories260K.gguf"));
    const Tokenizer& tok = test::shared_tokenizer("stories260K.gguf");
    // 日 is not among the 512 pieces: after ▁ (410) it becomes its byte tokens <0xE6><0x97><0xA5> (3 + byte).
    EXPECT_EQ(tok.encode("日", false, false), (std::vector<int32_t>{410, 3 + 0xE6, 3 + 0x97, 3 + 0xA5}));
    for (const std::string& s : random_strings(99, 200)) {
        EXPECT_EQ(tok.decode(tok.encode(s, false, false)), s.empty() ? "" : " " + s);
    }
}

TEST(TokenizerRoundTrip, ConcurrentEncodesAgree) {
    MINFER_REQUIRE_FILE(test::model_path("qwen-vocab.gguf"));
    const Tokenizer& tok = test::shared_tokenizer("qwen-vocab.gguf");
    const std::vector<std::string> texts = random_strings(11, 200);
    std::vector<std::vector<int32_t>> want;
    for (const std::string& s : texts) want.push_back(tok.encode(s, false, true));
    std::vector<int> mismatches(4, 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            for (int rep = 0; rep < 3; ++rep) {
                for (size_t i = 0; i < texts.size(); ++i)
                    mismatches[t] += tok.encode(texts[i], false, true) != want[i];
            }
        });
    }
    for (std::thread& th : threads) th.join();
    EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

TEST(TokenizerInvalidUtf8, BadBytesBecomeReplacementCharacters) {
    MINFER_REQUIRE_FILE(test::model_path("qwen-vocab.gguf"));
    MINFER_REQUIRE_FILE(test::model_path("stories260K.gguf"));
    const Tokenizer& qwen = test::shared_tokenizer("qwen-vocab.gguf");
    const Tokenizer& spm = test::shared_tokenizer("stories260K.gguf");
    const std::string bad[] = {"\xFF",
                               "abc\x80"
                               "def",
                               "\xE2\x82",
                               "x\xED\xA0\x80y",
                               "\xC0\xAF",
                               "\xF4\x90\x80\x80",
                               "\xF0\x9F\x91",
                               "<|im_start|\xFF>"};
    for (const std::string& s : bad) {
        const std::string clean = unicode::sanitize_utf8(s);
        EXPECT_NE(clean, s);
        EXPECT_EQ(qwen.encode(s, false, true), qwen.encode(clean, false, true));
        EXPECT_EQ(qwen.decode(qwen.encode(s, false, true)), clean);
        EXPECT_EQ(spm.decode(spm.encode(s, false, true)), " " + clean);
    }
    EXPECT_EQ(qwen.decode(qwen.encode("a\xFF"
                                      "b",
                                      false, false)),
              "a\xEF\xBF\xBD"
              "b");
    std::mt19937 rng(5);
    for (int i = 0; i < 300; ++i) {
        std::string s(std::uniform_int_distribution<int>(0, 64)(rng), '\0');
        for (char& c : s) c = static_cast<char>(rng());
        EXPECT_EQ(qwen.decode(qwen.encode(s, false, true)), unicode::nfc(unicode::sanitize_utf8(s)));
        EXPECT_NO_THROW(spm.encode(s, true, true));
    }
}

TEST(TokenizerSpecial, ControlTokensOnlyWhenParsed) {
    MINFER_REQUIRE_FILE(test::model_path("qwen-vocab.gguf"));
    const Tokenizer& tok = test::shared_tokenizer("qwen-vocab.gguf");
    const std::string text = "<|im_start|>user\nhi<|im_end|>";
    EXPECT_EQ(tok.encode(text, false, true), (std::vector<int32_t>{151644, 872, 198, 6023, 151645}));
    const std::vector<int32_t> plain = tok.encode(text, false, false);
    EXPECT_GT(plain.size(), 5u);
    for (const int32_t id : plain) EXPECT_LT(id, 151643) << "no added token when parse_special is false";
    EXPECT_EQ(tok.decode(plain), text);
    // <think> is a user-defined token: recognised either way, like HF tokenizers and llama.cpp.
    EXPECT_EQ(tok.encode("<think>", false, false), (std::vector<int32_t>{151667}));
    EXPECT_EQ(tok.encode("<think>", false, true), (std::vector<int32_t>{151667}));
    EXPECT_EQ(tok.token_to_bytes(151644), "<|im_start|>");
    EXPECT_EQ(tok.token_text(151644), "<|im_start|>");
    EXPECT_EQ(tok.token_text(220), "\xC4\xA0");  // Ġ, GPT-2's stand-in for the space byte
    EXPECT_EQ(tok.token_to_bytes(220), " ");
    EXPECT_THROW(tok.token_to_bytes(tok.n_vocab()), Error);
    EXPECT_THROW(tok.token_to_bytes(-1), Error);
}

TEST(TokenizerSpecial, SentencePieceControlTokens) {
    MINFER_REQUIRE_FILE(test::model_path("stories260K.gguf"));
    const Tokenizer& tok = test::shared_tokenizer("stories260K.gguf");
    const std::vector<int32_t> parsed = tok.encode("a</s>b", false, true);
    ASSERT_EQ(parsed.size(), 3u);
    EXPECT_EQ(parsed[1], 2);
    EXPECT_EQ(tok.decode({parsed[0]}), " a");
    EXPECT_EQ(tok.decode({parsed[2]}), " b");  // a text run after an added token gets the space prefix too
    const std::vector<int32_t> plain = tok.encode("a</s>b", false, false);
    EXPECT_EQ(std::count(plain.begin(), plain.end(), 2), 0);
    EXPECT_EQ(tok.decode(plain), " a</s>b");
}

// Byte tokens of the qwen vocabulary: the tokens that decode to exactly one byte.
std::map<uint8_t, int32_t> single_byte_tokens(const Tokenizer& tok) {
    std::map<uint8_t, int32_t> out;
    for (int32_t id = 0; id < tok.n_vocab() && out.size() < 256; ++id) {
        const std::string b = tok.token_to_bytes(id);
        if (b.size() == 1) out.emplace(static_cast<uint8_t>(b[0]), id);
    }
    return out;
}

TEST(StreamDecoder, HoldsBytesUntilCharactersComplete) {
    MINFER_REQUIRE_FILE(test::model_path("qwen-vocab.gguf"));
    const Tokenizer& tok = test::shared_tokenizer("qwen-vocab.gguf");
    const auto bytes = single_byte_tokens(tok);
    ASSERT_EQ(bytes.size(), 256u);
    const std::string text =
        "a\xE6\x97\xA5\xF0\x9F\x91\x8D"
        "b";  // a 日 👍 b, one byte token per byte
    StreamDecoder dec(tok, false);
    std::vector<std::string> pieces;
    for (const char c : text) pieces.push_back(dec.feed(bytes.at(static_cast<uint8_t>(c))));
    const std::vector<std::string> want = {"a", "", "", "\xE6\x97\xA5", "", "", "", "\xF0\x9F\x91\x8D", "b"};
    EXPECT_EQ(pieces, want);
    EXPECT_EQ(dec.flush(), "");
    dec.feed(bytes.at(0xF0));
    EXPECT_EQ(dec.feed(bytes.at(0x9F)), "");
    EXPECT_EQ(dec.flush(), "\xEF\xBF\xBD");  // an unfinished character at the end becomes one U+FFFD
    EXPECT_EQ(dec.feed(bytes.at('z')), "z");
    EXPECT_EQ(dec.feed(bytes.at(0xFF)), "\xEF\xBF\xBD");  // never valid: replaced at once
}

TEST(StreamDecoder, NeverEmitsPartialCharactersOfRealTokens) {
    MINFER_REQUIRE_FILE(test::model_path("qwen-vocab.gguf"));
    const Tokenizer& tok = test::shared_tokenizer("qwen-vocab.gguf");
    const std::string text = "emoji 👋🏽 🇫🇷 ❤️ 你好世界 안녕하세요";
    const std::vector<int32_t> ids = tok.encode(text, false, true);
    int partial_tokens = 0;
    StreamDecoder dec(tok, false);
    std::string out;
    for (const int32_t id : ids) {
        partial_tokens += !unicode::is_valid_utf8(tok.token_to_bytes(id));
        const std::string piece = dec.feed(id);
        EXPECT_TRUE(unicode::is_valid_utf8(piece)) << "token " << id;
        out += piece;
    }
    out += dec.flush();
    EXPECT_GT(partial_tokens, 0) << "the text should split characters across tokens";
    EXPECT_EQ(out, text);
}

// Control tokens (<|im_end|>, <|endoftext|>) add no text when skipped, as in llama.cpp's and vLLM's
// generated text, and their stored text otherwise; text around them is unchanged and held bytes
// survive a skipped token in between.
TEST(StreamDecoder, SkipsSpecialTokensWhenAsked) {
    MINFER_REQUIRE_FILE(test::model_path("qwen-vocab.gguf"));
    const Tokenizer& tok = test::shared_tokenizer("qwen-vocab.gguf");
    const std::vector<int32_t> ids = tok.encode("Hi<|im_end|>\xE6\x97\xA5<|endoftext|>!", false, true);
    int specials = 0;
    for (const int32_t id : ids) specials += tok.is_special(id);
    ASSERT_EQ(specials, 2) << "the control tokens should be parsed as such";
    EXPECT_FALSE(tok.is_special(ids.front()));
    StreamDecoder skip(tok, true), show(tok, false);
    std::string skipped, shown;
    for (const int32_t id : ids) skipped += skip.feed(id), shown += show.feed(id);
    EXPECT_EQ(skipped + skip.flush(), "Hi\xE6\x97\xA5!");
    EXPECT_EQ(shown + show.flush(), "Hi<|im_end|>\xE6\x97\xA5<|endoftext|>!");
    StreamDecoder held(tok, true);
    const auto bytes = single_byte_tokens(tok);
    EXPECT_EQ(held.feed(bytes.at(0xE6)), "");
    EXPECT_EQ(held.feed(tok.encode("<|im_end|>", false, true).at(0)), "");
    EXPECT_EQ(held.feed(bytes.at(0x97)), "");
    EXPECT_EQ(held.feed(bytes.at(0xA5)), "\xE6\x97\xA5");
}

}  // namespace
}  // namespace minfer
