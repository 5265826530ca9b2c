// The token table shared by both tokenizer kinds: strings, types and scores from the GGUF, string -> id
// lookup, the special ids (BOS, EOS, end-of-generation set) and the splitting of text around added tokens.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace minfer {

class GgufFile;

// tokenizer.ggml.token_type values, as llama.cpp writes them.
enum class TokenType : int32_t {
    Undefined = 0,
    Normal = 1,
    Unknown = 2,
    Control = 3,
    UserDefined = 4,
    Unused = 5,
    Byte = 6,
};

// A piece of input text: either plain text to tokenize or an added token found in it (token >= 0).
struct Fragment {
    std::string_view text;
    int32_t token = -1;
};

// Lets hash containers keyed by std::string be searched with a std::string_view.
struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

class Vocab {
  public:
    explicit Vocab(const GgufFile& f);

    int32_t size() const { return static_cast<int32_t>(tokens_.size()); }
    // Both throw Error for an id outside the vocabulary.
    const std::string& text(int32_t id) const;
    TokenType type(int32_t id) const;
    float score(int32_t id) const { return scores_.empty() ? 0.0f : scores_[id]; }
    int32_t find(std::string_view s) const;  // -1 when absent
    const std::string& path() const { return path_; }

    int32_t bos() const { return bos_; }
    int32_t eos() const { return eos_; }
    int32_t unk() const { return unk_; }
    bool is_eog(int32_t id) const { return id >= 0 && id < size() && eog_[id]; }
    bool is_special(int32_t id) const {  // control or unused
        return id >= 0 && id < size() &&
               (types_[id] == TokenType::Control || types_[id] == TokenType::Unused);
    }

    // Splits text around added tokens, longest match first. User-defined tokens are always recognised (as in
    // HF tokenizers and llama.cpp); control and unknown tokens only when `parse_special`.
    std::vector<Fragment> split_special(std::string_view text, bool parse_special) const;

  private:
    void build_index();
    void load_special_ids(const GgufFile& f);
    void index_added_tokens();
    int32_t match_added(std::string_view text, size_t pos, bool parse_special) const;

    std::string path_;
    std::vector<std::string> tokens_;
    std::vector<TokenType> types_;
    std::vector<float> scores_;
    // Open-addressing index from text to id: each slot holds (hash >> 32) << 32 | id, or kEmptySlot.
    static constexpr uint64_t kEmptySlot = ~uint64_t{0};
    std::vector<uint64_t> slots_;
    size_t slot_mask_ = 0;
    std::array<std::vector<int32_t>, 256> added_by_first_byte_;  // longest first
    std::vector<bool> eog_;
    int32_t bos_ = -1;
    int32_t eos_ = -1;
    int32_t unk_ = -1;
};

}  // namespace minfer
