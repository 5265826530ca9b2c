// Nondeterministic automata the schema compiler writes, one per grammar rule. Edges read a byte range,
// read nothing (epsilon), call another rule (which must then match in full) or run a counted loop of a
// rule (body matched between min and max times), so one Nfa describes a rule of a context-free grammar
// whose right-hand side is a regular expression over bytes and rule calls. GrammarBuilder determinizes
// each Nfa into the Grammar the Matcher runs.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string_view>
#include <utility>
#include <vector>

namespace minfer::grammar {

constexpr uint32_t kUnbounded = UINT32_MAX;  // a loop's max when it has none

// A grammar outgrew one of its caps (states, rules, repetition expansion). The schema compiler turns
// it into a SchemaError naming the keyword it was compiling.
struct GrammarLimit : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct NfaEdge {
    enum class Kind : uint8_t { kBytes, kEps, kCall, kLoop };
    Kind kind = Kind::kEps;
    uint8_t lo = 0, hi = 0;  // kBytes: the inclusive byte range
    uint32_t arg = 0;        // kCall: the callee rule; kLoop: the loop's index in GrammarBuilder
    uint32_t target = 0;
};

using ByteSeq = std::vector<std::pair<uint8_t, uint8_t>>;  // one byte range per position

// Node 0 is the start, node 1 the accepting end. Every node counts against a budget shared by all the
// rules of one grammar, so a hostile schema cannot allocate without bound.
class Nfa {
  public:
    explicit Nfa(size_t* budget);
    static constexpr uint32_t kStart = 0;
    static constexpr uint32_t kAccept = 1;

    uint32_t node();
    void bytes(uint32_t from, uint8_t lo, uint8_t hi, uint32_t to);
    void eps(uint32_t from, uint32_t to);
    void call(uint32_t from, uint32_t rule, uint32_t to);
    void loop(uint32_t from, uint32_t loop, uint32_t to);
    void literal(uint32_t from, std::string_view text, uint32_t to);
    void byte_seq(uint32_t from, const ByteSeq& seq, uint32_t to);

    size_t size() const { return edges_.size(); }
    const std::vector<NfaEdge>& edges(uint32_t n) const { return edges_[n]; }

  private:
    void add(uint32_t from, NfaEdge e);
    std::vector<std::vector<NfaEdge>> edges_;
    size_t* budget_;
};

}  // namespace minfer::grammar
