#include "tokenizer/template/jinja_parser.h"

#include <algorithm>
#include <initializer_list>
#include <string_view>

#include "tokenizer/template/jinja_lexer.h"
#include "tokenizer/template/jinja_limits.h"

namespace minfer::jinja {

namespace {

ExprPtr make_expr(ExprKind kind, int line, std::string name = {}) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    e->name = std::move(name);
    return e;
}

// How an error about nesting names the construct.
std::string construct_name(const Expr& e) {
    switch (e.kind) {
        case ExprKind::List:
            return e.tuple ? "tuple" : "list";
        case ExprKind::Dict:
            return "dict";
        case ExprKind::Attr:
            return "attribute '." + e.name + "'";
        case ExprKind::Item:
            return "subscript '[...]'";
        case ExprKind::Slice:
            return "slice";
        case ExprKind::Call:
            return "call";
        case ExprKind::Filter:
            return "filter '|" + e.name + "'";
        case ExprKind::Test:
            return "test 'is " + e.name + "'";
        case ExprKind::Unary:
        case ExprKind::Binary:
            return "operator '" + e.name + "'";
        case ExprKind::Compare:
            return "comparison";
        case ExprKind::And:
            return "'and'";
        case ExprKind::Or:
            return "'or'";
        case ExprKind::Not:
            return "'not'";
        case ExprKind::Cond:
            return "inline if";
        default:
            return "expression";
    }
}

// Adds `child` (null for an omitted part) to `parent`, keeping the tree within kMaxNesting levels so
// that evaluating and freeing it cannot overflow the stack (a chain such as x[0][0]... or
// x|upper|upper... is built by a loop, not by recursion).
void add_arg(Expr& parent, ExprPtr child) {
    if (child && child->depth >= parent.depth) {
        parent.depth = child->depth + 1;
        if (parent.depth > kMaxNesting)
            throw Error("chat template line " + std::to_string(parent.line) + ": " + construct_name(parent) +
                        " nested more than " + std::to_string(kMaxNesting) + " levels deep");
    }
    parent.args.push_back(std::move(child));
}

void add_kwarg(Expr& parent, std::string name, ExprPtr value) {
    add_arg(parent, std::move(value));
    parent.kwargs.emplace_back(std::move(name), std::move(parent.args.back()));
    parent.args.pop_back();
}

ExprPtr make_binary(ExprKind kind, std::string op, ExprPtr lhs, ExprPtr rhs) {
    auto e = make_expr(kind, lhs->line, std::move(op));
    add_arg(*e, std::move(lhs));
    add_arg(*e, std::move(rhs));
    return e;
}

NodePtr make_node(NodeKind kind, int line) {
    auto n = std::make_unique<Node>();
    n->kind = kind;
    n->line = line;
    return n;
}

class Parser {
  public:
    explicit Parser(std::vector<Token> toks) : toks_(std::move(toks)) {}
    Body parse_all();

  private:
    const Token& peek(size_t ahead = 0) const { return toks_[std::min(pos_ + ahead, toks_.size() - 1)]; }
    const Token& next() { return toks_[std::min(pos_++, toks_.size() - 1)]; }
    bool is_op(std::string_view op, size_t ahead = 0) const {
        return peek(ahead).kind == TokKind::Op && peek(ahead).text == op;
    }
    bool is_name(std::string_view name, size_t ahead = 0) const {
        return peek(ahead).kind == TokKind::Name && peek(ahead).text == name;
    }
    bool accept_op(std::string_view op);
    bool accept_name(std::string_view name);
    void expect_op(std::string_view op);
    std::string expect_identifier(std::string_view what);
    void expect_block_end();
    [[noreturn]] void fail(const Token& t, const std::string& msg) const;

    Body parse_body(std::initializer_list<std::string_view> stops, std::string& found,
                    std::string_view opener, int open_line);
    void parse_statement(Body& out);
    NodePtr parse_if(int line);
    NodePtr parse_for(int line);
    NodePtr parse_set(int line);
    NodePtr parse_macro(int line);
    void parse_generation(Body& out, int line);

    ExprPtr parse_expression();
    ExprPtr parse_or();
    ExprPtr parse_and();
    ExprPtr parse_not();
    ExprPtr parse_compare();
    ExprPtr parse_math1();
    ExprPtr parse_concat();
    ExprPtr parse_math2();
    ExprPtr parse_pow();
    ExprPtr parse_unary(bool with_filters);
    ExprPtr parse_primary();
    ExprPtr parse_sequence(ExprPtr first, int line, std::string_view close);
    ExprPtr parse_dict(int line);
    ExprPtr parse_postfix(ExprPtr e);
    ExprPtr parse_filters(ExprPtr e);
    ExprPtr parse_test(ExprPtr e);
    ExprPtr parse_subscript(ExprPtr e);
    void parse_call_args(Expr& call);

    // Counts one level of the parser's recursion in `counter` (blocks, or parentheses, brackets,
    // 'not' and unary signs within an expression) while in scope.
    class Nest {
      public:
        Nest(Parser& p, int& counter, std::string_view what) : counter_(counter) {
            if (++counter_ > kMaxNesting)
                p.fail(p.peek(), std::string(what) + " nested more than " + std::to_string(kMaxNesting) +
                                     " levels deep");
        }
        ~Nest() { --counter_; }
        Nest(const Nest&) = delete;
        Nest& operator=(const Nest&) = delete;

      private:
        int& counter_;
    };

    std::vector<Token> toks_;
    size_t pos_ = 0;
    int loop_depth_ = 0;
    int block_nesting_ = 0;
    int expr_nesting_ = 0;
};

std::string describe(const Token& t) {
    switch (t.kind) {
        case TokKind::Text:
            return "template text";
        case TokKind::VarBegin:
            return "'{{'";
        case TokKind::VarEnd:
            return "'}}'";
        case TokKind::BlockBegin:
            return "'{%'";
        case TokKind::BlockEnd:
            return "'%}'";
        case TokKind::String:
            return "string literal";
        case TokKind::Eof:
            return "end of template";
        default:
            return "'" + t.text + "'";
    }
}

void Parser::fail(const Token& t, const std::string& msg) const {
    throw Error("chat template line " + std::to_string(t.line) + ": " + msg);
}

bool Parser::accept_op(std::string_view op) {
    if (!is_op(op)) return false;
    ++pos_;
    return true;
}

bool Parser::accept_name(std::string_view name) {
    if (!is_name(name)) return false;
    ++pos_;
    return true;
}

void Parser::expect_op(std::string_view op) {
    if (!accept_op(op)) fail(peek(), "expected '" + std::string(op) + "', found " + describe(peek()));
}

std::string Parser::expect_identifier(std::string_view what) {
    if (peek().kind != TokKind::Name)
        fail(peek(), "expected " + std::string(what) + ", found " + describe(peek()));
    return next().text;
}

void Parser::expect_block_end() {
    if (peek().kind != TokKind::BlockEnd) fail(peek(), "expected '%}', found " + describe(peek()));
    ++pos_;
}

Body Parser::parse_all() {
    std::string found;
    return parse_body({}, found, {}, 0);
}

// Parses statements until a block tag whose keyword is in `stops` (consumed up to the keyword, which is
// stored in `found`) or, when `stops` is empty, until the end of the template.
Body Parser::parse_body(std::initializer_list<std::string_view> stops, std::string& found,
                        std::string_view opener, int open_line) {
    const Nest nest(*this, block_nesting_, "'{% " + std::string(opener) + " %}' block");
    Body body;
    for (;;) {
        const Token& t = peek();
        if (t.kind == TokKind::Eof) {
            if (stops.size() == 0) return body;
            fail(t, "missing '{% " + std::string(*(stops.end() - 1)) + " %}' for '{% " + std::string(opener) +
                        " %}' on line " + std::to_string(open_line));
        }
        if (t.kind == TokKind::Text) {
            auto n = make_node(NodeKind::Text, t.line);
            n->text = next().text;
            body.push_back(std::move(n));
        } else if (t.kind == TokKind::VarBegin) {
            auto n = make_node(NodeKind::Output, next().line);
            n->exprs.push_back(parse_expression());
            if (peek().kind != TokKind::VarEnd) fail(peek(), "expected '}}', found " + describe(peek()));
            ++pos_;
            body.push_back(std::move(n));
        } else if (t.kind == TokKind::BlockBegin) {
            const Token& kw = peek(1);
            if (kw.kind == TokKind::Name && std::find(stops.begin(), stops.end(), kw.text) != stops.end()) {
                pos_ += 2;
                found = kw.text;
                return body;
            }
            parse_statement(body);
        } else {
            fail(t, "unexpected " + describe(t));
        }
    }
}

void Parser::parse_statement(Body& out) {
    const int line = next().line;
    const Token& kw = peek();
    if (kw.kind != TokKind::Name) fail(kw, "expected a tag name after '{%', found " + describe(kw));
    const std::string name = next().text;
    if (name == "if") return out.push_back(parse_if(line));
    if (name == "for") return out.push_back(parse_for(line));
    if (name == "set") return out.push_back(parse_set(line));
    if (name == "macro") return out.push_back(parse_macro(line));
    if (name == "generation") return parse_generation(out, line);
    if (name == "break" || name == "continue") {
        if (loop_depth_ == 0) fail(kw, "'{% " + name + " %}' outside of a loop");
        expect_block_end();
        return out.push_back(make_node(name == "break" ? NodeKind::Break : NodeKind::Continue, line));
    }
    static const std::string_view unsupported[] = {"call", "filter",     "include", "import",
                                                   "from", "extends",    "block",   "with",
                                                   "do",   "autoescape", "trans"};
    if (std::find(std::begin(unsupported), std::end(unsupported), name) != std::end(unsupported))
        fail(kw, "unsupported tag '{% " + name + " %}'");
    if (name.rfind("end", 0) == 0 || name == "elif" || name == "else")
        fail(kw, "unexpected '{% " + name + " %}' without a matching opening tag");
    fail(kw, "unknown tag '{% " + name + " %}'");
}

NodePtr Parser::parse_if(int line) {
    auto n = make_node(NodeKind::If, line);
    n->exprs.push_back(parse_expression());
    expect_block_end();
    for (;;) {
        std::string found;
        n->bodies.push_back(parse_body({"elif", "else", "endif"}, found, "if", line));
        if (found == "elif") {
            n->exprs.push_back(parse_expression());
            expect_block_end();
            continue;
        }
        expect_block_end();
        if (found == "else") {
            n->bodies.push_back(parse_body({"endif"}, found, "if", line));
            expect_block_end();
        }
        return n;
    }
}

NodePtr Parser::parse_for(int line) {
    auto n = make_node(NodeKind::For, line);
    const bool paren = accept_op("(");
    do {
        n->names.push_back(expect_identifier("a loop variable name"));
    } while (accept_op(","));
    if (paren) expect_op(")");
    if (!accept_name("in")) fail(peek(), "expected 'in' in '{% for %}', found " + describe(peek()));
    n->exprs.push_back(parse_or());
    n->exprs.push_back(accept_name("if") ? parse_expression() : nullptr);
    if (is_name("recursive")) fail(peek(), "unsupported construct: recursive for loops");
    expect_block_end();
    std::string found;
    ++loop_depth_;
    n->bodies.push_back(parse_body({"else", "endfor"}, found, "for", line));
    --loop_depth_;
    expect_block_end();
    n->bodies.emplace_back();
    if (found == "else") {
        n->bodies.back() = parse_body({"endfor"}, found, "for", line);
        expect_block_end();
    }
    return n;
}

NodePtr Parser::parse_set(int line) {
    auto n = make_node(NodeKind::Set, line);
    n->names.push_back(expect_identifier("a variable name"));
    if (accept_op(".")) {
        n->attr = expect_identifier("an attribute name");
    } else {
        while (accept_op(",")) n->names.push_back(expect_identifier("a variable name"));
    }
    if (accept_op("=")) {
        ExprPtr value = parse_expression();
        const int value_line = value->line;
        if (is_op(",")) value = parse_sequence(std::move(value), value_line, "");
        n->exprs.push_back(std::move(value));
        expect_block_end();
        return n;
    }
    if (peek().kind != TokKind::BlockEnd || n->names.size() != 1 || !n->attr.empty())
        fail(peek(), "expected '=' in '{% set %}', found " + describe(peek()));
    ++pos_;
    n->kind = NodeKind::SetBlock;
    std::string found;
    n->bodies.push_back(parse_body({"endset"}, found, "set", line));
    expect_block_end();
    return n;
}

NodePtr Parser::parse_macro(int line) {
    auto n = make_node(NodeKind::Macro, line);
    n->names.push_back(expect_identifier("a macro name"));
    expect_op("(");
    while (!accept_op(")")) {
        n->names.push_back(expect_identifier("a parameter name"));
        n->exprs.push_back(accept_op("=") ? parse_expression() : nullptr);
        if (!is_op(")")) expect_op(",");
    }
    expect_block_end();
    const int saved_depth = loop_depth_;
    loop_depth_ = 0;
    std::string found;
    n->bodies.push_back(parse_body({"endmacro"}, found, "macro", line));
    loop_depth_ = saved_depth;
    expect_block_end();
    return n;
}

// {% generation %} (HF's assistant-mask marker) renders its body unchanged.
void Parser::parse_generation(Body& out, int line) {
    expect_block_end();
    std::string found;
    Body body = parse_body({"endgeneration"}, found, "generation", line);
    expect_block_end();
    for (auto& n : body) out.push_back(std::move(n));
}

ExprPtr Parser::parse_expression() {
    const Nest nest(*this, expr_nesting_, "expression (parentheses, brackets, braces or call arguments)");
    ExprPtr e = parse_or();
    while (is_name("if")) {
        const int line = next().line;
        auto cond = make_expr(ExprKind::Cond, line);
        add_arg(*cond, std::move(e));
        add_arg(*cond, parse_or());
        add_arg(*cond, accept_name("else") ? parse_expression() : nullptr);
        e = std::move(cond);
    }
    return e;
}

ExprPtr Parser::parse_or() {
    ExprPtr e = parse_and();
    while (accept_name("or")) e = make_binary(ExprKind::Or, "or", std::move(e), parse_and());
    return e;
}

ExprPtr Parser::parse_and() {
    ExprPtr e = parse_not();
    while (accept_name("and")) e = make_binary(ExprKind::And, "and", std::move(e), parse_not());
    return e;
}

ExprPtr Parser::parse_not() {
    if (!is_name("not")) return parse_compare();
    const Nest nest(*this, expr_nesting_, "'not'");
    auto e = make_expr(ExprKind::Not, next().line);
    add_arg(*e, parse_not());
    return e;
}

ExprPtr Parser::parse_compare() {
    ExprPtr e = parse_math1();
    ExprPtr cmp;
    for (;;) {
        std::string op;
        const Token& t = peek();
        if (t.kind == TokKind::Op && (t.text == "==" || t.text == "!=" || t.text == "<" || t.text == ">" ||
                                      t.text == "<=" || t.text == ">=")) {
            op = t.text;
            ++pos_;
        } else if (is_name("in")) {
            op = "in";
            ++pos_;
        } else if (is_name("not") && is_name("in", 1)) {
            op = "not in";
            pos_ += 2;
        } else {
            return cmp ? std::move(cmp) : std::move(e);
        }
        if (!cmp) {
            cmp = make_expr(ExprKind::Compare, e->line);
            add_arg(*cmp, std::move(e));
        }
        cmp->ops.push_back(op);
        add_arg(*cmp, parse_math1());
    }
}

ExprPtr Parser::parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
        const std::string op = next().text;
        e = make_binary(ExprKind::Binary, op, std::move(e), parse_concat());
    }
    return e;
}

ExprPtr Parser::parse_concat() {
    ExprPtr e = parse_math2();
    while (accept_op("~")) e = make_binary(ExprKind::Binary, "~", std::move(e), parse_math2());
    return e;
}

ExprPtr Parser::parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
        const std::string op = next().text;
        e = make_binary(ExprKind::Binary, op, std::move(e), parse_pow());
    }
    return e;
}

ExprPtr Parser::parse_pow() {
    ExprPtr e = parse_unary(true);
    while (accept_op("**")) e = make_binary(ExprKind::Binary, "**", std::move(e), parse_unary(true));
    return e;
}

ExprPtr Parser::parse_unary(bool with_filters) {
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
        const Nest nest(*this, expr_nesting_, "unary '" + peek().text + "'");
        const Token& t = next();
        e = make_expr(ExprKind::Unary, t.line, t.text);
        add_arg(*e, parse_unary(false));
    } else {
        e = parse_postfix(parse_primary());
    }
    if (!with_filters) return e;
    return parse_filters(std::move(e));
}

ExprPtr Parser::parse_primary() {
    const Token& t = next();
    if (t.kind == TokKind::Name) {
        auto lit = make_expr(ExprKind::Literal, t.line);
        if (t.text == "true" || t.text == "True")
            lit->value = Value(true);
        else if (t.text == "false" || t.text == "False")
            lit->value = Value(false);
        else if (t.text == "none" || t.text == "None")
            lit->value = Value(nullptr);
        else
            return make_expr(ExprKind::Name, t.line, t.text);
        return lit;
    }
    if (t.kind == TokKind::String || t.kind == TokKind::Int || t.kind == TokKind::Float) {
        auto lit = make_expr(ExprKind::Literal, t.line);
        if (t.kind == TokKind::Int) lit->value = Value(t.int_value);
        if (t.kind == TokKind::Float) lit->value = Value(t.float_value);
        if (t.kind != TokKind::String) return lit;
        std::string s = t.text;
        while (peek().kind == TokKind::String) s += next().text;
        lit->value = Value(std::move(s));
        return lit;
    }
    if (t.kind == TokKind::Op && t.text == "(") {
        if (is_op(")")) return parse_sequence(nullptr, t.line, ")");
        ExprPtr e = parse_expression();
        if (is_op(",")) return parse_sequence(std::move(e), t.line, ")");
        expect_op(")");
        return e;
    }
    if (t.kind == TokKind::Op && t.text == "[") return parse_sequence(nullptr, t.line, "]");
    if (t.kind == TokKind::Op && t.text == "{") return parse_dict(t.line);
    fail(t, "unexpected " + describe(t) + " in expression");
}

// Parses the rest of a list "[...]" (close "]"), a parenthesised tuple (close ")") or a bare tuple "a, b"
// (close empty); `first` is the element already read, or null.
ExprPtr Parser::parse_sequence(ExprPtr first, int line, std::string_view close) {
    auto seq = make_expr(ExprKind::List, line);
    seq->tuple = close != "]";
    if (first) add_arg(*seq, std::move(first));
    for (;;) {
        if (!close.empty() && accept_op(close)) return seq;
        if (!seq->args.empty()) {
            if (!accept_op(",")) {
                if (!close.empty()) expect_op(close);
                return seq;
            }
            if (!close.empty() && accept_op(close)) return seq;
            if (close.empty() && (peek().kind == TokKind::BlockEnd || peek().kind == TokKind::VarEnd))
                return seq;
        }
        add_arg(*seq, parse_expression());
    }
}

ExprPtr Parser::parse_dict(int line) {
    auto d = make_expr(ExprKind::Dict, line);
    while (!accept_op("}")) {
        if (!d->args.empty()) {
            expect_op(",");
            if (accept_op("}")) break;
        }
        add_arg(*d, parse_expression());
        expect_op(":");
        add_arg(*d, parse_expression());
    }
    return d;
}

ExprPtr Parser::parse_postfix(ExprPtr e) {
    for (;;) {
        if (accept_op(".")) {
            const Token& t = next();
            if (t.kind == TokKind::Name) {
                auto attr = make_expr(ExprKind::Attr, t.line, t.text);
                add_arg(*attr, std::move(e));
                e = std::move(attr);
            } else if (t.kind == TokKind::Int) {
                auto item = make_expr(ExprKind::Item, t.line);
                add_arg(*item, std::move(e));
                add_arg(*item, make_expr(ExprKind::Literal, t.line));
                item->args.back()->value = Value(t.int_value);
                e = std::move(item);
            } else {
                fail(t, "expected an attribute name after '.', found " + describe(t));
            }
        } else if (is_op("[")) {
            e = parse_subscript(std::move(e));
        } else if (is_op("(")) {
            auto call = make_expr(ExprKind::Call, next().line);
            add_arg(*call, std::move(e));
            parse_call_args(*call);
            e = std::move(call);
        } else {
            return e;
        }
    }
}

ExprPtr Parser::parse_filters(ExprPtr e) {
    for (;;) {
        if (is_op("|")) {
            const int line = next().line;
            const Token& name = peek();
            auto f = make_expr(ExprKind::Filter, line, expect_identifier("a filter name"));
            f->filter = find_filter(f->name);
            if (!f->filter) fail(name, "unknown filter '" + f->name + "'");
            add_arg(*f, std::move(e));
            if (accept_op("(")) parse_call_args(*f);
            e = std::move(f);
        } else if (is_name("is")) {
            e = parse_test(std::move(e));
        } else if (is_op("(")) {
            e = parse_postfix(std::move(e));
        } else {
            return e;
        }
    }
}

ExprPtr Parser::parse_test(ExprPtr e) {
    const int line = next().line;
    const bool negated = accept_name("not");
    const Token& name = peek();
    auto t = make_expr(ExprKind::Test, line, expect_identifier("a test name"));
    t->test = find_test(t->name);
    if (!t->test) fail(name, "unknown test '" + t->name + "'");
    t->negated = negated;
    add_arg(*t, std::move(e));
    if (accept_op("(")) {
        parse_call_args(*t);
        return t;
    }
    const Token& a = peek();
    static const std::string_view stop_words[] = {"else", "or", "and", "if", "is", "in", "not"};
    const bool name_arg = a.kind == TokKind::Name && std::find(std::begin(stop_words), std::end(stop_words),
                                                               a.text) == std::end(stop_words);
    if (name_arg || a.kind == TokKind::String || a.kind == TokKind::Int || a.kind == TokKind::Float ||
        is_op("[") || is_op("{"))
        add_arg(*t, parse_postfix(parse_primary()));
    return t;
}

ExprPtr Parser::parse_subscript(ExprPtr e) {
    const int line = next().line;
    ExprPtr start = is_op(":") ? nullptr : parse_expression();
    if (!accept_op(":")) {
        expect_op("]");
        auto item = make_expr(ExprKind::Item, line);
        add_arg(*item, std::move(e));
        add_arg(*item, std::move(start));
        return item;
    }
    auto slice = make_expr(ExprKind::Slice, line);
    add_arg(*slice, std::move(e));
    add_arg(*slice, std::move(start));
    add_arg(*slice, is_op(":") || is_op("]") ? nullptr : parse_expression());
    add_arg(*slice, accept_op(":") && !is_op("]") ? parse_expression() : nullptr);
    expect_op("]");
    return slice;
}

// Reads "arg, name=arg, ...)" after the opening parenthesis into call.args (after args[0]) and kwargs.
void Parser::parse_call_args(Expr& call) {
    while (!accept_op(")")) {
        if (is_op("*") || is_op("**")) fail(peek(), "unsupported construct: *args/**kwargs in a call");
        if (peek().kind == TokKind::Name && is_op("=", 1)) {
            std::string name = next().text;
            ++pos_;
            add_kwarg(call, std::move(name), parse_expression());
        } else {
            if (!call.kwargs.empty()) fail(peek(), "positional argument follows keyword argument");
            add_arg(call, parse_expression());
        }
        if (!is_op(")")) expect_op(",");
    }
}

}  // namespace

Body parse_template(const std::string& source) {
    return Parser(tokenize(source)).parse_all();
}

}  // namespace minfer::jinja
