// The working form of a Matcher's state: stacks as linked frames in an arena (so the many states met
// while walking the token trie share their common frames and cost one node per step), advanced one byte
// at a time. Sets of stacks are index ranges of heads; the arena grows and is released like a stack,
// following the depth-first trie walk. One arena per thread, reused by every call.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "grammar/automaton.h"
#include "grammar/matcher.h"

namespace minfer::grammar {

constexpr uint32_t kNoNode = UINT32_MAX;  // no parent; as a head, the stack without frames (complete)

class StackArena {
  public:
    // Caps that keep a pathological grammar's steps bounded: a byte whose closure needs more is refused.
    static constexpr size_t kMaxStacks = 1024;
    static constexpr size_t kMaxWork = 1u << 16;

    struct Node {
        Frame frame;
        uint32_t parent;
        uint64_t hash;  // of the whole stack down from here
    };
    struct Set {
        uint32_t begin = 0, end = 0;
        bool empty() const { return begin == end; }
    };
    struct Mark {
        size_t nodes, heads;
    };

    static StackArena& for_this_thread();
    void reset(const Grammar& g);
    Set initial();
    Set load(const std::vector<Frame>& frames, const std::vector<uint32_t>& ends);
    void store(Set s, std::vector<Frame>& frames, std::vector<uint32_t>& ends) const;
    // The stacks after reading `byte` from those of `in`; empty when the byte is not allowed.
    Set advance(Set in, uint8_t byte);
    bool same(Set a, Set b) const;
    uint32_t head(uint32_t i) const { return heads_[i]; }
    const Node& node(uint32_t id) const { return nodes_[id]; }
    Mark mark() const { return {nodes_.size(), heads_.size()}; }
    void release(Mark m) { nodes_.resize(m.nodes), heads_.resize(m.heads); }

  private:
    uint32_t push(Frame f, uint32_t parent);
    uint32_t continue_at(uint32_t parent, uint32_t state);
    void close(uint32_t head);
    void close_loop(const Node& n);
    Set finish_set(uint32_t begin);
    bool same_stack(uint32_t a, uint32_t b) const;
    uint64_t hash_of(uint32_t id) const { return id == kNoNode ? 0x9E3779B97F4A7C15ull : nodes_[id].hash; }

    const Grammar* g_ = nullptr;
    std::vector<Node> nodes_;
    std::vector<uint32_t> heads_;
    size_t work_ = 0;
};

}  // namespace minfer::grammar
