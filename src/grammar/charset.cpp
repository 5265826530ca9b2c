// CodeSet operations and JSON-string character paths; see charset.h.
#include "grammar/charset.h"

#include <algorithm>
#include <string>

namespace minfer::grammar {

CodeSet CodeSet::range(uint32_t lo, uint32_t hi) {
    CodeSet s;
    s.add(lo, hi);
    return s;
}

CodeSet CodeSet::scalars() {
    CodeSet s;
    s.add(0, 0xD7FF);
    s.add(0xE000, kMaxCodePoint);
    return s;
}

void CodeSet::add(uint32_t lo, uint32_t hi) {
    if (lo > hi) return;
    std::vector<std::pair<uint32_t, uint32_t>> out;
    bool placed = false;
    for (auto [a, b] : ranges_) {
        if (b + 1 < lo) {
            out.emplace_back(a, b);
        } else if (hi + 1 < a) {
            if (!placed) out.emplace_back(lo, hi), placed = true;
            out.emplace_back(a, b);
        } else {
            lo = std::min(lo, a), hi = std::max(hi, b);
        }
    }
    if (!placed) out.emplace_back(lo, hi);
    ranges_ = std::move(out);
}

void CodeSet::add(const CodeSet& other) {
    for (auto [a, b] : other.ranges_) add(a, b);
}

CodeSet CodeSet::complement() const {
    CodeSet out;
    uint32_t next = 0;
    for (auto [a, b] : ranges_) {
        if (a > next) out.add(next, a - 1);
        next = b + 1;
    }
    if (next <= kMaxCodePoint) out.add(next, kMaxCodePoint);
    return out.intersect(scalars());
}

CodeSet CodeSet::intersect(const CodeSet& other) const {
    CodeSet out;
    for (auto [a, b] : ranges_)
        for (auto [c, d] : other.ranges_)
            if (std::max(a, c) <= std::min(b, d)) out.ranges_.emplace_back(std::max(a, c), std::min(b, d));
    std::sort(out.ranges_.begin(), out.ranges_.end());
    CodeSet merged;
    for (auto [a, b] : out.ranges_) merged.add(a, b);
    return merged;
}

namespace {

int utf8_length(uint32_t c) {
    return c <= 0x7F ? 1 : c <= 0x7FF ? 2 : c <= 0xFFFF ? 3 : 4;
}

std::vector<uint8_t> utf8_encode(uint32_t c) {
    switch (utf8_length(c)) {
        case 1:
            return {static_cast<uint8_t>(c)};
        case 2:
            return {static_cast<uint8_t>(0xC0 | (c >> 6)), static_cast<uint8_t>(0x80 | (c & 0x3F))};
        case 3:
            return {static_cast<uint8_t>(0xE0 | (c >> 12)), static_cast<uint8_t>(0x80 | ((c >> 6) & 0x3F)),
                    static_cast<uint8_t>(0x80 | (c & 0x3F))};
        default:
            return {static_cast<uint8_t>(0xF0 | (c >> 18)), static_cast<uint8_t>(0x80 | ((c >> 12) & 0x3F)),
                    static_cast<uint8_t>(0x80 | ((c >> 6) & 0x3F)), static_cast<uint8_t>(0x80 | (c & 0x3F))};
    }
}

// Splits [lo, hi] until both ends share an encoding length and every byte position but one spans a
// whole continuation range, so the range is one sequence of byte ranges.
void split_utf8(uint32_t lo, uint32_t hi, std::vector<ByteSeq>& out) {
    if (lo > hi) return;
    for (uint32_t bound : {0x7Fu, 0x7FFu, 0xFFFFu})
        if (lo <= bound && hi > bound) {
            split_utf8(lo, bound, out);
            split_utf8(bound + 1, hi, out);
            return;
        }
    const int n = utf8_length(lo);
    for (int i = 1; i < n; ++i) {
        const uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) == (hi & ~m)) continue;
        if ((lo & m) != 0) {
            split_utf8(lo, lo | m, out);
            split_utf8((lo | m) + 1, hi, out);
            return;
        }
        if ((hi & m) != m) {
            split_utf8(lo, (hi & ~m) - 1, out);
            split_utf8(hi & ~m, hi, out);
            return;
        }
    }
    const std::vector<uint8_t> a = utf8_encode(lo), b = utf8_encode(hi);
    ByteSeq seq;
    for (size_t i = 0; i < a.size(); ++i) seq.emplace_back(a[i], b[i]);
    out.push_back(std::move(seq));
}

// How a JSON serializer escapes a character that may not appear raw in a string.
std::string escape_of(uint32_t c) {
    switch (c) {
        case '"':
            return "\\\"";
        case '\\':
            return "\\\\";
        case '\b':
            return "\\b";
        case '\t':
            return "\\t";
        case '\n':
            return "\\n";
        case '\f':
            return "\\f";
        case '\r':
            return "\\r";
        default: {
            static const char* hex = "0123456789abcdef";
            return std::string("\\u00") + hex[c >> 4] + hex[c & 15];
        }
    }
}

void hex_digit(Nfa& nfa, uint32_t from, uint32_t to) {
    nfa.bytes(from, '0', '9', to);
    nfa.bytes(from, 'a', 'f', to);
    nfa.bytes(from, 'A', 'F', to);
}

// \uXXXX escapes: any code unit but a surrogate, or a high surrogate followed by a low one.
void emit_unicode_escape(Nfa& nfa, uint32_t from, uint32_t to) {
    const uint32_t u = nfa.node(), a1 = nfa.node(), a2 = nfa.node(), a3 = nfa.node();
    nfa.literal(from, "\\u", u);
    nfa.bytes(u, '0', '9', a1);
    nfa.bytes(u, 'a', 'c', a1);
    nfa.bytes(u, 'A', 'C', a1);
    nfa.bytes(u, 'e', 'f', a1);
    nfa.bytes(u, 'E', 'F', a1);
    hex_digit(nfa, a1, a2);
    hex_digit(nfa, a2, a3);
    hex_digit(nfa, a3, to);
    const uint32_t d = nfa.node(), hi2 = nfa.node(), hi3 = nfa.node(), hi4 = nfa.node(), lo1 = nfa.node(),
                   lo2 = nfa.node();
    nfa.bytes(u, 'd', 'd', d);
    nfa.bytes(u, 'D', 'D', d);
    nfa.bytes(d, '0', '7', a2);
    nfa.bytes(d, '8', '9', hi2);
    nfa.bytes(d, 'a', 'b', hi2);
    nfa.bytes(d, 'A', 'B', hi2);
    hex_digit(nfa, hi2, hi3);
    hex_digit(nfa, hi3, hi4);
    nfa.literal(hi4, "\\u", lo1);
    nfa.bytes(lo1, 'd', 'd', lo2);
    nfa.bytes(lo1, 'D', 'D', lo2);
    nfa.bytes(lo2, 'c', 'f', a2);
    nfa.bytes(lo2, 'C', 'F', a2);
}

}  // namespace

bool decode_utf8(std::string_view s, std::vector<uint32_t>& out) {
    for (size_t i = 0; i < s.size();) {
        const auto b = static_cast<unsigned char>(s[i]);
        const int n = b < 0x80 ? 1 : b >= 0xF8 ? 0 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC2 ? 2 : 0;
        if (n == 0 || i + n > s.size()) return false;
        uint32_t c = n == 1 ? b : b & (0x3F >> (n - 1));
        for (int k = 1; k < n; ++k) {
            const auto cont = static_cast<unsigned char>(s[i + k]);
            if ((cont & 0xC0) != 0x80) return false;
            c = (c << 6) | (cont & 0x3F);
        }
        if (utf8_length(c) != n || (c >= 0xD800 && c <= 0xDFFF) || c > kMaxCodePoint) return false;
        out.push_back(c);
        i += n;
    }
    return true;
}

std::vector<ByteSeq> utf8_sequences(uint32_t lo, uint32_t hi) {
    std::vector<ByteSeq> out;
    split_utf8(lo, hi, out);
    return out;
}

void emit_canonical_chars(Nfa& nfa, uint32_t from, const CodeSet& set, uint32_t to) {
    const CodeSet scalars = set.intersect(CodeSet::scalars());
    for (auto [lo, hi] : scalars.ranges()) {
        for (uint32_t c = lo; c <= std::min(hi, 0x7Fu); ++c) {
            if (c < 0x20 || c == '"' || c == '\\') {
                nfa.literal(from, escape_of(c), to);
                continue;
            }
            uint32_t end = c;  // extend over the printable run
            while (end + 1 <= std::min(hi, 0x7Fu) && end + 1 != '"' && end + 1 != '\\') ++end;
            nfa.bytes(from, static_cast<uint8_t>(c), static_cast<uint8_t>(end), to);
            c = end;
        }
        if (hi >= 0x80)
            for (const ByteSeq& seq : utf8_sequences(std::max(lo, 0x80u), hi)) nfa.byte_seq(from, seq, to);
    }
}

void emit_any_char(Nfa& nfa, uint32_t from, uint32_t to) {
    nfa.bytes(from, 0x20, 0x21, to);
    nfa.bytes(from, 0x23, 0x5B, to);
    nfa.bytes(from, 0x5D, 0x7F, to);
    for (const ByteSeq& seq : utf8_sequences(0x80, 0xD7FF)) nfa.byte_seq(from, seq, to);
    for (const ByteSeq& seq : utf8_sequences(0xE000, kMaxCodePoint)) nfa.byte_seq(from, seq, to);
    const uint32_t esc = nfa.node();
    nfa.bytes(from, '\\', '\\', esc);
    for (char c : std::string("\"\\/bfnrt"))
        nfa.bytes(esc, static_cast<uint8_t>(c), static_cast<uint8_t>(c), to);
    emit_unicode_escape(nfa, from, to);
}

}  // namespace minfer::grammar
