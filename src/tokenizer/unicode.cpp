#include "tokenizer/unicode.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "util/error.h"

namespace minfer::unicode {

namespace {

constexpr char32_t kReplacement = 0xFFFD;

// Allowed range of the second byte of a multi-byte sequence, which excludes overlong forms, surrogates and
// code points above U+10FFFF; later continuation bytes are always 0x80..0xBF.
struct LeadInfo {
    uint8_t len;
    uint8_t lo;
    uint8_t hi;
};

LeadInfo lead_info(uint8_t b) {
    if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
    if (b == 0xE0) return {3, 0xA0, 0xBF};
    if (b == 0xED) return {3, 0x80, 0x9F};
    if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
    if (b == 0xF0) return {4, 0x90, 0xBF};
    if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
    if (b == 0xF4) return {4, 0x80, 0x8F};
    return {0, 0, 0};
}

// GPT-2 keeps the printable Latin-1 bytes as themselves and moves the others to 256, 257, ... in byte order.
bool byte_is_printable(int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
}

struct ByteTables {
    std::array<char32_t, 256> to_cp{};
    std::array<std::string, 256> to_utf8;
    std::array<int16_t, 512> from_cp{};
    ByteTables() {
        from_cp.fill(-1);
        char32_t next = 256;
        for (int b = 0; b < 256; ++b) {
            to_cp[b] = byte_is_printable(b) ? static_cast<char32_t>(b) : next++;
            from_cp[to_cp[b]] = static_cast<int16_t>(b);
            append_utf8(to_utf8[b], to_cp[b]);
        }
    }
};

const ByteTables& byte_tables() {
    static const ByteTables tables;
    return tables;
}

}  // namespace

Utf8Char decode_utf8(std::string_view s, size_t pos) {
    const auto b0 = static_cast<uint8_t>(s[pos]);
    if (b0 < 0x80) return {b0, 1, true, false};
    const LeadInfo info = lead_info(b0);
    if (info.len == 0) return {kReplacement, 1, false, false};
    char32_t cp = b0 & (0xFF >> (info.len + 1));
    for (uint8_t k = 1; k < info.len; ++k) {
        if (pos + k >= s.size()) return {kReplacement, k, false, true};
        const auto c = static_cast<uint8_t>(s[pos + k]);
        const uint8_t lo = k == 1 ? info.lo : 0x80;
        const uint8_t hi = k == 1 ? info.hi : 0xBF;
        if (c < lo || c > hi) return {kReplacement, k, false, false};
        cp = (cp << 6) | (c & 0x3F);
    }
    return {cp, info.len, true, false};
}

bool is_valid_utf8(std::string_view s) {
    size_t pos = 0;
    while (pos < s.size()) {
        if (static_cast<uint8_t>(s[pos]) < 0x80) {
            ++pos;
            continue;
        }
        const Utf8Char c = decode_utf8(s, pos);
        if (!c.valid) return false;
        pos += c.len;
    }
    return true;
}

std::string sanitize_utf8(std::string_view s) {
    if (is_valid_utf8(s)) return std::string(s);
    std::string out;
    out.reserve(s.size() + 16);
    size_t pos = 0;
    while (pos < s.size()) {
        const Utf8Char c = decode_utf8(s, pos);
        if (c.valid) {
            out.append(s.substr(pos, c.len));
        } else {
            append_utf8(out, kReplacement);
        }
        pos += c.len;
    }
    return out;
}

size_t incomplete_utf8_tail(std::string_view s) {
    // A character is at most 4 bytes, so an unfinished one starts within the last 3 bytes.
    const size_t first = s.size() > 3 ? s.size() - 3 : 0;
    for (size_t pos = s.size(); pos > first; --pos) {
        const auto b = static_cast<uint8_t>(s[pos - 1]);
        if ((b & 0xC0) == 0x80) continue;  // a continuation byte: keep looking for its lead
        const Utf8Char c = decode_utf8(s, pos - 1);
        return c.truncated ? s.size() - (pos - 1) : 0;
    }
    return 0;
}

std::string nfc(std::string_view s) {
    // Text below U+0300 (no byte >= 0xCC) has no combining marks or decomposable singletons: it is NFC.
    bool below_u300 = true;
    for (const char ch : s) below_u300 = below_u300 && static_cast<uint8_t>(ch) < 0xCC;
    if (below_u300) return std::string(s);
    utf8proc_uint8_t* raw = nullptr;
    const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                static_cast<utf8proc_ssize_t>(s.size()), &raw,
                                static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(raw, &std::free);
    if (n < 0) throw Error(std::string("NFC normalisation failed: ") + utf8proc_errmsg(n));
    return std::string(reinterpret_cast<const char*>(raw), static_cast<size_t>(n));
}

char32_t byte_to_cp(uint8_t b) {
    return byte_tables().to_cp[b];
}

int byte_from_cp(char32_t cp) {
    return cp < 512 ? byte_tables().from_cp[cp] : -1;
}

const std::array<std::string, 256>& byte_to_utf8() {
    return byte_tables().to_utf8;
}

}  // namespace minfer::unicode
