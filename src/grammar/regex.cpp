// Pattern parser (recursive descent over code points into a small AST), Thompson construction into a
// CharNfa, the product construction and emission; see regex.h.
#include "grammar/regex.h"

#include <cctype>
#include <map>
#include <optional>
#include <string>

namespace minfer::grammar {

namespace {

struct Re {
    enum class Kind { kSet, kConcat, kAlt, kRepeat };
    Kind kind = Kind::kConcat;
    CodeSet set;
    std::vector<Re> kids;
    uint32_t min = 0, max = 0;
};

Re set_re(CodeSet s) {
    Re r;
    r.kind = Re::Kind::kSet;
    r.set = std::move(s);
    return r;
}

CodeSet digit_set() {
    return CodeSet::range('0', '9');
}
CodeSet word_set() {
    CodeSet s = CodeSet::range('a', 'z');
    s.add('A', 'Z');
    s.add('0', '9');
    s.add('_', '_');
    return s;
}
CodeSet space_set() {  // ECMA-262 WhiteSpace and LineTerminator
    CodeSet s = CodeSet::range('\t', '\r');
    for (uint32_t c : {0x20u, 0xA0u, 0x1680u, 0x2028u, 0x2029u, 0x202Fu, 0x205Fu, 0x3000u, 0xFEFFu})
        s.add(c, c);
    s.add(0x2000, 0x200A);
    return s;
}
CodeSet dot_set() {
    CodeSet s;
    for (uint32_t c : {0x0Au, 0x0Du, 0x2028u, 0x2029u}) s.add(c, c);
    return s.complement();
}

class Parser {
  public:
    explicit Parser(std::string_view pattern) {
        if (!decode_utf8(pattern, s_)) throw PatternError("the pattern is not valid UTF-8");
    }

    // Each top-level alternative, with .* added at each end that lacks its anchor.
    Re parse() {
        Re alt;
        alt.kind = Re::Kind::kAlt;
        do {
            const bool anchored_start = eat('^');
            Re body = concat(true);
            const bool anchored_end = eat('$');
            if (!at_end() && peek() != '|') fail("'^' and '$' are supported only at the ends of the pattern");
            Re seq;
            if (!anchored_start) seq.kids.push_back(any_text());
            seq.kids.push_back(std::move(body));
            if (!anchored_end) seq.kids.push_back(any_text());
            alt.kids.push_back(std::move(seq));
        } while (eat('|'));
        return alt;
    }

  private:
    [[noreturn]] void fail(const std::string& what) const {
        throw PatternError(what + " (at character " + std::to_string(pos_) + ")");
    }
    bool at_end() const { return pos_ >= s_.size(); }
    uint32_t peek() const { return s_[pos_]; }
    bool eat(uint32_t c) {
        if (at_end() || peek() != c) return false;
        ++pos_;
        return true;
    }
    uint32_t next() {
        if (at_end()) fail("the pattern ends inside a construct");
        return s_[pos_++];
    }
    static Re any_text() {
        Re r;
        r.kind = Re::Kind::kRepeat;
        r.max = kUnbounded;
        r.kids.push_back(set_re(CodeSet::scalars()));
        return r;
    }

    Re alternation() {
        Re alt;
        alt.kind = Re::Kind::kAlt;
        alt.kids.push_back(concat(false));
        while (eat('|')) alt.kids.push_back(concat(false));
        return alt;
    }

    // Stops before '|', ')', the end, and at top level before a '$' that ends an alternative.
    Re concat(bool top) {
        Re seq;
        while (!at_end() && peek() != '|' && peek() != ')') {
            if (top && peek() == '$') break;
            Re atom_re = atom();
            seq.kids.push_back(quantified(std::move(atom_re)));
        }
        if (!at_end() && peek() == ')' && top) fail("unbalanced ')'");
        return seq;
    }

    Re atom() {
        const uint32_t c = next();
        switch (c) {
            case '(':
                return group();
            case '[':
                return set_re(char_class());
            case '.':
                return set_re(dot_set());
            case '\\':
                return set_re(escape(false));
            case '^':
            case '$':
                fail("'^' and '$' are supported only at the ends of the pattern");
            case '*':
            case '+':
            case '?':
            case '{':
                fail("a quantifier with nothing to repeat");
            case ']':
            case '}':
                fail(c == ']' ? "an unescaped ']'" : "an unescaped '}'");
            default:
                return set_re(CodeSet::single(c));
        }
    }

    Re group() {
        if (eat('?')) {
            if (eat(':')) {
            } else if (eat('<') && !at_end() && peek() != '=' && peek() != '!') {
                while (next() != '>') {
                }
            } else {
                fail("lookaround assertions are not supported");
            }
        }
        Re inner = alternation();
        if (!eat(')')) fail("unbalanced '('");
        return inner;
    }

    uint32_t count() {
        if (at_end() || peek() < '0' || peek() > '9') fail("a malformed {m,n} quantifier");
        uint64_t v = 0;
        while (!at_end() && peek() >= '0' && peek() <= '9') {
            v = v * 10 + (next() - '0');
            if (v > CharNfa::kMaxNodes)
                fail("a repetition count above " + std::to_string(CharNfa::kMaxNodes));
        }
        return static_cast<uint32_t>(v);
    }

    Re quantified(Re atom_re) {
        if (at_end()) return atom_re;
        Re r;
        r.kind = Re::Kind::kRepeat;
        const uint32_t c = peek();
        if (c == '*' || c == '+' || c == '?') {
            ++pos_;
            r.min = c == '+' ? 1 : 0;
            r.max = c == '?' ? 1 : kUnbounded;
        } else if (c == '{') {
            ++pos_;
            r.min = r.max = count();
            if (eat(',')) r.max = !at_end() && peek() == '}' ? kUnbounded : count();
            if (!eat('}')) fail("a malformed {m,n} quantifier");
            if (r.max < r.min) fail("a {m,n} quantifier with n < m");
        } else {
            return atom_re;
        }
        eat('?');  // a lazy quantifier matches the same strings
        if (!at_end() && (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{'))
            fail("a quantifier with nothing to repeat");
        r.kids.push_back(std::move(atom_re));
        return r;
    }

    uint32_t hex(int digits) {
        uint32_t v = 0;
        for (int i = 0; i < digits; ++i) {
            const uint32_t c = next();
            const int d = c >= '0' && c <= '9'   ? c - '0'
                          : c >= 'a' && c <= 'f' ? c - 'a' + 10
                          : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                                 : -1;
            if (d < 0) fail("a malformed hexadecimal escape");
            v = v * 16 + d;
        }
        return v;
    }

    uint32_t braced_hex() {
        uint32_t v = 0;
        for (uint32_t c = next(); c != '}'; c = next()) {
            --pos_;
            v = v * 16 + hex(1);
            if (v > kMaxCodePoint) fail("a \\u{...} escape above U+10FFFF");
        }
        return v;
    }

    // \d \w \s, and \D \W \S for their complements; nullopt for any other character.
    static std::optional<CodeSet> class_escape(uint32_t c) {
        std::optional<CodeSet> s;
        if (c == 'd' || c == 'D') s = digit_set();
        if (c == 'w' || c == 'W') s = word_set();
        if (c == 's' || c == 'S') s = space_set();
        if (s && c < 'a') s = s->complement();
        return s;
    }

    static std::string unsupported_escape(uint32_t c) {
        if (c == 'b' || c == 'B') return "word boundaries (\\b, \\B) are not supported";
        if (c == 'p' || c == 'P') return "Unicode property escapes are not supported";
        if (c == 'k' || (c >= '1' && c <= '9')) return "backreferences are not supported";
        if (c == 'c') return "control escapes (\\c) are not supported";
        return "an unknown escape";
    }

    // After a backslash; in_class: inside [...], where \b is a backspace.
    CodeSet escape(bool in_class) {
        const uint32_t c = next();
        if (std::optional<CodeSet> s = class_escape(c)) return *s;
        constexpr std::string_view kControls = "n\nr\rt\tf\fv\v";  // letter, then the character it names
        const size_t control = c < 0x80 ? kControls.find(static_cast<char>(c)) : std::string_view::npos;
        if (control != std::string_view::npos && control % 2 == 0)
            return CodeSet::single(kControls[control + 1]);
        if (c == 'x') return CodeSet::single(hex(2));
        if (c == 'u') return CodeSet::single(eat('{') ? braced_hex() : hex(4));
        if (c == '0') {
            if (!at_end() && peek() >= '0' && peek() <= '9') fail("octal escapes are not supported");
            return CodeSet::single(0);
        }
        if (c == 'b' && in_class) return CodeSet::single('\b');
        if (c < 0x80 && std::isalnum(static_cast<int>(c)) != 0) fail(unsupported_escape(c));
        return CodeSet::single(c);  // an escaped punctuation character stands for itself
    }

    // One class member: a single character (returned in `single`) or a class escape like \d.
    CodeSet class_atom(bool& single) {
        const uint32_t c = next();
        single = true;
        if (c != '\\') return CodeSet::single(c);
        single = at_end() || !class_escape(peek());
        return escape(true);
    }

    CodeSet char_class() {
        const bool negate = eat('^');
        CodeSet set;
        while (!eat(']')) {
            bool single_lo = false, single_hi = false;
            CodeSet lo = class_atom(single_lo);
            if (single_lo && !at_end() && peek() == '-' && pos_ + 1 < s_.size() && s_[pos_ + 1] != ']') {
                ++pos_;
                CodeSet hi = class_atom(single_hi);
                if (!single_hi) fail("a class range ending in a class escape");
                const uint32_t a = lo.ranges()[0].first, b = hi.ranges()[0].first;
                if (b < a) fail("a class range out of order");
                set.add(a, b);
            } else {
                set.add(lo);
            }
        }
        return negate ? set.complement() : set.intersect(CodeSet::scalars());
    }

    std::vector<uint32_t> s_;
    size_t pos_ = 0;
};

void build(const Re& r, CharNfa& nfa, uint32_t from, uint32_t to);

void build_repeat(const Re& r, CharNfa& nfa, uint32_t from, uint32_t to) {
    uint32_t at = from;
    for (uint32_t i = 0; i < r.min; ++i) {
        const uint32_t next = nfa.node();
        build(r.kids[0], nfa, at, next);
        at = next;
    }
    if (r.max == kUnbounded) {
        const uint32_t x = nfa.node(), y = nfa.node();
        nfa.eps(at, x);
        build(r.kids[0], nfa, x, y);
        nfa.eps(y, x);
        nfa.eps(y, to);
        nfa.eps(at, to);
        return;
    }
    for (uint32_t i = r.min; i < r.max; ++i) {
        const uint32_t next = nfa.node();
        nfa.eps(at, to);
        build(r.kids[0], nfa, at, next);
        at = next;
    }
    nfa.eps(at, to);
}

// Thompson construction; sub-automata get fresh end nodes so that loops never join other paths.
void build(const Re& r, CharNfa& nfa, uint32_t from, uint32_t to) {
    switch (r.kind) {
        case Re::Kind::kSet:
            if (!r.set.empty()) nfa.edge(from, r.set, to);
            return;
        case Re::Kind::kAlt:
            for (const Re& k : r.kids) {
                const uint32_t a = nfa.node(), b = nfa.node();
                nfa.eps(from, a);
                build(k, nfa, a, b);
                nfa.eps(b, to);
            }
            return;
        case Re::Kind::kConcat: {
            uint32_t at = from;
            for (const Re& k : r.kids) {
                const uint32_t next = nfa.node();
                build(k, nfa, at, next);
                at = next;
            }
            nfa.eps(at, to);
            return;
        }
        case Re::Kind::kRepeat:
            return build_repeat(r, nfa, from, to);
    }
}

CharNfa from_re(const Re& r) {
    CharNfa nfa;
    const uint32_t end = nfa.node();
    build(r, nfa, 0, end);
    nfa.set_accepting(end);
    return nfa;
}

// Epsilon-free equivalent: each node gets the edges and acceptance of its epsilon closure.
CharNfa without_eps(const CharNfa& a) {
    CharNfa out;
    for (uint32_t n = 1; n < a.size(); ++n) out.node();
    std::vector<uint32_t> seen(a.size(), UINT32_MAX);  // the node whose closure saw it last
    for (uint32_t n = 0; n < a.size(); ++n) {
        std::vector<uint32_t> todo = {n};
        seen[n] = n;
        while (!todo.empty()) {
            const uint32_t m = todo.back();
            todo.pop_back();
            if (a.accepting(m)) out.set_accepting(n);
            for (const CharNfa::Edge& e : a.edges(m)) {
                if (!e.set.empty())
                    out.edge(n, e.set, e.target);
                else if (seen[e.target] != n)
                    seen[e.target] = n, todo.push_back(e.target);
            }
        }
    }
    return out;
}

}  // namespace

uint32_t CharNfa::node() {
    if (edges_.size() >= kMaxNodes)
        throw GrammarLimit("the string constraint needs more than " + std::to_string(kMaxNodes) + " states");
    edges_.emplace_back();
    accepting_.push_back(false);
    return static_cast<uint32_t>(edges_.size() - 1);
}

CharNfa compile_pattern(std::string_view pattern) {
    return from_re(Parser(pattern).parse());
}

CharNfa length_between(uint32_t min, uint32_t max) {
    CharNfa nfa;
    const uint32_t last = max == kUnbounded ? min : max;
    if (last >= CharNfa::kMaxNodes)
        throw GrammarLimit("the string constraint needs more than " + std::to_string(CharNfa::kMaxNodes) +
                           " states");
    for (uint32_t k = 0; k < last; ++k) nfa.edge(k, CodeSet::scalars(), nfa.node());
    if (max == kUnbounded) nfa.edge(last, CodeSet::scalars(), last);
    for (uint32_t k = min; k <= last; ++k) nfa.set_accepting(k);
    return nfa;
}

CharNfa intersect(const CharNfa& a_in, const CharNfa& b_in) {
    const CharNfa a = without_eps(a_in), b = without_eps(b_in);
    CharNfa out;
    std::map<std::pair<uint32_t, uint32_t>, uint32_t> ids = {{{0, 0}, 0}};
    std::vector<std::pair<uint32_t, uint32_t>> todo = {{0, 0}};
    while (!todo.empty()) {
        const auto [x, y] = todo.back();
        todo.pop_back();
        const uint32_t id = ids[{x, y}];
        if (a.accepting(x) && b.accepting(y)) out.set_accepting(id);
        for (const CharNfa::Edge& ea : a.edges(x))
            for (const CharNfa::Edge& eb : b.edges(y)) {
                CodeSet both = ea.set.intersect(eb.set);
                if (both.empty()) continue;
                auto [it, fresh] = ids.try_emplace({ea.target, eb.target}, 0);
                if (fresh) it->second = out.node(), todo.push_back(it->first);
                out.edge(id, std::move(both), it->second);
            }
    }
    return out;
}

void emit_chars(const CharNfa& c, Nfa& nfa, uint32_t from, uint32_t to) {
    std::vector<uint32_t> node_of(c.size(), UINT32_MAX);
    node_of[0] = from;
    auto map = [&](uint32_t n) {
        if (node_of[n] == UINT32_MAX) node_of[n] = nfa.node();
        return node_of[n];
    };
    for (uint32_t n = 0; n < c.size(); ++n) {
        if (c.accepting(n)) nfa.eps(map(n), to);
        for (const CharNfa::Edge& e : c.edges(n)) {
            if (e.set.empty())
                nfa.eps(map(n), map(e.target));
            else
                emit_canonical_chars(nfa, map(n), e.set, map(e.target));
        }
    }
}

// ---- formats ----------------------------------------------------------------------------------------

namespace {

// Regular subsets of what ajv-formats accepts in its full mode: RFC 3339 dates with the days of each
// month (29 February in leap years only), times with seconds (at most nanoseconds) and an explicit
// offset, lowercase or uppercase hex UUIDs, and dot-atom e-mail addresses of bounded parts (up to four
// atoms of 32 characters, four domain labels of 32, a letters-only top-level domain of 2 to 16), so a
// model cannot run on inside one.
constexpr std::string_view kDate =
    "(\\d{4}-(0[13578]|1[02])-(0[1-9]|[12]\\d|3[01])|\\d{4}-(0[469]|11)-(0[1-9]|[12]\\d|30)"
    "|\\d{4}-02-(0[1-9]|1\\d|2[0-8])"
    "|(\\d\\d(0[48]|[2468][048]|[13579][26])|([02468][048]|[13579][26])00)-02-29)";
constexpr std::string_view kTime =
    "([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(\\.\\d{1,9})?(Z|[+-]([01]\\d|2[0-3]):[0-5]\\d)";
constexpr std::string_view kUuid =
    "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
constexpr std::string_view kEmail =
    "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]{1,32}(\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]{1,32}){0,3}"
    "@([A-Za-z0-9]([A-Za-z0-9-]{0,30}[A-Za-z0-9])?\\.){1,4}[A-Za-z]{2,16}";

}  // namespace

bool compile_format(std::string_view format, CharNfa& out) {
    std::string re;
    if (format == "date")
        re = std::string(kDate);
    else if (format == "time")
        re = std::string(kTime);
    else if (format == "date-time")
        re = "(" + std::string(kDate) + ")T" + std::string(kTime);
    else if (format == "uuid")
        re = std::string(kUuid);
    else if (format == "email")
        re = std::string(kEmail);
    else
        return false;
    out = compile_pattern("^(" + re + ")$");
    return true;
}

}  // namespace minfer::grammar
