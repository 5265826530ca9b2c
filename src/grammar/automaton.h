// The compiled grammar: every rule determinized into states of one table, where a state reads bytes
// (sorted disjoint ranges), calls rules, runs counted loops and may accept (end its rule). Immutable
// once built and shared by every Matcher of a schema. GrammarBuilder turns one Nfa per rule into it:
// subset construction per rule, a check that no rule reaches itself without reading a byte (a
// left-recursive $ref), removal of everything that cannot lead to a complete value, and per-state
// facts the mask fast path needs.
//
//   GrammarBuilder b;
//   uint32_t r = b.add_rule();
//   b.nfa(r).literal(Nfa::kStart, "null", Nfa::kAccept);
//   std::shared_ptr<const Grammar> g = b.finish(r);
#pragma once
#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "grammar/nfa.h"

namespace minfer::grammar {

constexpr uint32_t kNoState = UINT32_MAX;

struct ByteRange {
    uint8_t lo, hi;
    uint32_t target;
};

// A call of `rule` that returns to `target`; with `loop`, the rule is matched between min and max
// times (kUnbounded: no max) and then the state continues at `target`.
struct CallEdge {
    uint32_t rule = 0;
    uint32_t target = 0;
    uint32_t min = 0, max = 0;
    bool loop = false;
};

// How a state reads "plain" string characters (printable ASCII but '"' and '\', and every complete
// UTF-8 character): all of them alike, leading through call-free non-accepting states to one state
// (kUniform), none of them (kRejecting), or anything else (kMixed). Matcher::fill_mask answers a
// state made only of kUniform/kRejecting stacks from precomputed token bitsets.
enum class PlainClass : uint8_t { kMixed, kUniform, kRejecting };

struct State {
    uint32_t ranges_begin = 0, ranges_end = 0;
    uint32_t calls_begin = 0, calls_end = 0;
    bool accept = false;
    bool simple = false;  // reads bytes only: no calls, does not accept
    PlainClass plain = PlainClass::kMixed;
};

class Grammar {
  public:
    const State& state(uint32_t s) const { return states_[s]; }
    std::span<const ByteRange> ranges(uint32_t s) const {
        return {ranges_.data() + states_[s].ranges_begin, ranges_.data() + states_[s].ranges_end};
    }
    std::span<const CallEdge> calls(uint32_t s) const {
        return {calls_.data() + states_[s].calls_begin, calls_.data() + states_[s].calls_end};
    }
    const CallEdge& call(uint32_t index) const { return calls_[index]; }
    uint32_t call_index(const CallEdge& c) const { return static_cast<uint32_t>(&c - calls_.data()); }
    uint32_t rule_start(uint32_t rule) const { return rule_starts_[rule]; }
    uint32_t root_start() const { return rule_starts_[root_]; }
    // The state reading `byte` leads to, kNoState when it rejects the byte.
    uint32_t step(uint32_t s, uint8_t byte) const;
    // Accepts and reads nothing more: returning to it ends its rule at once.
    bool is_final(uint32_t s) const {
        const State& st = states_[s];
        return st.accept && st.ranges_begin == st.ranges_end && st.calls_begin == st.calls_end;
    }
    size_t n_states() const { return states_.size(); }
    // The bytes state s reads, one bit each: a quick refusal before stepping.
    const std::array<uint64_t, 4>& first_bytes(uint32_t s) const { return first_bytes_[s]; }

  private:
    friend class GrammarBuilder;
    std::vector<State> states_;
    std::vector<ByteRange> ranges_;
    std::vector<CallEdge> calls_;
    std::vector<uint32_t> rule_starts_;
    std::vector<std::array<uint64_t, 4>> first_bytes_;
    uint32_t root_ = 0;
};

// A counted loop of a rule, as Nfa loop edges refer to it by index.
struct LoopSpec {
    uint32_t rule, min, max;
};

// A rule that can call itself before reading a byte (e.g. {"$ref": "#"} at the root), or one whose
// automaton outgrew the caps; `rule` says which.
struct RuleError : std::runtime_error {
    enum class Kind { kLeftRecursion, kTooLarge };
    RuleError(Kind k, uint32_t r, const std::string& what) : std::runtime_error(what), kind(k), rule(r) {}
    Kind kind;
    uint32_t rule;
};

class GrammarBuilder {
  public:
    static constexpr size_t kMaxNfaSize = 1u << 20;  // nodes + edges over all rules
    static constexpr size_t kMaxStates = 1u << 18;   // DFA states over all rules
    static constexpr size_t kMaxRules = 1u << 14;

    // shared_budget: a budget of nodes + edges shared with other builders (those of the grammars the
    // compiler builds to check enum values), so that together they stay within kMaxNfaSize.
    explicit GrammarBuilder(size_t* shared_budget = nullptr)
        : budget_(shared_budget ? shared_budget : &own_budget_) {}
    GrammarBuilder(const GrammarBuilder&) = delete;
    GrammarBuilder& operator=(const GrammarBuilder&) = delete;
    uint32_t add_rule();
    Nfa& nfa(uint32_t rule) { return rules_[rule]; }  // stays valid while rules are added
    uint32_t add_loop(uint32_t body_rule, uint32_t min, uint32_t max);
    // Throws RuleError; nullptr when the root rule matches no text at all.
    std::shared_ptr<const Grammar> finish(uint32_t root);
    size_t* budget() { return budget_; }

    struct DState {
        bool accept = false;
        std::vector<ByteRange> ranges;
        std::vector<CallEdge> calls;
    };

  private:
    void determinize(uint32_t rule, std::vector<DState>& out);
    void check_left_recursion(const std::vector<DState>& states, const std::vector<uint32_t>& starts) const;

    size_t own_budget_ = kMaxNfaSize;
    size_t* budget_;
    std::deque<Nfa> rules_;
    std::vector<LoopSpec> loops_;
};

}  // namespace minfer::grammar
