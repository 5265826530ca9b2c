// Structured output in the scheduler: a sequence's grammar (a JSON schema compiled by src/grammar) masks
// its logits row before sampling, so only tokens that keep the text inside the grammar can be drawn.
// The constraint may wait for a marker in the generated text (`after`, e.g. "</think>": a thinking
// model reasons freely, then writes the value). The mask is a function of the text alone, so a
// sequence's tokens do not depend on its batch or on the thread that drew them.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/matcher.h"
#include "grammar/vocab.h"

namespace minfer {

namespace grammar {
class Grammar;
}

struct GrammarSpec {
    std::shared_ptr<const grammar::Grammar> grammar;  // none: unconstrained
    std::string after;                                // the constraint begins after this text ("": at once)
};

class Constraint {
  public:
    Constraint(const GrammarSpec& spec, std::shared_ptr<const grammar::Vocab> vocab);

    // Whether the next token is masked (the marker has been seen, the value is not finished).
    bool active() const { return started_; }
    // `logits` [n_vocab] with every token the grammar does not allow at -inf (a copy owned by this
    // object, valid until the next call); empty when the grammar allows no token at all.
    std::span<const float> mask(std::span<const float> logits);
    // Advances by a sampled token and its text bytes (empty for control tokens).
    void accept(int32_t id, std::string_view bytes);

  private:
    grammar::Matcher matcher_;
    std::string after_;
    std::string tail_;  // before the start: the generated text's last bytes, where the marker may be
    bool started_;
    std::vector<uint64_t> bits_;  // scratch: the allowed tokens
    std::vector<float> masked_;   // scratch: the masked row
};

}  // namespace minfer
