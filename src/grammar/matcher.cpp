// Matcher: byte steps through the stack arena, and the token mask. The mask walks the vocabulary trie
// depth first with the parse state, skipping a subtree as soon as its prefix is refused. Inside a plain
// string (every stack's top reads all plain characters alike, or none) it instead takes the tokens made
// only of plain characters from a precomputed bitset (by how many characters the string still allows)
// and walks only the tries of what follows each token's plain prefix.
#include "grammar/matcher.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "grammar/stacks.h"
#include "grammar/vocab.h"

namespace minfer::grammar {

namespace {

using Set = StackArena::Set;

void set_bit(std::vector<uint64_t>& bits, int32_t id) {
    bits[id / 64] |= uint64_t{1} << (id % 64);
}

// The bytes some stack of `s` reads next.
std::array<uint64_t, 4> first_bytes(const StackArena& a, const Grammar& g, Set s) {
    std::array<uint64_t, 4> bits{};
    for (uint32_t i = s.begin; i < s.end; ++i)
        if (const uint32_t h = a.head(i); h != kNoNode)
            for (int w = 0; w < 4; ++w) bits[w] |= g.first_bytes(a.node(h).frame.id)[w];
    return bits;
}

// Sets the bit of every token of `trie` whose bytes `start` allows: depth first, skipping a subtree
// whose first byte no stack reads without stepping at all.
void walk(StackArena& a, const Grammar& g, const TokenTrie& trie, Set start, std::vector<uint64_t>& bits) {
    struct Level {
        uint32_t end;
        Set set;
        StackArena::Mark mark;
        std::array<uint64_t, 4> reads;
        uint32_t loop_state;  // the top state of a one-stack set when it only reads bytes, else kNoState
    };
    auto level = [&](uint32_t end, Set s, StackArena::Mark m) {
        const bool one = s.end - s.begin == 1 && a.head(s.begin) != kNoNode;
        const uint32_t top = one ? a.node(a.head(s.begin)).frame.id : kNoState;
        return Level{end, s, m, first_bytes(a, g, s),
                     top != kNoState && g.state(top).simple ? top : kNoState};
    };
    thread_local std::vector<Level> levels;
    levels.clear();
    levels.push_back(level(trie.nodes[0].end, start, a.mark()));
    for (uint32_t i = 1; i < trie.nodes[0].end;) {
        while (i >= levels.back().end) a.release(levels.back().mark), levels.pop_back();
        const TokenTrie::Node& n = trie.nodes[i];
        if (((levels.back().reads[n.byte / 64] >> (n.byte % 64)) & 1) == 0) {
            i = n.end;
            continue;
        }
        const Level& up = levels.back();
        const StackArena::Mark m = a.mark();
        if (up.loop_state != kNoState && g.step(up.loop_state, n.byte) == up.loop_state) {
            levels.push_back({n.end, up.set, m, up.reads, up.loop_state});  // the same state again
        } else {
            const Set next = a.advance(up.set, n.byte);
            if (next.empty()) {
                a.release(m);
                i = n.end;
                continue;
            }
            levels.push_back(level(n.end, next, m));
        }
        for (uint32_t k = n.tok_begin; k < n.tok_end; ++k) set_bit(bits, trie.tokens[k]);
        ++i;
    }
    a.release(levels.front().mark);
}

bool plain_uniform(const StackArena& a, const Grammar& g, Set s) {
    for (uint32_t i = s.begin; i < s.end; ++i) {
        const uint32_t h = a.head(i);
        if (h != kNoNode && g.state(a.node(h).frame.id).plain == PlainClass::kMixed) return false;
    }
    return true;
}

// The fast path; false (bits untouched) when the state is not made of plain-uniform stacks all the way.
bool fill_plain(StackArena& a, const Grammar& g, const Vocab& v, Set x, std::vector<uint64_t>& bits) {
    if (!plain_uniform(a, g, x)) return false;
    const std::vector<TokenTrie>& rests = v.rest_after_plain();
    const uint32_t need = std::max<uint32_t>(v.max_plain_chars(), static_cast<uint32_t>(rests.size()));
    // after[p]: the state after any p plain characters (the last entry repeats once it cycles).
    thread_local std::vector<Set> after;
    after.assign(1, x);
    uint32_t allowed = need;  // plain characters the state can take
    for (uint32_t p = 0; p < need; ++p) {
        const Set next = a.advance(after.back(), 'a');
        if (next.empty()) {
            allowed = p;
            break;
        }
        if (a.same(next, after.back())) break;
        if (!plain_uniform(a, g, next)) return false;
        after.push_back(next);
    }
    const std::vector<uint64_t>& plain = v.plain_up_to(allowed);
    std::memcpy(bits.data(), plain.data(), bits.size() * sizeof(uint64_t));
    for (uint32_t p = 0; p < rests.size() && p <= allowed; ++p)
        if (rests[p].nodes.size() > 1)
            walk(a, g, rests[p], after[std::min<size_t>(p, after.size() - 1)], bits);
    return true;
}

}  // namespace

Matcher::Matcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const Vocab> vocab)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)) {
    reset();
}

void Matcher::reset() {
    StackArena& a = StackArena::for_this_thread();
    a.reset(*grammar_);
    a.store(a.initial(), frames_, stack_ends_);
    ended_ = false;
}

void Matcher::fill_mask(std::vector<uint64_t>& bits) const {
    bits.assign(vocab_->mask_words(), 0);
    if (ended_) return;
    StackArena& a = StackArena::for_this_thread();
    a.reset(*grammar_);
    const Set x = a.load(frames_, stack_ends_);
    if (!fill_plain(a, *grammar_, *vocab_, x, bits)) walk(a, *grammar_, vocab_->trie(), x, bits);
    if (complete())
        for (int32_t id : vocab_->eog_ids()) set_bit(bits, id);
}

bool Matcher::accept_bytes(std::string_view bytes) {
    if (ended_) return false;
    StackArena& a = StackArena::for_this_thread();
    a.reset(*grammar_);
    Set x = a.load(frames_, stack_ends_);
    for (unsigned char b : bytes) {
        x = a.advance(x, b);
        if (x.empty()) return false;
    }
    a.store(x, frames_, stack_ends_);
    return true;
}

bool Matcher::accept(int32_t token) {
    if (ended_ || token < 0 || token >= vocab_->size()) return false;
    if (vocab_->is_eog(token)) {
        if (!complete()) return false;
        ended_ = true;
        return true;
    }
    const std::string& bytes = vocab_->token_bytes(token);
    return !bytes.empty() && accept_bytes(bytes);
}

bool Matcher::complete() const {
    if (ended_) return true;
    for (size_t i = 0; i < stack_ends_.size(); ++i)
        if (stack_ends_[i] == (i == 0 ? 0 : stack_ends_[i - 1])) return true;
    return false;
}

bool Matcher::done() const {
    return ended_ || (stack_ends_.size() == 1 && stack_ends_[0] == 0);
}

}  // namespace minfer::grammar
