// The token vocabulary in the forms the mask computation walks: a byte trie of every token (pre-order,
// so a rejected prefix skips its whole subtree in one step), and for the "inside a plain string" fast
// path, which tokens are made only of plain string characters (by character count) and a trie per
// plain-prefix length of what follows that prefix in the other tokens. Built once per tokenizer and
// shared by every Matcher.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace minfer::grammar {

// A trie in pre-order: node 0 is the root; a node's children follow it, and `end` is the index after
// its subtree. tokens[tok_begin, tok_end) end at the node.
struct TokenTrie {
    struct Node {
        uint32_t end;
        uint32_t tok_begin, tok_end;
        uint8_t byte;
    };
    std::vector<Node> nodes;
    std::vector<int32_t> tokens;
};

class Vocab {
  public:
    // token_bytes[id]: the token's bytes as they appear in text; empty for control tokens without
    // text, which a grammar never allows. eog_ids end a generation: allowed when the value is complete.
    Vocab(std::vector<std::string> token_bytes, std::vector<int32_t> eog_ids);

    int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
    const std::string& token_bytes(int32_t id) const { return bytes_[id]; }
    bool is_eog(int32_t id) const { return id >= 0 && id < size() && eog_[id]; }
    const std::vector<int32_t>& eog_ids() const { return eog_ids_; }
    size_t mask_words() const { return (bytes_.size() + 63) / 64; }

    // Every token with text (eog tokens excluded).
    const TokenTrie& trie() const { return trie_; }
    // Tokens made of 1..n plain characters, n clamped to max_plain_chars(); a bitset of mask_words().
    const std::vector<uint64_t>& plain_up_to(uint32_t n) const;
    uint32_t max_plain_chars() const { return static_cast<uint32_t>(plain_up_to_.size() - 1); }
    // Tokens whose longest plain prefix has p characters and which go on with other bytes: a trie of
    // what follows the prefix. Empty when there are none.
    const std::vector<TokenTrie>& rest_after_plain() const { return rest_after_plain_; }

  private:
    std::vector<std::string> bytes_;
    std::vector<bool> eog_;
    std::vector<int32_t> eog_ids_;
    TokenTrie trie_;
    std::vector<std::vector<uint64_t>> plain_up_to_;
    std::vector<TokenTrie> rest_after_plain_;
};

// Length in bytes of the plain character that starts `s`, 0 when `s` does not start with one: printable
// ASCII but '"' and '\', or a complete, valid UTF-8 sequence.
size_t plain_char_length(const unsigned char* s, size_t n);

}  // namespace minfer::grammar
