#include "tokenizer/vocab.h"

#include <algorithm>
#include <limits>

#include "gguf/gguf.h"
#include "util/error.h"

namespace minfer {

namespace {

// Texts of end-of-generation tokens used by the chat models we load, besides the eos/eot/eom ids.
constexpr std::string_view kEogTexts[] = {"<|im_end|>",    "<|endoftext|>",   "<|eot_id|>",
                                          "<|eom_id|>",    "<|end_of_text|>", "<|end|>",
                                          "<end_of_turn>", "<|return|>",      "<|call|>"};

bool is_added(TokenType t) {
    return t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unknown;
}

}  // namespace

Vocab::Vocab(const GgufFile& f) : path_(f.path()) {
    tokens_ = f.get_str_array("tokenizer.ggml.tokens");
    if (tokens_.empty()) throw Error(path_ + ": tokenizer.ggml.tokens is empty");
    if (tokens_.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
        throw Error(path_ + ": tokenizer.ggml.tokens has too many entries");
    types_.assign(tokens_.size(), TokenType::Normal);
    if (f.has("tokenizer.ggml.token_type")) {
        const std::vector<int64_t> types = f.get_int_array("tokenizer.ggml.token_type");
        if (types.size() != tokens_.size())
            throw Error(path_ + ": tokenizer.ggml.token_type has " + std::to_string(types.size()) +
                        " entries for " + std::to_string(tokens_.size()) + " tokens");
        for (size_t i = 0; i < types.size(); ++i) {
            if (types[i] < 0 || types[i] > static_cast<int64_t>(TokenType::Byte))
                throw Error(path_ + ": token " + std::to_string(i) + " has unknown type " +
                            std::to_string(types[i]));
            types_[i] = static_cast<TokenType>(types[i]);
        }
    }
    if (f.has("tokenizer.ggml.scores")) {
        scores_ = f.get_float_array("tokenizer.ggml.scores");
        if (scores_.size() != tokens_.size())
            throw Error(path_ + ": tokenizer.ggml.scores has " + std::to_string(scores_.size()) +
                        " entries for " + std::to_string(tokens_.size()) + " tokens");
    }
    build_index();
    load_special_ids(f);
    index_added_tokens();
}

const std::string& Vocab::text(int32_t id) const {
    if (id < 0 || id >= size())
        throw Error(path_ + ": token id " + std::to_string(id) + " is outside the vocabulary of " +
                    std::to_string(size()));
    return tokens_[id];
}

TokenType Vocab::type(int32_t id) const {
    text(id);  // range check
    return types_[id];
}

// Linear probing over a power-of-two table at most half full; a duplicate text keeps its first id.
void Vocab::build_index() {
    size_t capacity = 16;
    while (capacity < 2 * tokens_.size()) capacity *= 2;
    slots_.assign(capacity, kEmptySlot);
    slot_mask_ = capacity - 1;
    for (size_t id = 0; id < tokens_.size(); ++id) {
        const uint64_t h = StringHash{}(tokens_[id]);
        size_t i = h & slot_mask_;
        while (slots_[i] != kEmptySlot && tokens_[slots_[i] & 0xFFFFFFFF] != tokens_[id])
            i = (i + 1) & slot_mask_;
        if (slots_[i] == kEmptySlot) slots_[i] = (h >> 32) << 32 | id;
    }
}

int32_t Vocab::find(std::string_view s) const {
    const uint64_t h = StringHash{}(s);
    for (size_t i = h & slot_mask_;; i = (i + 1) & slot_mask_) {
        const uint64_t slot = slots_[i];
        if (slot == kEmptySlot) return -1;
        const auto id = static_cast<int32_t>(slot & 0xFFFFFFFF);
        if (slot >> 32 == h >> 32 && tokens_[id] == s) return id;
    }
}

void Vocab::load_special_ids(const GgufFile& f) {
    const auto optional_id = [&](std::string_view key) -> int32_t {
        const int64_t v = f.get_int_or(key, -1);
        return v >= 0 && v < size() ? static_cast<int32_t>(v) : -1;
    };
    bos_ = optional_id("tokenizer.ggml.bos_token_id");
    eos_ = optional_id("tokenizer.ggml.eos_token_id");
    unk_ = optional_id("tokenizer.ggml.unknown_token_id");
    eog_.assign(tokens_.size(), false);
    for (const int32_t id :
         {eos_, optional_id("tokenizer.ggml.eot_token_id"), optional_id("tokenizer.ggml.eom_token_id")}) {
        if (id >= 0) eog_[id] = true;
    }
    const auto control = [&](std::string_view t) {
        const int32_t id = find(t);
        return id >= 0 && (types_[id] == TokenType::Control || types_[id] == TokenType::UserDefined) ? id
                                                                                                     : -1;
    };
    for (const std::string_view t : kEogTexts)
        if (const int32_t id = control(t); id >= 0) eog_[id] = true;
    // gpt-oss's harmony format: <|end|> closes a message (the reasoning's, before the final answer's),
    // <|return|> the answer and <|call|> a tool call; only those two end generation.
    if (const int32_t end = control("<|end|>");
        end >= 0 && control("<|return|>") >= 0 && control("<|call|>") >= 0)
        eog_[end] = false;
}

void Vocab::index_added_tokens() {
    for (size_t i = 0; i < tokens_.size(); ++i) {
        if (!is_added(types_[i]) || tokens_[i].empty()) continue;
        added_by_first_byte_[static_cast<uint8_t>(tokens_[i][0])].push_back(static_cast<int32_t>(i));
    }
    for (auto& bucket : added_by_first_byte_) {
        std::stable_sort(bucket.begin(), bucket.end(),
                         [&](int32_t a, int32_t b) { return tokens_[a].size() > tokens_[b].size(); });
    }
}

int32_t Vocab::match_added(std::string_view text, size_t pos, bool parse_special) const {
    const std::string_view rest = text.substr(pos);
    for (const int32_t id : added_by_first_byte_[static_cast<uint8_t>(text[pos])]) {
        if (!parse_special && types_[id] != TokenType::UserDefined) continue;
        if (rest.starts_with(tokens_[id])) return id;
    }
    return -1;
}

std::vector<Fragment> Vocab::split_special(std::string_view text, bool parse_special) const {
    std::vector<Fragment> out;
    size_t start = 0;
    size_t pos = 0;
    while (pos < text.size()) {
        const int32_t id = match_added(text, pos, parse_special);
        if (id < 0) {
            ++pos;
            continue;
        }
        if (pos > start) out.push_back({text.substr(start, pos - start), -1});
        out.push_back({text.substr(pos, tokens_[id].size()), id});
        pos += tokens_[id].size();
        start = pos;
    }
    if (start < text.size()) out.push_back({text.substr(start), -1});
    return out;
}

}  // namespace minfer
