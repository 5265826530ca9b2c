// SentencePiece BPE (tokenizer.ggml.model = "llama"): spaces become U+2581 (with one prepended to each
// text run at the start or after an added token, as llama.cpp does), characters are merged greedily by the
// score of the token they form, and characters outside the vocabulary fall back to <0xNN> byte tokens.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace minfer {

class SpmTokenizer final : public Tokenizer {
  public:
    explicit SpmTokenizer(const GgufFile& f);

    std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const override;
    std::string token_to_bytes(int32_t id) const override;
    int32_t n_vocab() const override { return vocab_.size(); }
    const std::string& token_text(int32_t id) const override { return vocab_.text(id); }
    int32_t bos_id() const override { return vocab_.bos(); }
    int32_t eos_id() const override { return vocab_.eos(); }
    bool is_eog(int32_t id) const override { return vocab_.is_eog(id); }
    bool is_special(int32_t id) const override { return vocab_.is_special(id); }

  private:
    void decode_token_texts();
    // Tokenizes one run of escaped text (spaces already U+2581) and appends the ids to `out`.
    void encode_run(std::string_view text, std::vector<int32_t>& out) const;
    void append_fallback(std::string_view chr, std::vector<int32_t>& out) const;

    Vocab vocab_;
    bool add_bos_ = true;
    bool add_space_prefix_ = true;
    std::array<int32_t, 256> byte_token_{};  // <0xNN> tokens, -1 where absent
    std::vector<std::string> token_bytes_;
};

}  // namespace minfer
