// One constrained generation's position in a grammar. The state is the set of parse stacks the text so
// far allows (more than one where the grammar is ambiguous up to here, as in anyOf branches sharing a
// prefix); each stack is a list of frames, bottom first.
#pragma once
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace minfer::grammar {

class Grammar;
class Vocab;

// A grammar state, or kLoopFrame | the index of a loop's CallEdge with the iterations done so far.
struct Frame {
    uint32_t id;
    uint32_t count;
    bool operator==(const Frame&) const = default;
};
constexpr uint32_t kLoopFrame = 0x80000000u;

class Matcher {
  public:
    Matcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const Vocab> vocab);

    // Resizes `bits` to the vocabulary and sets bit id for each token that may be sampled now: tokens
    // whose bytes continue the text within the grammar, and the eog ids exactly when complete().
    void fill_mask(std::vector<uint64_t>& bits) const;
    // Advances by one sampled token; false, with the state unchanged, if the token is not allowed. An
    // eog token is allowed when complete() and ends the matcher: nothing is allowed after it.
    bool accept(int32_t token);
    // Advances by raw text (e.g. a forced prefix); false, with the state unchanged, if not allowed.
    bool accept_bytes(std::string_view bytes);
    bool complete() const;  // the text so far is a whole value: generation may end
    bool done() const;      // complete and nothing may follow (the mask holds only eog ids)
    void reset();           // back to the empty text

  private:
    std::shared_ptr<const Grammar> grammar_;
    std::shared_ptr<const Vocab> vocab_;
    std::vector<Frame> frames_;         // the stacks' frames, one stack after another
    std::vector<uint32_t> stack_ends_;  // stack i ends at frames_[stack_ends_[i]]
    bool ended_ = false;                // an eog token was accepted
};

}  // namespace minfer::grammar
