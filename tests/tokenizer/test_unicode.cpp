// UTF-8 decoding, U+FFFD replacement, NFC and GPT-2's byte <-> unicode mapping.
#include <gtest/gtest.h>

#include <set>

#include "tokenizer/unicode.h"

namespace minfer {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Unicode, DecodesValidSequences) {
    const std::string s = "a\xC3\xA9\xE6\x97\xA5\xF0\x9F\x91\x8D";  // a é 日 👍
    const char32_t want_cp[] = {'a', 0xE9, 0x65E5, 0x1F44D};
    const uint8_t want_len[] = {1, 2, 3, 4};
    size_t pos = 0;
    for (int i = 0; i < 4; ++i) {
        const unicode::Utf8Char c = unicode::decode_utf8(s, pos);
        EXPECT_TRUE(c.valid);
        EXPECT_EQ(c.cp, want_cp[i]);
        EXPECT_EQ(c.len, want_len[i]);
        pos += c.len;
    }
    EXPECT_EQ(pos, s.size());
    EXPECT_TRUE(unicode::is_valid_utf8(s));
}

TEST(Unicode, ReplacesMaximalInvalidSubparts) {
    EXPECT_EQ(unicode::sanitize_utf8("\xF0\x9F\x91"), kFffd);                  // truncated: one U+FFFD
    EXPECT_EQ(unicode::sanitize_utf8("\xF0\x9F\x91x"), kFffd + "x");           // interrupted
    EXPECT_EQ(unicode::sanitize_utf8("\xC0\xAF"), kFffd + kFffd);              // overlong: bytes never valid
    EXPECT_EQ(unicode::sanitize_utf8("\xED\xA0\x80"), kFffd + kFffd + kFffd);  // surrogate
    EXPECT_EQ(unicode::sanitize_utf8("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);  // > U+10FFFF
    EXPECT_EQ(unicode::sanitize_utf8("\x80"
                                     "a\xFF"),
              kFffd + "a" + kFffd);
    EXPECT_EQ(unicode::sanitize_utf8(std::string("a\0b", 3)), std::string("a\0b", 3));
    EXPECT_FALSE(unicode::is_valid_utf8("\xE2\x82"));
    const unicode::Utf8Char c = unicode::decode_utf8("\xE2\x82", 0);
    EXPECT_FALSE(c.valid);
    EXPECT_TRUE(c.truncated);
    EXPECT_EQ(c.len, 2);
}

TEST(Unicode, FindsIncompleteTails) {
    EXPECT_EQ(unicode::incomplete_utf8_tail(""), 0u);
    EXPECT_EQ(unicode::incomplete_utf8_tail("abc"), 0u);
    EXPECT_EQ(unicode::incomplete_utf8_tail("a\xF0"), 1u);
    EXPECT_EQ(unicode::incomplete_utf8_tail("a\xF0\x9F\x91"), 3u);
    EXPECT_EQ(unicode::incomplete_utf8_tail("a\xF0\x9F\x91\x8D"), 0u);
    EXPECT_EQ(unicode::incomplete_utf8_tail("a\xE6\x97"), 2u);
    EXPECT_EQ(unicode::incomplete_utf8_tail("a\x97"), 0u);      // stray continuation: invalid, not pending
    EXPECT_EQ(unicode::incomplete_utf8_tail("a\xE0\x80"), 0u);  // can never become valid
}

TEST(Unicode, NormalisesToNfc) {
    EXPECT_EQ(unicode::nfc("e\xCC\x81"), "\xC3\xA9");  // e + U+0301 -> é
    EXPECT_EQ(unicode::nfc("\xC3\xA9"), "\xC3\xA9");
    EXPECT_EQ(unicode::nfc("\xE1\x84\x92\xE1\x85\xA1"), "\xED\x95\x98");  // Hangul jamo -> 하
    EXPECT_EQ(unicode::nfc(""), "");
    EXPECT_EQ(unicode::nfc(std::string("x\0y", 3)), std::string("x\0y", 3));
}

TEST(Unicode, Gpt2ByteMappingIsABijection) {
    EXPECT_EQ(unicode::byte_to_cp('A'), U'A');
    EXPECT_EQ(unicode::byte_to_cp(' '), 0x120u);   // Ġ
    EXPECT_EQ(unicode::byte_to_cp('\n'), 0x10Au);  // Ċ
    EXPECT_EQ(unicode::byte_to_cp(0xAD), 0x143u);  // the soft hyphen is moved too
    EXPECT_EQ(unicode::byte_to_cp(0xFF), 0xFFu);
    std::set<char32_t> seen;
    for (int b = 0; b < 256; ++b) {
        const char32_t cp = unicode::byte_to_cp(static_cast<uint8_t>(b));
        seen.insert(cp);
        EXPECT_EQ(unicode::byte_from_cp(cp), b);
    }
    EXPECT_EQ(seen.size(), 256u);
    EXPECT_EQ(unicode::byte_from_cp(' '), -1);
    EXPECT_EQ(unicode::byte_from_cp(0x4E00), -1);
    EXPECT_EQ(unicode::byte_to_utf8()[' '], "\xC4\xA0");
}

}  // namespace
}  // namespace minfer
