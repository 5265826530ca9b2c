// The text of a generation as it streams: tokens decoded without splitting a UTF-8 character
// (StreamDecoder; special tokens such as <|im_end|> add no text unless asked), cut before the first stop
// string, and released only once no stop string could still begin in it. generate() and the scheduler share
// it, so a stop string behaves the same in both.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace minfer {

class TextStream {
  public:
    // skip_special: control and unused tokens add no text (StreamDecoder).
    TextStream(const Tokenizer& tok, const std::vector<std::string>& stop, bool skip_special);
    // Appends a token's text; true when a stop string is now complete (the text ends before it).
    bool feed(int32_t id);
    // The text that became safe to show since the last call.
    std::string_view take();
    // The rest, at the end of generation (the decoder's held bytes unless a stop string cut the text).
    std::string_view finish();
    const std::string& text() const { return text_; }

  private:
    StreamDecoder decoder_;
    const std::vector<std::string>& stop_;
    std::string text_;
    size_t emitted_ = 0, hold_ = 0;
    bool stopped_ = false;
};

}  // namespace minfer
