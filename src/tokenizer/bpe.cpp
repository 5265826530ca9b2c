#include "tokenizer/bpe.h"

#include <cstdio>
#include <queue>

#include "gguf/gguf.h"
#include "tokenizer/unicode.h"
#include "util/error.h"

namespace minfer {

namespace {

uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

size_t pair_hash(uint64_t pair) {
    const uint64_t h = pair * 0x9E3779B97F4A7C15ull;  // Fibonacci hashing: the high bits are well mixed
    return static_cast<size_t>(h ^ (h >> 29));
}

// Added and padding tokens are stored as the text they stand for; the others in GPT-2's byte mapping.
bool stored_as_text(TokenType t) {
    return t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unused;
}

std::string byte_level_decode(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    size_t pos = 0;
    while (pos < s.size()) {
        const unicode::Utf8Char c = unicode::decode_utf8(s, pos);
        const int b = c.valid ? unicode::byte_from_cp(c.cp) : -1;
        if (b >= 0) {
            out += static_cast<char>(b);
        } else {
            out.append(s.substr(pos, c.len));
        }
        pos += c.len;
    }
    return out;
}

// Whether BOS goes first when the file has no tokenizer.ggml.add_bos_token: as llama.cpp decides by the
// pre-tokenizer, for Mistral's tekken only.
bool add_bos_by_default(const std::string& pre) {
    return pre == "tekken";
}

}  // namespace

BpeTokenizer::BpeTokenizer(const GgufFile& f)
    : vocab_(f),
      pre_(f.get_str_or("tokenizer.ggml.pre", "default"), f.path()),
      add_bos_(f.has("tokenizer.ggml.add_bos_token")
                   ? f.get_bool("tokenizer.ggml.add_bos_token")
                   : add_bos_by_default(f.get_str_or("tokenizer.ggml.pre", "default"))) {
    const auto& byte_utf8 = unicode::byte_to_utf8();
    for (int b = 0; b < 256; ++b) {
        byte_token_[b] = vocab_.find(byte_utf8[b]);
        if (byte_token_[b] < 0) {
            char hex[8];
            std::snprintf(hex, sizeof(hex), "0x%02X", b);
            throw Error(f.path() + ": byte-level vocabulary has no token for byte " + hex);
        }
    }
    load_merges(f);
    decode_token_texts();
}

void BpeTokenizer::load_merges(const GgufFile& f) {
    const std::vector<std::string> merges = f.get_str_array("tokenizer.ggml.merges");
    size_t capacity = 16;
    while (capacity < 2 * merges.size()) capacity *= 2;
    merges_.assign(capacity, Merge{});
    merge_mask_ = capacity - 1;
    std::string joined;
    for (size_t rank = 0; rank < merges.size(); ++rank) {
        const std::string_view m = merges[rank];
        const size_t space = m.find(' ', 1);
        if (space == std::string_view::npos)
            throw Error(f.path() + ": merge " + std::to_string(rank) + " ('" + merges[rank] +
                        "') is not two tokens separated by a space");
        const int32_t left = vocab_.find(m.substr(0, space));
        const int32_t right = vocab_.find(m.substr(space + 1));
        joined.assign(m.substr(0, space)).append(m.substr(space + 1));
        const int32_t result = vocab_.find(joined);
        // A merge naming tokens the vocabulary lacks can never apply (vocabularies cut from bigger ones).
        if (left < 0 || right < 0 || result < 0) continue;
        add_merge(pair_key(left, right), static_cast<int32_t>(rank), result);
    }
}

// Keeps the first (lowest) rank when a pair is listed twice.
void BpeTokenizer::add_merge(uint64_t pair, int32_t rank, int32_t result) {
    size_t i = pair_hash(pair) & merge_mask_;
    while (merges_[i].pair != kNoPair && merges_[i].pair != pair) i = (i + 1) & merge_mask_;
    if (merges_[i].pair == kNoPair) merges_[i] = {pair, rank, result};
}

void BpeTokenizer::decode_token_texts() {
    token_bytes_.resize(vocab_.size());
    for (int32_t id = 0; id < vocab_.size(); ++id) {
        const std::string& text = vocab_.text(id);
        token_bytes_[id] = stored_as_text(vocab_.type(id)) ? text : byte_level_decode(text);
    }
}

const BpeTokenizer::Merge* BpeTokenizer::find_merge(int32_t left, int32_t right) const {
    const uint64_t pair = pair_key(left, right);
    for (size_t i = pair_hash(pair) & merge_mask_;; i = (i + 1) & merge_mask_) {
        if (merges_[i].pair == pair) return &merges_[i];
        if (merges_[i].pair == kNoPair) return nullptr;
    }
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
    std::vector<int32_t> out;
    if (add_bos && add_bos_ && vocab_.bos() >= 0) out.push_back(vocab_.bos());
    const std::string clean = unicode::sanitize_utf8(text);
    for (const Fragment& frag : vocab_.split_special(clean, parse_special)) {
        if (frag.token >= 0) {
            out.push_back(frag.token);
            continue;
        }
        std::string normalized;
        std::string_view body = frag.text;
        if (pre_.nfc()) {
            normalized = unicode::nfc(frag.text);
            body = normalized;
        }
        for (const std::string_view piece : pre_.split(body)) encode_piece(piece, out);
    }
    return out;
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
    if (piece.size() == 1) {
        out.push_back(byte_token_[static_cast<uint8_t>(piece[0])]);
        return;
    }
    const bool cacheable = piece.size() <= kCacheMaxPiece;
    if (cacheable) {
        std::lock_guard<std::mutex> lock(cache_mutex_);
        const auto it = cache_.find(piece);
        if (it != cache_.end()) {
            out.insert(out.end(), it->second.begin(), it->second.end());
            return;
        }
    }
    std::vector<int32_t> ids = merge_piece(piece);
    out.insert(out.end(), ids.begin(), ids.end());
    if (!cacheable) return;
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() >= kCacheLimit) cache_.clear();
    cache_.emplace(std::string(piece), std::move(ids));
}

// Classic BPE: the bytes start as single-byte symbols in a linked list; the adjacent pair with the lowest
// merge rank (leftmost among equals) is merged until no pair has a merge. Queue entries whose symbols
// changed since they were queued are skipped when popped. With ignore_merges a piece that is a whole
// vocabulary entry is that token, merges or not.
std::vector<int32_t> BpeTokenizer::merge_piece(std::string_view piece) const {
    if (pre_.ignore_merges()) {
        std::string mapped;
        for (const char ch : piece) mapped += unicode::byte_to_utf8()[static_cast<uint8_t>(ch)];
        if (const int32_t id = vocab_.find(mapped); id >= 0) return {id};
    }
    struct Symbol {
        int32_t id;  // -1 once merged into its left neighbour
        int32_t prev;
        int32_t next;  // -1 at the end
    };
    struct Candidate {
        int32_t rank, left, right, left_id, right_id, result;
        bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
    };
    const auto n = static_cast<int32_t>(piece.size());
    if (n == 0) return {};
    std::vector<Symbol> sym(n);
    for (int32_t i = 0; i < n; ++i)
        sym[i] = {byte_token_[static_cast<uint8_t>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1};
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
    const auto consider = [&](int32_t left, int32_t right) {
        if (left < 0 || right < 0) return;
        if (const Merge* m = find_merge(sym[left].id, sym[right].id))
            queue.push({m->rank, left, right, sym[left].id, sym[right].id, m->result});
    };
    for (int32_t i = 0; i + 1 < n; ++i) consider(i, i + 1);
    while (!queue.empty()) {
        const Candidate c = queue.top();
        queue.pop();
        Symbol& left = sym[c.left];
        Symbol& right = sym[c.right];
        if (left.id != c.left_id || left.next != c.right || right.id != c.right_id) continue;
        left.id = c.result;
        left.next = right.next;
        if (right.next >= 0) sym[right.next].prev = c.left;
        right.id = -1;
        consider(left.prev, c.left);
        consider(c.left, left.next);
    }
    std::vector<int32_t> ids;
    for (int32_t i = 0; i >= 0; i = sym[i].next) ids.push_back(sym[i].id);
    return ids;
}

std::string BpeTokenizer::token_to_bytes(int32_t id) const {
    vocab_.text(id);  // range check
    return token_bytes_[id];
}

}  // namespace minfer
