#include "tokenizer/spm.h"

#include <cstdio>
#include <queue>

#include "gguf/gguf.h"
#include "tokenizer/unicode.h"
#include "util/error.h"

namespace minfer {

namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's visible space

bool get_bool_or(const GgufFile& f, std::string_view key, bool dflt) {
    return f.has(key) ? f.get_bool(key) : dflt;
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
    std::string out;
    out.reserve(s.size());
    size_t pos = 0;
    for (size_t hit = s.find(from); hit != std::string_view::npos; hit = s.find(from, pos)) {
        out.append(s.substr(pos, hit - pos));
        out.append(to);
        pos = hit + from.size();
    }
    out.append(s.substr(pos));
    return out;
}

int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

// The byte a "<0xNN>" token stands for, or -1 when the text has another form.
int parse_byte_token(std::string_view s) {
    if (s.size() != 6 || !s.starts_with("<0x") || s.back() != '>') return -1;
    const int hi = hex_digit(s[3]);
    const int lo = hex_digit(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

SpmTokenizer::SpmTokenizer(const GgufFile& f)
    : vocab_(f),
      add_bos_(get_bool_or(f, "tokenizer.ggml.add_bos_token", true)),
      add_space_prefix_(get_bool_or(f, "tokenizer.ggml.add_space_prefix", true)) {
    for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof(name), "<0x%02X>", b);
        byte_token_[b] = vocab_.find(name);
    }
    decode_token_texts();
}

void SpmTokenizer::decode_token_texts() {
    token_bytes_.resize(vocab_.size());
    for (int32_t id = 0; id < vocab_.size(); ++id) {
        const std::string& text = vocab_.text(id);
        switch (vocab_.type(id)) {
            case TokenType::Byte: {
                const int b = parse_byte_token(text);
                if (b < 0)
                    throw Error(vocab_.path() + ": byte token " + std::to_string(id) + " is '" + text +
                                "', not <0xNN>");
                token_bytes_[id] = std::string(1, static_cast<char>(b));
                break;
            }
            case TokenType::Normal:
            case TokenType::UserDefined:
            case TokenType::Undefined:
                token_bytes_[id] = replace_all(text, kSpace, " ");
                break;
            default:
                token_bytes_[id] = text;
        }
    }
}

std::vector<int32_t> SpmTokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
    std::vector<int32_t> out;
    if (add_bos && add_bos_ && vocab_.bos() >= 0) out.push_back(vocab_.bos());
    const std::string clean = unicode::sanitize_utf8(text);
    bool after_added = true;  // a text run at the start or after an added token gets the space prefix
    for (const Fragment& frag : vocab_.split_special(clean, parse_special)) {
        if (frag.token >= 0) {
            out.push_back(frag.token);
            after_added = true;
            continue;
        }
        std::string escaped(add_space_prefix_ && after_added ? kSpace : "");
        escaped += replace_all(frag.text, " ", kSpace);
        encode_run(escaped, out);
        after_added = false;
    }
    return out;
}

// Symbols start as single characters; the adjacent pair whose concatenation is the highest-scoring
// token (leftmost among equals) is merged until no adjacent pair forms a token.
void SpmTokenizer::encode_run(std::string_view text, std::vector<int32_t>& out) const {
    struct Symbol {
        uint32_t start, len;  // len = 0 once merged into the left neighbour
        int32_t prev, next;
    };
    struct Candidate {
        float score;
        int32_t left, right;
        uint32_t len;
        bool operator<(const Candidate& o) const {
            return score != o.score ? score < o.score : left > o.left;
        }
    };
    std::vector<Symbol> sym;
    for (size_t pos = 0; pos < text.size();) {
        const uint32_t len = unicode::decode_utf8(text, pos).len;
        const auto i = static_cast<int32_t>(sym.size());
        sym.push_back({static_cast<uint32_t>(pos), len, i - 1, pos + len < text.size() ? i + 1 : -1});
        pos += len;
    }
    std::priority_queue<Candidate> queue;
    const auto consider = [&](int32_t left, int32_t right) {
        if (left < 0 || right < 0) return;
        const uint32_t len = sym[left].len + sym[right].len;
        const int32_t id = vocab_.find(text.substr(sym[left].start, len));
        if (id >= 0) queue.push({vocab_.score(id), left, right, len});
    };
    for (size_t i = 0; i + 1 < sym.size(); ++i)
        consider(static_cast<int32_t>(i), static_cast<int32_t>(i + 1));
    while (!queue.empty()) {
        const Candidate c = queue.top();
        queue.pop();
        Symbol& left = sym[c.left];
        Symbol& right = sym[c.right];
        if (left.len == 0 || right.len == 0 || left.next != c.right || left.len + right.len != c.len)
            continue;
        left.len += right.len;
        right.len = 0;
        left.next = right.next;
        if (right.next >= 0) sym[right.next].prev = c.left;
        consider(left.prev, c.left);
        consider(c.left, left.next);
    }
    for (int32_t i = sym.empty() ? -1 : 0; i >= 0; i = sym[i].next) {
        const std::string_view piece = text.substr(sym[i].start, sym[i].len);
        const int32_t id = vocab_.find(piece);
        if (id >= 0) {
            out.push_back(id);
        } else {
            append_fallback(piece, out);
        }
    }
}

// Fallback for a character the vocabulary lacks: one <0xNN> token per byte, or else a single <unk>.
void SpmTokenizer::append_fallback(std::string_view chr, std::vector<int32_t>& out) const {
    bool have_bytes = true;
    for (const char b : chr) have_bytes = have_bytes && byte_token_[static_cast<uint8_t>(b)] >= 0;
    if (have_bytes) {
        for (const char b : chr) out.push_back(byte_token_[static_cast<uint8_t>(b)]);
        return;
    }
    if (vocab_.unk() < 0)
        throw Error(vocab_.path() +
                    ": a character is outside the vocabulary, which has no byte tokens or <unk>");
    out.push_back(vocab_.unk());
}

std::string SpmTokenizer::token_to_bytes(int32_t id) const {
    vocab_.text(id);  // range check
    return token_bytes_[id];
}

}  // namespace minfer
