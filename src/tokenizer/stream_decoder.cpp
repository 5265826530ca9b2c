#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace minfer {

std::string StreamDecoder::feed(int32_t id) {
    if (!skip_special_ || !tok_.is_special(id)) pending_ += tok_.token_to_bytes(id);
    const size_t keep = unicode::incomplete_utf8_tail(pending_);
    std::string ready = unicode::sanitize_utf8(std::string_view(pending_).substr(0, pending_.size() - keep));
    pending_.erase(0, pending_.size() - keep);
    return ready;
}

std::string StreamDecoder::flush() {
    std::string rest = unicode::sanitize_utf8(pending_);
    pending_.clear();
    return rest;
}

}  // namespace minfer
