// Tokenizer of the chat-template interpreter. Splits a Jinja2 template into text and tag tokens and
// applies whitespace control the way HF transformers configures Jinja2 for chat templates:
// trim_blocks (drop the newline after a block or comment tag), lstrip_blocks (drop spaces and tabs
// before a block or comment tag that starts its line), "-" and "+" modifiers, newlines normalised to
// "\n" and one trailing newline of the template dropped.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace minfer::jinja {

enum class TokKind {
    Text,        // literal template text, already whitespace-trimmed
    VarBegin,    // {{
    VarEnd,      // }}
    BlockBegin,  // {%
    BlockEnd,    // %}
    Name,
    String,  // text holds the decoded value
    Int,
    Float,
    Op,  // text holds the operator: + - * / // % ** ~ == != < > <= >= = ( ) [ ] { } , . : |
    Eof,
};

struct Token {
    TokKind kind = TokKind::Eof;
    std::string text;
    int line = 1;
    int64_t int_value = 0;
    double float_value = 0;
};

// Throws minfer::Error naming the line for an unterminated tag, comment or string, or a bad character.
std::vector<Token> tokenize(const std::string& source);

}  // namespace minfer::jinja
