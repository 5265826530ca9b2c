#include "runtime/text_stream.h"

#include <algorithm>

namespace minfer {

TextStream::TextStream(const Tokenizer& tok, const std::vector<std::string>& stop, bool skip_special)
    : decoder_(tok, skip_special), stop_(stop) {
    for (const std::string& s : stop_)
        if (!s.empty()) hold_ = std::max(hold_, s.size() - 1);  // what could still become a stop string
}

bool TextStream::feed(int32_t id) {
    text_ += decoder_.feed(id);
    size_t cut = std::string::npos;
    for (const std::string& s : stop_)
        if (!s.empty()) cut = std::min(cut, text_.find(s));
    if (cut == std::string::npos) return false;
    text_.resize(cut);
    stopped_ = true;
    return true;
}

std::string_view TextStream::take() {
    const size_t safe = stopped_ ? text_.size() : text_.size() > hold_ ? text_.size() - hold_ : 0;
    if (safe <= emitted_) return {};
    const std::string_view out = std::string_view(text_).substr(emitted_, safe - emitted_);
    emitted_ = safe;
    return out;
}

std::string_view TextStream::finish() {
    if (!stopped_) text_ += decoder_.flush();
    stopped_ = true;
    return take();
}

}  // namespace minfer
