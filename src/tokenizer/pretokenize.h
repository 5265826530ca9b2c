// Pre-tokenizers of byte-level BPE vocabularies: the regex named by tokenizer.ggml.pre, compiled once
// with PCRE2 (UTF + UCP, JIT), splits text into pieces that BPE then merges independently.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace minfer {

struct PreTokenizerImpl;

class PreTokenizer {
  public:
    // `name` is tokenizer.ggml.pre; `file` names the GGUF in errors. Throws Error for an unknown name.
    PreTokenizer(std::string_view name, const std::string& file);
    ~PreTokenizer();
    PreTokenizer(const PreTokenizer&) = delete;
    PreTokenizer& operator=(const PreTokenizer&) = delete;

    // Whether the vocabulary's HF tokenizer normalises text to NFC first (Qwen2).
    bool nfc() const { return nfc_; }
    // Whether a piece found whole in the vocabulary skips merging (HF's ignore_merges; Llama 3, tekken,
    // gpt-4o).
    bool ignore_merges() const { return ignore_merges_; }

    // Splits valid UTF-8 `text` into pieces covering it entirely: the regex matches and any gaps between.
    std::vector<std::string_view> split(std::string_view text) const;

  private:
    std::unique_ptr<PreTokenizerImpl> impl_;
    std::string file_;
    bool nfc_ = false;
    bool ignore_merges_ = false;
};

}  // namespace minfer
