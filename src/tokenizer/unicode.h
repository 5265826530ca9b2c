// UTF-8 and Unicode helpers shared by the tokenizers: strict decoding (with the "maximal subpart" rule for
// invalid input), replacement of invalid sequences by U+FFFD, NFC normalisation (utf8proc) and GPT-2's
// byte <-> unicode mapping used by byte-level BPE vocabularies.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include "util/utf8.h"

namespace minfer::unicode {

using minfer::append_utf8;

// One step of UTF-8 decoding at a position. For a valid character `len` is its byte length. For an
// invalid one `len` is the number of bytes to replace by a single U+FFFD (the maximal subpart, >= 1);
// `truncated` says the bytes were a valid but unfinished prefix cut off by the end of the input.
struct Utf8Char {
    char32_t cp = 0;
    uint8_t len = 1;
    bool valid = false;
    bool truncated = false;
};

Utf8Char decode_utf8(std::string_view s, size_t pos);
bool is_valid_utf8(std::string_view s);
// Copy of `s` with every invalid sequence replaced by U+FFFD.
std::string sanitize_utf8(std::string_view s);
// Bytes at the end of `s` that form a valid but incomplete character (0 when the text ends cleanly).
size_t incomplete_utf8_tail(std::string_view s);
// Unicode canonical composition (NFC). `s` must be valid UTF-8; throws Error otherwise.
std::string nfc(std::string_view s);

// GPT-2 byte-level mapping: each byte has a printable code point standing for it in the vocabulary.
char32_t byte_to_cp(uint8_t b);
// The byte a code point stands for, or -1 when the code point is not part of the mapping.
int byte_from_cp(char32_t cp);
// UTF-8 of byte_to_cp(b), precomputed for the 256 bytes.
const std::array<std::string, 256>& byte_to_utf8();

}  // namespace minfer::unicode
