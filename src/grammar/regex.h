// Regular languages over the characters of a JSON string: the ECMA-262 pattern subset JSON Schema's
// `pattern` may use here (literals, escapes, '.', classes with ranges and negation, \d \w \s and their
// negations, groups, '|', ? * + {m} {m,} {m,n}, ^ and $ at the ends of the pattern), the string formats,
// intersection (pattern with format and length bounds) and emission as canonical JSON bytes.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "grammar/charset.h"
#include "grammar/nfa.h"

namespace minfer::grammar {

// A pattern outside the subset, or a malformed one; what() says which construct.
struct PatternError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// An NFA whose edges read one character of a set (an empty set: epsilon). Node 0 is the start; at most
// kMaxNodes nodes (GrammarLimit beyond), which bounds {m,n} expansion.
class CharNfa {
  public:
    static constexpr uint32_t kMaxNodes = 1u << 14;
    struct Edge {
        CodeSet set;
        uint32_t target;
    };
    CharNfa() { node(); }
    uint32_t node();
    void edge(uint32_t from, CodeSet set, uint32_t to) { edges_[from].push_back({std::move(set), to}); }
    void eps(uint32_t from, uint32_t to) { edges_[from].push_back({CodeSet(), to}); }
    void set_accepting(uint32_t n) { accepting_[n] = true; }
    size_t size() const { return edges_.size(); }
    const std::vector<Edge>& edges(uint32_t n) const { return edges_[n]; }
    bool accepting(uint32_t n) const { return accepting_[n]; }

  private:
    std::vector<std::vector<Edge>> edges_;
    std::vector<bool> accepting_;
};

// The strings `pattern` matches somewhere (search semantics: an end without its anchor matches any text).
CharNfa compile_pattern(std::string_view pattern);
// The strings of `format` when it is date, time, date-time, uuid or email; false for other formats.
bool compile_format(std::string_view format, CharNfa& out);
// Any string of min..max characters (max kUnbounded: no upper bound).
CharNfa length_between(uint32_t min, uint32_t max);
// The strings both accept.
CharNfa intersect(const CharNfa& a, const CharNfa& b);
// Paths from -> to reading each string of `c` in its canonical JSON encoding (the quotes excluded).
void emit_chars(const CharNfa& c, Nfa& nfa, uint32_t from, uint32_t to);

}  // namespace minfer::grammar
