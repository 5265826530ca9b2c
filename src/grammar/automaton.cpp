// GrammarBuilder: per-rule subset construction, the left-recursion check, trimming to the states that
// can still complete a value, and the plain-character classes of every state. See automaton.h.
#include "grammar/automaton.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>

namespace minfer::grammar {

namespace {

using NodeSet = std::vector<uint32_t>;
using DState = GrammarBuilder::DState;

// Subset construction of one rule. Calls are symbols like bytes: the calls of one DFA state are grouped
// by callee, each loop edge stays its own symbol.
class Determinizer {
  public:
    // states_left: DFA states this grammar may still add; work: the builder's shared budget, which
    // every state also draws on.
    Determinizer(const Nfa& nfa, const std::vector<LoopSpec>& loops, size_t* states_left, size_t* work)
        : nfa_(nfa), loops_(loops), states_left_(states_left), work_(work), stamp_(nfa.size(), 0) {}

    std::vector<DState> run() {
        intern(closure({Nfa::kStart}));
        for (uint32_t id = 0; id < sets_.size(); ++id) expand(id);
        return std::move(out_);
    }

  private:
    NodeSet closure(const std::vector<uint32_t>& seeds) {
        ++gen_;
        NodeSet out;
        std::vector<uint32_t> todo;
        for (uint32_t n : seeds)
            if (stamp_[n] != gen_) stamp_[n] = gen_, todo.push_back(n);
        while (!todo.empty()) {
            const uint32_t n = todo.back();
            todo.pop_back();
            out.push_back(n);
            for (const NfaEdge& e : nfa_.edges(n))
                if (e.kind == NfaEdge::Kind::kEps && stamp_[e.target] != gen_) {
                    stamp_[e.target] = gen_;
                    todo.push_back(e.target);
                }
        }
        std::sort(out.begin(), out.end());
        return out;
    }

    uint32_t intern(NodeSet set) {
        auto [it, fresh] = ids_.try_emplace(std::move(set), static_cast<uint32_t>(sets_.size()));
        if (fresh) {
            if (*states_left_ == 0 || *work_ == 0)
                throw GrammarLimit("the grammar needs more automaton states than allowed");
            --*states_left_, --*work_;
            sets_.push_back(&it->first);
            out_.emplace_back();
        }
        return it->second;
    }

    void expand_bytes(const NodeSet& set, DState& d) {
        std::vector<const NfaEdge*> edges;
        std::vector<int> bounds;
        for (uint32_t n : set)
            for (const NfaEdge& e : nfa_.edges(n))
                if (e.kind == NfaEdge::Kind::kBytes) {
                    edges.push_back(&e);
                    bounds.push_back(e.lo);
                    bounds.push_back(e.hi + 1);
                }
        std::sort(bounds.begin(), bounds.end());
        bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
        for (size_t i = 0; i + 1 < bounds.size(); ++i) {
            const int lo = bounds[i], hi = bounds[i + 1] - 1;
            std::vector<uint32_t> seeds;
            for (const NfaEdge* e : edges)
                if (e->lo <= lo && e->hi >= hi) seeds.push_back(e->target);
            if (seeds.empty()) continue;
            const uint32_t t = intern(closure(seeds));
            if (!d.ranges.empty() && d.ranges.back().hi + 1 == lo && d.ranges.back().target == t)
                d.ranges.back().hi = static_cast<uint8_t>(hi);
            else
                d.ranges.push_back({static_cast<uint8_t>(lo), static_cast<uint8_t>(hi), t});
        }
    }

    void expand_calls(const NodeSet& set, DState& d) {
        std::map<uint32_t, std::vector<uint32_t>> calls, loops;
        for (uint32_t n : set)
            for (const NfaEdge& e : nfa_.edges(n)) {
                if (e.kind == NfaEdge::Kind::kCall) calls[e.arg].push_back(e.target);
                if (e.kind == NfaEdge::Kind::kLoop) loops[e.arg].push_back(e.target);
            }
        for (auto& [rule, seeds] : calls) d.calls.push_back({rule, intern(closure(seeds)), 0, 0, false});
        for (auto& [loop, seeds] : loops) {
            const LoopSpec& l = loops_[loop];
            d.calls.push_back({l.rule, intern(closure(seeds)), l.min, l.max, true});
        }
    }

    void expand(uint32_t id) {
        const NodeSet set = *sets_[id];
        DState d;
        d.accept = std::binary_search(set.begin(), set.end(), Nfa::kAccept);
        expand_bytes(set, d);
        expand_calls(set, d);
        out_[id] = std::move(d);
    }

    const Nfa& nfa_;
    const std::vector<LoopSpec>& loops_;
    size_t* states_left_;
    size_t* work_;
    std::map<NodeSet, uint32_t> ids_;
    std::vector<const NodeSet*> sets_;
    std::vector<DState> out_;
    std::vector<uint32_t> stamp_;
    uint32_t gen_ = 0;
};

// States that can still reach the end of the root rule; a loop can always stop after min iterations.
std::vector<bool> productive_states(const std::vector<DState>& st, const std::vector<uint32_t>& starts) {
    std::vector<bool> prod(st.size(), false);
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t s = 0; s < st.size(); ++s) {
            if (prod[s]) continue;
            bool p = st[s].accept;
            for (const ByteRange& r : st[s].ranges) p = p || prod[r.target];
            for (const CallEdge& c : st[s].calls)
                p = p || (prod[c.target] && ((c.loop && c.min == 0) || prod[starts[c.rule]]));
            if (p) prod[s] = changed = true;
        }
    }
    return prod;
}

// Drops the edges into states that cannot complete; a loop whose body cannot complete keeps only its exit.
void trim(std::vector<DState>& st, const std::vector<uint32_t>& starts, const std::vector<bool>& prod) {
    for (DState& d : st) {
        std::erase_if(d.ranges, [&](const ByteRange& r) { return !prod[r.target]; });
        std::erase_if(d.calls, [&](CallEdge& c) {
            if (!prod[c.target]) return true;
            if (prod[starts[c.rule]]) return false;
            if (!c.loop || c.min > 0) return true;
            c.max = 0;
            return false;
        });
    }
}

std::vector<bool> reachable_states(const std::vector<DState>& st, const std::vector<uint32_t>& starts,
                                   uint32_t root) {
    std::vector<bool> seen(st.size(), false);
    std::vector<uint32_t> todo = {starts[root]};
    seen[starts[root]] = true;
    auto visit = [&](uint32_t s) {
        if (!seen[s]) seen[s] = true, todo.push_back(s);
    };
    while (!todo.empty()) {
        const uint32_t s = todo.back();
        todo.pop_back();
        for (const ByteRange& r : st[s].ranges) visit(r.target);
        for (const CallEdge& c : st[s].calls) {
            visit(c.target);
            if (!c.loop || c.max > 0) visit(starts[c.rule]);
        }
    }
    return seen;
}

// ---- plain-character classes ------------------------------------------------------------------------

constexpr uint32_t kMixedMark = kNoState - 1;  // some bytes of a range go elsewhere than others

// The one state every byte of [lo, hi] leads to from s, kNoState if none is read, kMixedMark otherwise.
uint32_t uniform_target(const Grammar& g, uint32_t s, uint8_t lo, uint8_t hi) {
    uint32_t covered = 0, target = kNoState;
    for (const ByteRange& r : g.ranges(s)) {
        if (r.hi < lo || r.lo > hi) continue;
        if (target != kNoState && target != r.target) return kMixedMark;
        target = r.target;
        covered += std::min(r.hi, hi) - std::max(r.lo, lo) + 1;
    }
    if (target == kNoState) return kNoState;
    return covered == static_cast<uint32_t>(hi - lo + 1) ? target : kMixedMark;
}

// Reads `first` then `more` continuation bytes from the intermediate state x (which must be simple).
uint32_t read_tail(const Grammar& g, uint32_t x, uint8_t lo, uint8_t hi, int more) {
    for (;;) {
        if (!g.state(x).simple) return kMixedMark;
        const uint32_t y = uniform_target(g, x, lo, hi);
        if (y == kNoState || y == kMixedMark || more == 0) return y;
        x = y, lo = 0x80, hi = 0xBF, --more;
    }
}

struct LeadClass {
    uint8_t lead_lo, lead_hi, cont_lo, cont_hi;
    int more;  // continuation bytes after the first
};
constexpr LeadClass kLeads[] = {{0xC2, 0xDF, 0x80, 0xBF, 0}, {0xE0, 0xE0, 0xA0, 0xBF, 1},
                                {0xE1, 0xEC, 0x80, 0xBF, 1}, {0xED, 0xED, 0x80, 0x9F, 1},
                                {0xEE, 0xEF, 0x80, 0xBF, 1}, {0xF0, 0xF0, 0x90, 0xBF, 2},
                                {0xF1, 0xF3, 0x80, 0xBF, 2}, {0xF4, 0xF4, 0x80, 0x8F, 2}};
constexpr uint8_t kPlainAscii[][2] = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x7F}};

PlainClass classify(const Grammar& g, uint32_t s) {
    uint32_t seen = kNoState - 2;  // no outcome yet
    auto merge = [&](uint32_t outcome) {
        if (seen == kNoState - 2)
            seen = outcome;
        else if (seen != outcome)
            seen = kMixedMark;
    };
    for (const auto& a : kPlainAscii) merge(uniform_target(g, s, a[0], a[1]));
    for (const LeadClass& l : kLeads)
        for (int lead = l.lead_lo; lead <= l.lead_hi && seen != kMixedMark; ++lead) {
            const uint32_t x = g.step(s, static_cast<uint8_t>(lead));
            merge(x == kNoState ? kNoState : read_tail(g, x, l.cont_lo, l.cont_hi, l.more));
        }
    if (seen == kNoState) return PlainClass::kRejecting;
    return seen == kMixedMark ? PlainClass::kMixed : PlainClass::kUniform;
}

}  // namespace

uint32_t Grammar::step(uint32_t s, uint8_t byte) const {
    const State& st = states_[s];
    const ByteRange* lo = ranges_.data() + st.ranges_begin;
    const ByteRange* hi = ranges_.data() + st.ranges_end;
    if (hi - lo <= 8) {
        for (; lo != hi; ++lo)
            if (byte <= lo->hi) return byte >= lo->lo ? lo->target : kNoState;
        return kNoState;
    }
    const ByteRange* r =
        std::lower_bound(lo, hi, byte, [](const ByteRange& x, uint8_t b) { return x.hi < b; });
    return r != hi && byte >= r->lo ? r->target : kNoState;
}

uint32_t GrammarBuilder::add_rule() {
    if (rules_.size() >= kMaxRules) throw GrammarLimit("the grammar needs more rules than allowed");
    rules_.emplace_back(budget_);
    return static_cast<uint32_t>(rules_.size() - 1);
}

uint32_t GrammarBuilder::add_loop(uint32_t body_rule, uint32_t min, uint32_t max) {
    loops_.push_back({body_rule, min, max});
    return static_cast<uint32_t>(loops_.size() - 1);
}

void GrammarBuilder::determinize(uint32_t rule, std::vector<DState>& out) {
    size_t states_left = kMaxStates - std::min(kMaxStates, out.size());
    const uint32_t offset = static_cast<uint32_t>(out.size());
    std::vector<DState> dfa;
    try {
        dfa = Determinizer(rules_[rule], loops_, &states_left, budget_).run();
    } catch (const GrammarLimit& e) {
        throw RuleError(RuleError::Kind::kTooLarge, rule, e.what());
    }
    for (DState& d : dfa) {
        for (ByteRange& r : d.ranges) r.target += offset;
        for (CallEdge& c : d.calls) c.target += offset;
        out.push_back(std::move(d));
    }
}

// A rule reaches another without reading a byte through calls at its start and through loops that may
// run zero times; a cycle among those would make the matcher's closure endless.
void GrammarBuilder::check_left_recursion(const std::vector<DState>& st,
                                          const std::vector<uint32_t>& starts) const {
    std::vector<std::vector<uint32_t>> first_calls(starts.size());
    for (uint32_t r = 0; r < starts.size(); ++r) {
        std::vector<uint32_t> todo = {starts[r]};
        std::vector<uint32_t> seen = todo;
        while (!todo.empty()) {
            const uint32_t s = todo.back();
            todo.pop_back();
            for (const CallEdge& c : st[s].calls) {
                first_calls[r].push_back(c.rule);
                if (c.loop && c.min == 0 && std::find(seen.begin(), seen.end(), c.target) == seen.end())
                    seen.push_back(c.target), todo.push_back(c.target);
            }
        }
    }
    enum : uint8_t { kNew, kOpen, kDone };
    std::vector<uint8_t> color(starts.size(), kNew);
    for (uint32_t root = 0; root < starts.size(); ++root) {
        if (color[root] != kNew) continue;
        std::vector<std::pair<uint32_t, size_t>> path = {{root, 0}};
        color[root] = kOpen;
        while (!path.empty()) {
            auto& [r, next] = path.back();
            if (next == first_calls[r].size()) {
                color[r] = kDone;
                path.pop_back();
                continue;
            }
            const uint32_t callee = first_calls[r][next++];
            if (color[callee] == kOpen)
                throw RuleError(RuleError::Kind::kLeftRecursion, callee,
                                "the rule calls itself before reading text");
            if (color[callee] == kNew) color[callee] = kOpen, path.push_back({callee, 0});
        }
    }
}

std::shared_ptr<const Grammar> GrammarBuilder::finish(uint32_t root) {
    std::vector<DState> st;
    std::vector<uint32_t> starts;
    for (uint32_t r = 0; r < rules_.size(); ++r) {
        starts.push_back(static_cast<uint32_t>(st.size()));
        determinize(r, st);
        if (st[starts[r]].accept)
            throw std::logic_error("grammar rule " + std::to_string(r) + " matches the empty text");
    }
    check_left_recursion(st, starts);
    const std::vector<bool> prod = productive_states(st, starts);
    if (!prod[starts[root]]) return nullptr;
    trim(st, starts, prod);
    const std::vector<bool> keep = reachable_states(st, starts, root);

    std::vector<uint32_t> remap(st.size(), kNoState);
    auto g = std::make_shared<Grammar>();
    for (uint32_t s = 0; s < st.size(); ++s)
        if (keep[s]) remap[s] = static_cast<uint32_t>(g->states_.size()), g->states_.emplace_back();
    for (uint32_t s = 0; s < st.size(); ++s) {
        if (!keep[s]) continue;
        State& out = g->states_[remap[s]];
        out.accept = st[s].accept;
        out.ranges_begin = static_cast<uint32_t>(g->ranges_.size());
        for (ByteRange r : st[s].ranges) r.target = remap[r.target], g->ranges_.push_back(r);
        out.ranges_end = static_cast<uint32_t>(g->ranges_.size());
        out.calls_begin = static_cast<uint32_t>(g->calls_.size());
        for (CallEdge c : st[s].calls) c.target = remap[c.target], g->calls_.push_back(c);
        out.calls_end = static_cast<uint32_t>(g->calls_.size());
        out.simple = !out.accept && out.calls_begin == out.calls_end;
    }
    for (uint32_t s : starts) g->rule_starts_.push_back(remap[s]);
    g->root_ = root;
    for (uint32_t s = 0; s < g->states_.size(); ++s) {
        g->states_[s].plain = classify(*g, s);
        std::array<uint64_t, 4> bits{};
        for (const ByteRange& r : g->ranges(s))
            for (int b = r.lo; b <= r.hi; ++b) bits[b / 64] |= uint64_t{1} << (b % 64);
        g->first_bytes_.push_back(bits);
    }
    return g;
}

}  // namespace minfer::grammar
