#include "tokenizer/template/jinja_lexer.h"

#include <cctype>
#include <charconv>
#include <cstring>

#include "tokenizer/template/jinja_value.h"
#include "util/error.h"

namespace minfer::jinja {

namespace {

[[noreturn]] void fail(int line, const std::string& msg) {
    throw Error("chat template line " + std::to_string(line) + ": " + msg);
}

bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Converts "\r\n" and lone "\r" to "\n" and drops one trailing newline (Jinja's keep_trailing_newline=False).
std::string normalize_newlines(const std::string& src) {
    std::string out;
    out.reserve(src.size());
    for (size_t i = 0; i < src.size(); ++i) {
        if (src[i] == '\r') {
            out += '\n';
            if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
        } else {
            out += src[i];
        }
    }
    if (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
}

class Lexer {
  public:
    explicit Lexer(const std::string& source) : src_(normalize_newlines(source)) {}
    std::vector<Token> run();

  private:
    enum class Trim { None, Newline, All };

    void add_text(std::string text, int line, char tag_kind, char sign);
    void lex_tag(char kind, int open_line);
    void lex_comment(int open_line);
    bool try_raw();
    void lex_expr_token();
    void lex_number();
    void lex_string();
    uint32_t read_escape(size_t& i, int line);
    void set_trim_after(char marker, bool is_block);
    void push(TokKind kind, std::string text = {}) {
        toks_.push_back(Token{kind, std::move(text), line_, 0, 0});
    }
    void advance_to(size_t pos) {
        for (size_t i = pos_; i < pos; ++i) line_ += src_[i] == '\n';
        pos_ = pos;
    }
    bool at(const char* s) const { return src_.compare(pos_, std::strlen(s), s) == 0; }

    std::string src_;
    size_t pos_ = 0;
    int line_ = 1;
    std::vector<Token> toks_;
    Trim trim_ = Trim::None;
    bool line_starting_ = true;
    int depth_ = 0;
};

std::vector<Token> Lexer::run() {
    while (pos_ < src_.size()) {
        size_t open = pos_;
        while ((open = src_.find('{', open)) != std::string::npos) {
            if (open + 1 < src_.size() && std::strchr("{%#", src_[open + 1])) break;
            ++open;
        }
        const int text_line = line_;
        const size_t text_end = open == std::string::npos ? src_.size() : open;
        std::string text = src_.substr(pos_, text_end - pos_);
        advance_to(text_end);
        if (open == std::string::npos) {
            add_text(std::move(text), text_line, 0, 0);
            break;
        }
        const char kind = src_[open + 1];
        const char next = open + 2 < src_.size() ? src_[open + 2] : 0;
        const char sign = (next == '-' || (next == '+' && kind != '{')) ? next : 0;
        add_text(std::move(text), text_line, kind, sign);
        const int open_line = line_;
        advance_to(open + 2 + (sign ? 1 : 0));
        if (kind == '#') {
            lex_comment(open_line);
        } else if (kind == '%' && try_raw()) {
            continue;
        } else {
            lex_tag(kind, open_line);
        }
    }
    push(TokKind::Eof);
    return std::move(toks_);
}

void Lexer::add_text(std::string text, int line, char tag_kind, char sign) {
    if (trim_ == Trim::All) {
        size_t n = 0;
        while (n < text.size() && is_space(text[n])) ++n;
        text.erase(0, n);
    } else if (trim_ == Trim::Newline && !text.empty() && text[0] == '\n') {
        text.erase(0, 1);
    }
    if (sign == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
    } else if (sign != '+' && (tag_kind == '%' || tag_kind == '#')) {
        const size_t nl = text.rfind('\n');
        const size_t start = nl == std::string::npos ? 0 : nl + 1;
        if ((nl != std::string::npos || line_starting_) &&
            text.find_first_not_of(" \t\f\v", start) == std::string::npos)
            text.erase(start);
    }
    if (!text.empty()) toks_.push_back(Token{TokKind::Text, std::move(text), line, 0, 0});
    trim_ = Trim::None;
    line_starting_ = false;
}

void Lexer::set_trim_after(char marker, bool is_block) {
    if (marker == '-') {
        trim_ = Trim::All;
    } else if (is_block && marker != '+') {
        trim_ = Trim::Newline;
        line_starting_ = pos_ < src_.size() && src_[pos_] == '\n';
    }
}

void Lexer::lex_comment(int open_line) {
    const size_t close = src_.find("#}", pos_);
    if (close == std::string::npos) fail(open_line, "unterminated comment '{#'");
    const char marker = close > pos_ ? src_[close - 1] : 0;
    advance_to(close + 2);
    set_trim_after(marker, true);
}

// Handles "{% raw %}...{% endraw %}": the content is emitted as text without interpretation.
bool Lexer::try_raw() {
    size_t p = pos_;
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    while (p < src_.size() && is_space(src_[p])) ++p;
    const char marker = p < src_.size() && (src_[p] == '-' || src_[p] == '+') ? src_[p++] : 0;
    if (src_.compare(p, 2, "%}") != 0) return false;
    const int open_line = line_;
    advance_to(p + 2);
    set_trim_after(marker, true);
    size_t end = pos_;
    while ((end = src_.find("{%", end)) != std::string::npos) {
        size_t q = end + 2;
        const char end_sign = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q++] : 0;
        while (q < src_.size() && is_space(src_[q])) ++q;
        if (src_.compare(q, 6, "endraw") == 0) {
            const int text_line = line_;
            std::string text = src_.substr(pos_, end - pos_);
            advance_to(q + 6);
            add_text(std::move(text), text_line, '%', end_sign);
            while (pos_ < src_.size() && is_space(src_[pos_])) advance_to(pos_ + 1);
            const char close_marker =
                pos_ < src_.size() && (src_[pos_] == '-' || src_[pos_] == '+') ? src_[pos_] : 0;
            if (src_.compare(pos_ + (close_marker ? 1 : 0), 2, "%}") != 0)
                fail(line_, "malformed '{% endraw %}'");
            advance_to(pos_ + (close_marker ? 3 : 2));
            set_trim_after(close_marker, true);
            return true;
        }
        end += 2;
    }
    fail(open_line, "'{% raw %}' without '{% endraw %}'");
}

void Lexer::lex_tag(char kind, int open_line) {
    const bool block = kind == '%';
    push(block ? TokKind::BlockBegin : TokKind::VarBegin);
    toks_.back().line = open_line;
    depth_ = 0;
    const char* close = block ? "%}" : "}}";
    for (;;) {
        while (pos_ < src_.size() && is_space(src_[pos_])) advance_to(pos_ + 1);
        if (pos_ >= src_.size()) fail(open_line, std::string("unterminated tag '{") + kind + "'");
        if (depth_ == 0) {
            const char marker = (src_[pos_] == '-' || (block && src_[pos_] == '+')) ? src_[pos_] : 0;
            if (src_.compare(pos_ + (marker ? 1 : 0), 2, close) == 0) {
                push(block ? TokKind::BlockEnd : TokKind::VarEnd);
                advance_to(pos_ + (marker ? 3 : 2));
                set_trim_after(marker, block);
                return;
            }
        }
        lex_expr_token();
    }
}

void Lexer::lex_expr_token() {
    const char c = src_[pos_];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t end = pos_;
        while (end < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[end])) || src_[end] == '_'))
            ++end;
        push(TokKind::Name, src_.substr(pos_, end - pos_));
        advance_to(end);
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number();
    } else if (c == '"' || c == '\'') {
        lex_string();
    } else {
        static const char* const two[] = {"**", "//", "==", "!=", "<=", ">="};
        for (const char* op : two) {
            if (at(op)) {
                push(TokKind::Op, op);
                advance_to(pos_ + 2);
                return;
            }
        }
        if (!std::strchr("+-*/%~<>=()[]{},.:|", c))
            fail(line_, std::string("unexpected character '") + c + "'");
        if (c == '(' || c == '[' || c == '{') ++depth_;
        if ((c == ')' || c == ']' || c == '}') && depth_ > 0) --depth_;
        push(TokKind::Op, std::string(1, c));
        advance_to(pos_ + 1);
    }
}

void Lexer::lex_number() {
    auto digits_end = [&](size_t p) {
        while (p < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[p])) ||
                                   (src_[p] == '_' && p + 1 < src_.size() &&
                                    std::isdigit(static_cast<unsigned char>(src_[p + 1])))))
            ++p;
        return p;
    };
    size_t end = digits_end(pos_);
    bool is_float = false;
    if (end + 1 < src_.size() && src_[end] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[end + 1]))) {
        end = digits_end(end + 1);
        is_float = true;
    }
    if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
        size_t p = end + 1;
        if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
        if (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) {
            end = digits_end(p);
            is_float = true;
        }
    }
    std::string text;
    for (size_t i = pos_; i < end; ++i)
        if (src_[i] != '_') text += src_[i];
    Token t{is_float ? TokKind::Float : TokKind::Int, text, line_, 0, 0};
    const char* b = text.data();
    const char* e = text.data() + text.size();
    const auto res = is_float ? std::from_chars(b, e, t.float_value) : std::from_chars(b, e, t.int_value);
    if (res.ec != std::errc() || res.ptr != e) fail(line_, "bad number literal '" + text + "'");
    toks_.push_back(std::move(t));
    advance_to(end);
}

uint32_t Lexer::read_escape(size_t& i, int line) {
    const char c = src_[i++];
    auto hex = [&](int n) {
        uint32_t v = 0;
        for (int k = 0; k < n; ++k, ++i) {
            if (i >= src_.size() || !std::isxdigit(static_cast<unsigned char>(src_[i])))
                fail(line, "truncated \\x, \\u or \\U escape in string literal");
            const char h = static_cast<char>(std::tolower(static_cast<unsigned char>(src_[i])));
            v = v * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : h - 'a' + 10);
        }
        return v;
    };
    switch (c) {
        case 'n':
            return '\n';
        case 't':
            return '\t';
        case 'r':
            return '\r';
        case 'a':
            return '\a';
        case 'b':
            return '\b';
        case 'f':
            return '\f';
        case 'v':
            return '\v';
        case 'x':
            return hex(2);
        case 'u':
            return hex(4);
        case 'U':
            return hex(8);
        case 'N':
            fail(line, "\\N{...} escapes are not supported");
        default:
            break;
    }
    if (c >= '0' && c <= '7') {
        uint32_t v = static_cast<uint32_t>(c - '0');
        for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k, ++i)
            v = v * 8 + static_cast<uint32_t>(src_[i] - '0');
        return v;
    }
    return c;
}

void Lexer::lex_string() {
    const char quote = src_[pos_];
    const int line = line_;
    std::string value;
    size_t i = pos_ + 1;
    for (;;) {
        if (i >= src_.size()) fail(line, "unterminated string literal");
        const char c = src_[i];
        if (c == quote) break;
        if (c != '\\') {
            value += c;
            ++i;
            continue;
        }
        if (++i >= src_.size()) fail(line, "unterminated string literal");
        const char next = src_[i];
        if (next == '\\' || next == '\'' || next == '"' || next == '\n') {
            if (next != '\n') value += next;
            ++i;
        } else if (std::strchr("ntrabfvxuUN01234567", next)) {
            append_utf8(value, read_escape(i, line));
        } else {
            value += '\\';
        }
    }
    push(TokKind::String, std::move(value));
    toks_.back().line = line;
    advance_to(i + 1);
}

}  // namespace

std::vector<Token> tokenize(const std::string& source) {
    return Lexer(source).run();
}

}  // namespace minfer::jinja
