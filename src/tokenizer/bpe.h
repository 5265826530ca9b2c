// Byte-level BPE (tokenizer.ggml.model = "gpt2"): added tokens are split off, the rest is NFC-normalised
// when the vocabulary asks for it, cut by the pre-tokenizer regex, mapped byte -> printable code point
// (GPT-2) and merged by rank (tokenizer.ggml.merges).
#pragma once
#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace minfer {

class BpeTokenizer final : public Tokenizer {
  public:
    explicit BpeTokenizer(const GgufFile& f);

    std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const override;
    std::string token_to_bytes(int32_t id) const override;
    int32_t n_vocab() const override { return vocab_.size(); }
    const std::string& token_text(int32_t id) const override { return vocab_.text(id); }
    int32_t bos_id() const override { return vocab_.bos(); }
    int32_t eos_id() const override { return vocab_.eos(); }
    bool is_eog(int32_t id) const override { return vocab_.is_eog(id); }
    bool is_special(int32_t id) const override { return vocab_.is_special(id); }

  private:
    // One entry of the open-addressing merge table (linear probing, at most half full).
    struct Merge {
        uint64_t pair = kNoPair;  // left id << 32 | right id
        int32_t rank = 0;
        int32_t result = 0;
    };
    static constexpr uint64_t kNoPair = ~uint64_t{0};
    void load_merges(const GgufFile& f);
    void add_merge(uint64_t pair, int32_t rank, int32_t result);
    void decode_token_texts();
    // Appends the ids of one pre-token (raw UTF-8 bytes) to `out`, through the cache.
    void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
    std::vector<int32_t> merge_piece(std::string_view piece) const;
    const Merge* find_merge(int32_t left, int32_t right) const;

    Vocab vocab_;
    PreTokenizer pre_;
    bool add_bos_ = false;
    std::array<int32_t, 256> byte_token_{};  // the token of each single byte
    std::vector<Merge> merges_;
    size_t merge_mask_ = 0;
    std::vector<std::string> token_bytes_;  // what each token decodes to

    static constexpr size_t kCacheLimit = 1 << 16;  // entries; the cache is emptied when full
    static constexpr size_t kCacheMaxPiece = 256;   // longer pieces are rare: not worth keeping
    mutable std::mutex cache_mutex_;
    mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace minfer
