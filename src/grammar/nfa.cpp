// Nfa construction helpers; see nfa.h.
#include "grammar/nfa.h"

namespace minfer::grammar {

Nfa::Nfa(size_t* budget) : budget_(budget) {
    node();
    node();
}

uint32_t Nfa::node() {
    if (*budget_ == 0) throw GrammarLimit("the grammar needs more automaton states than allowed");
    --*budget_;
    edges_.emplace_back();
    return static_cast<uint32_t>(edges_.size() - 1);
}

void Nfa::add(uint32_t from, NfaEdge e) {
    if (*budget_ == 0) throw GrammarLimit("the grammar needs more automaton edges than allowed");
    --*budget_;
    edges_[from].push_back(e);
}

void Nfa::bytes(uint32_t from, uint8_t lo, uint8_t hi, uint32_t to) {
    add(from, {NfaEdge::Kind::kBytes, lo, hi, 0, to});
}

void Nfa::eps(uint32_t from, uint32_t to) {
    add(from, {NfaEdge::Kind::kEps, 0, 0, 0, to});
}

void Nfa::call(uint32_t from, uint32_t rule, uint32_t to) {
    add(from, {NfaEdge::Kind::kCall, 0, 0, rule, to});
}

void Nfa::loop(uint32_t from, uint32_t loop, uint32_t to) {
    add(from, {NfaEdge::Kind::kLoop, 0, 0, loop, to});
}

void Nfa::literal(uint32_t from, std::string_view text, uint32_t to) {
    ByteSeq seq;
    for (unsigned char c : text) seq.emplace_back(c, c);
    byte_seq(from, seq, to);
}

void Nfa::byte_seq(uint32_t from, const ByteSeq& seq, uint32_t to) {
    if (seq.empty()) return eps(from, to);
    uint32_t at = from;
    for (size_t i = 0; i < seq.size(); ++i) {
        const uint32_t next = i + 1 == seq.size() ? to : node();
        bytes(at, seq[i].first, seq[i].second, next);
        at = next;
    }
}

}  // namespace minfer::grammar
