// StackArena: closure (calls push the callee's start over a return frame, accepting states pop, loops
// either iterate or exit), byte steps and set comparison. See stacks.h.
#include "grammar/stacks.h"

#include <algorithm>

namespace minfer::grammar {

StackArena& StackArena::for_this_thread() {
    thread_local StackArena arena;
    return arena;
}

void StackArena::reset(const Grammar& g) {
    g_ = &g;
    nodes_.clear();
    heads_.clear();
}

uint32_t StackArena::push(Frame f, uint32_t parent) {
    uint64_t h = hash_of(parent) ^ (uint64_t{f.id} * 0x9E3779B97F4A7C15ull + f.count);
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    nodes_.push_back({f, parent, h ^ (h >> 32)});
    return static_cast<uint32_t>(nodes_.size() - 1);
}

// A return to a final state ends the rule at once, so no frame is kept for it: right recursion and
// loops at the end of rules keep the stack flat.
uint32_t StackArena::continue_at(uint32_t parent, uint32_t state) {
    return g_->is_final(state) ? parent : push({state, 0}, parent);
}

void StackArena::close_loop(const Node& n) {
    const CallEdge& c = g_->call(n.frame.id & ~kLoopFrame);
    const uint32_t done = n.frame.count;
    if (done < c.max) {
        // Without a max, counts past min behave alike: saturating keeps equal states equal.
        const uint32_t next = c.max == kUnbounded ? std::min(done + 1, c.min) : done + 1;
        close(push({g_->rule_start(c.rule), 0}, push({n.frame.id, next}, n.parent)));
    }
    if (done >= c.min) close(continue_at(n.parent, c.target));
}

// Appends to heads_ every stack reachable from `head` without reading a byte whose top reads bytes,
// and the empty stack when the whole value can end here.
void StackArena::close(uint32_t head) {
    if (++work_ > kMaxWork) return;
    if (head == kNoNode) return heads_.push_back(kNoNode);
    const Node n = nodes_[head];
    if (n.frame.id & kLoopFrame) return close_loop(n);
    const State& s = g_->state(n.frame.id);
    if (s.ranges_begin != s.ranges_end) heads_.push_back(head);
    if (s.accept) close(n.parent);
    for (const CallEdge& c : g_->calls(n.frame.id)) {
        if (c.loop)
            close(push({kLoopFrame | g_->call_index(c), 0}, n.parent));
        else
            close(push({g_->rule_start(c.rule), 0}, continue_at(n.parent, c.target)));
    }
}

bool StackArena::same_stack(uint32_t a, uint32_t b) const {
    for (; a != b; a = nodes_[a].parent, b = nodes_[b].parent) {
        if (a == kNoNode || b == kNoNode || nodes_[a].hash != nodes_[b].hash) return false;
        if (!(nodes_[a].frame == nodes_[b].frame)) return false;
    }
    return true;
}

// Sorts the new heads by hash and drops duplicates, so that equal sets compare equal; refuses the set
// (returns it empty) when a cap was hit.
StackArena::Set StackArena::finish_set(uint32_t begin) {
    if (work_ > kMaxWork || heads_.size() - begin > kMaxStacks) {
        heads_.resize(begin);
        return {begin, begin};
    }
    auto first = heads_.begin() + begin;
    if (heads_.end() - first > 1) {
        std::sort(first, heads_.end(), [&](uint32_t a, uint32_t b) { return hash_of(a) < hash_of(b); });
        heads_.erase(
            std::unique(first, heads_.end(), [&](uint32_t a, uint32_t b) { return same_stack(a, b); }),
            heads_.end());
    }
    return {begin, static_cast<uint32_t>(heads_.size())};
}

StackArena::Set StackArena::initial() {
    const auto begin = static_cast<uint32_t>(heads_.size());
    work_ = 0;
    close(push({g_->root_start(), 0}, kNoNode));
    return finish_set(begin);
}

StackArena::Set StackArena::load(const std::vector<Frame>& frames, const std::vector<uint32_t>& ends) {
    const auto begin = static_cast<uint32_t>(heads_.size());
    uint32_t at = 0;
    for (uint32_t end : ends) {
        uint32_t top = kNoNode;
        for (; at < end; ++at) top = push(frames[at], top);
        heads_.push_back(top);
    }
    return {begin, static_cast<uint32_t>(heads_.size())};
}

void StackArena::store(Set s, std::vector<Frame>& frames, std::vector<uint32_t>& ends) const {
    frames.clear();
    ends.clear();
    for (uint32_t i = s.begin; i < s.end; ++i) {
        const size_t bottom = frames.size();
        for (uint32_t n = heads_[i]; n != kNoNode; n = nodes_[n].parent) frames.push_back(nodes_[n].frame);
        std::reverse(frames.begin() + static_cast<std::ptrdiff_t>(bottom), frames.end());
        ends.push_back(static_cast<uint32_t>(frames.size()));
    }
}

StackArena::Set StackArena::advance(Set in, uint8_t byte) {
    const auto begin = static_cast<uint32_t>(heads_.size());
    work_ = 0;
    for (uint32_t i = in.begin; i < in.end; ++i) {
        const uint32_t h = heads_[i];
        if (h == kNoNode) continue;
        const Node n = nodes_[h];
        const uint32_t t = g_->step(n.frame.id, byte);
        if (t == kNoState) continue;
        if (t == n.frame.id && g_->state(t).simple)
            heads_.push_back(h);  // a loop on a plain state
        else
            close(push({t, 0}, n.parent));
    }
    return finish_set(begin);
}

bool StackArena::same(Set a, Set b) const {
    if (a.end - a.begin != b.end - b.begin) return false;
    for (uint32_t i = 0; i < a.end - a.begin; ++i)
        if (!same_stack(heads_[a.begin + i], heads_[b.begin + i])) return false;
    return true;
}

}  // namespace minfer::grammar
