// Trie construction and the plain-string tables; see vocab.h.
#include "grammar/vocab.h"

#include <algorithm>
#include <string_view>
#include <utility>

namespace minfer::grammar {

namespace {

using Keyed = std::vector<std::pair<std::string_view, int32_t>>;  // (bytes, token), sorted

// Pre-order trie of sorted keys: walks the previous key's path, closing the levels past the common
// prefix and opening one node per new byte.
TokenTrie build_trie(Keyed keys) {
    std::sort(keys.begin(), keys.end());
    TokenTrie t;
    t.nodes.push_back({0, 0, 0, 0});
    std::vector<uint32_t> path = {0};  // open nodes; path[d] holds the node for depth d
    std::string_view prev;
    for (const auto& [key, token] : keys) {
        size_t common = 0;
        while (common < prev.size() && common < key.size() && prev[common] == key[common]) ++common;
        while (path.size() > common + 1)
            t.nodes[path.back()].end = static_cast<uint32_t>(t.nodes.size()), path.pop_back();
        for (size_t d = common; d < key.size(); ++d) {
            const auto tok = static_cast<uint32_t>(t.tokens.size());
            t.nodes.push_back({0, tok, tok, static_cast<uint8_t>(key[d])});
            path.push_back(static_cast<uint32_t>(t.nodes.size() - 1));
        }
        TokenTrie::Node& last = t.nodes[path.back()];
        if (last.tok_end != t.tokens.size()) last.tok_begin = static_cast<uint32_t>(t.tokens.size());
        t.tokens.push_back(token);
        last.tok_end = static_cast<uint32_t>(t.tokens.size());
        prev = key;
    }
    while (!path.empty()) t.nodes[path.back()].end = static_cast<uint32_t>(t.nodes.size()), path.pop_back();
    return t;
}

}  // namespace

size_t plain_char_length(const unsigned char* s, size_t n) {
    if (n == 0) return 0;
    const unsigned char b = s[0];
    if (b < 0x80) return b >= 0x20 && b != '"' && b != '\\' ? 1 : 0;
    const size_t len = b >= 0xC2 && b <= 0xDF   ? 2
                       : b >= 0xE0 && b <= 0xEF ? 3
                       : b >= 0xF0 && b <= 0xF4 ? 4
                                                : 0;
    if (len == 0 || len > n) return 0;
    // The second byte's range excludes overlong forms, surrogates and code points above U+10FFFF.
    const unsigned char lo = b == 0xE0 ? 0xA0 : b == 0xF0 ? 0x90 : 0x80;
    const unsigned char hi = b == 0xED ? 0x9F : b == 0xF4 ? 0x8F : 0xBF;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; ++i)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return len;
}

Vocab::Vocab(std::vector<std::string> token_bytes, std::vector<int32_t> eog_ids)
    : bytes_(std::move(token_bytes)), eog_(bytes_.size(), false) {
    for (int32_t id : eog_ids)
        if (id >= 0 && id < size() && !eog_[id]) eog_[id] = true, eog_ids_.push_back(id);
    Keyed all;
    std::vector<Keyed> rest;
    std::vector<std::vector<int32_t>> plain_by_chars(1);
    for (int32_t id = 0; id < size(); ++id) {
        const std::string& b = bytes_[id];
        if (b.empty() || eog_[id]) continue;
        all.emplace_back(b, id);
        const auto* s = reinterpret_cast<const unsigned char*>(b.data());
        size_t at = 0, chars = 0;
        while (size_t len = plain_char_length(s + at, b.size() - at)) at += len, ++chars;
        if (at == b.size()) {
            if (plain_by_chars.size() <= chars) plain_by_chars.resize(chars + 1);
            plain_by_chars[chars].push_back(id);
        } else {
            if (rest.size() <= chars) rest.resize(chars + 1);
            rest[chars].emplace_back(std::string_view(b).substr(at), id);
        }
    }
    trie_ = build_trie(std::move(all));
    std::vector<uint64_t> bits(mask_words(), 0);
    for (const std::vector<int32_t>& ids : plain_by_chars) {
        for (int32_t id : ids) bits[id / 64] |= uint64_t{1} << (id % 64);
        plain_up_to_.push_back(bits);
    }
    for (Keyed& k : rest) rest_after_plain_.push_back(build_trie(std::move(k)));
}

const std::vector<uint64_t>& Vocab::plain_up_to(uint32_t n) const {
    return plain_up_to_[std::min<size_t>(n, plain_up_to_.size() - 1)];
}

}  // namespace minfer::grammar
