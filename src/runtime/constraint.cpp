#include "runtime/constraint.h"

#include <limits>

namespace minfer {

Constraint::Constraint(const GrammarSpec& spec, std::shared_ptr<const grammar::Vocab> vocab)
    : matcher_(spec.grammar, std::move(vocab)), after_(spec.after), started_(spec.after.empty()) {}

std::span<const float> Constraint::mask(std::span<const float> logits) {
    matcher_.fill_mask(bits_);
    masked_.assign(logits.size(), -std::numeric_limits<float>::infinity());
    bool any = false;
    const size_t n = std::min(logits.size(), bits_.size() * 64);
    for (size_t w = 0; w * 64 < n; ++w)
        for (uint64_t b = bits_[w]; b != 0; b &= b - 1) {
            const size_t id = w * 64 + size_t(__builtin_ctzll(b));
            if (id >= n) break;
            masked_[id] = logits[id];
            any = true;
        }
    return any ? std::span<const float>(masked_) : std::span<const float>();
}

void Constraint::accept(int32_t id, std::string_view bytes) {
    if (started_) {
        matcher_.accept(id);
        return;
    }
    tail_ += bytes;
    const size_t at = tail_.find(after_);
    if (at == std::string::npos) {
        if (tail_.size() > after_.size()) tail_.erase(0, tail_.size() - after_.size());
        return;
    }
    started_ = true;
    matcher_.accept_bytes(std::string_view(tail_).substr(at + after_.size()));
    tail_.clear();
}

}  // namespace minfer
