// Sets of Unicode scalar values and the byte paths that read them inside a JSON string: the canonical
// encoding of each character (raw UTF-8, with '"', '\' and control characters escaped as a JSON
// serializer writes them) for patterns and formats, and every valid encoding (any escape, \u surrogate
// pairs) for unconstrained strings.
#pragma once
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "grammar/nfa.h"

namespace minfer::grammar {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// Sorted, disjoint, non-adjacent inclusive ranges of code points.
class CodeSet {
  public:
    CodeSet() = default;
    static CodeSet single(uint32_t c) { return range(c, c); }
    static CodeSet range(uint32_t lo, uint32_t hi);
    static CodeSet scalars();  // every code point but the surrogates D800-DFFF

    void add(uint32_t lo, uint32_t hi);
    void add(const CodeSet& other);
    CodeSet complement() const;  // within scalars()
    CodeSet intersect(const CodeSet& other) const;
    bool empty() const { return ranges_.empty(); }
    const std::vector<std::pair<uint32_t, uint32_t>>& ranges() const { return ranges_; }

  private:
    std::vector<std::pair<uint32_t, uint32_t>> ranges_;
};

// Decodes UTF-8 into code points; false (out partial) on an invalid sequence.
bool decode_utf8(std::string_view s, std::vector<uint32_t>& out);

// The UTF-8 encodings of [lo, hi] (no surrogates inside) as sequences of byte ranges.
std::vector<ByteSeq> utf8_sequences(uint32_t lo, uint32_t hi);

// Paths from -> to reading one character of `set` in its canonical JSON-string encoding.
void emit_canonical_chars(Nfa& nfa, uint32_t from, const CodeSet& set, uint32_t to);
// Paths from -> to reading one JSON string character in any valid encoding.
void emit_any_char(Nfa& nfa, uint32_t from, uint32_t to);

}  // namespace minfer::grammar
