#include "tokenizer/template/jinja_eval.h"

#include <algorithm>
#include <unordered_map>

#include "tokenizer/template/jinja_builtins.h"
#include "tokenizer/template/jinja_limits.h"
#include "tokenizer/template/jinja_ops.h"

namespace minfer::jinja {

namespace {

class Evaluator {
  public:
    explicit Evaluator(const std::vector<std::pair<std::string, Value>>& globals);
    std::string run(const Body& body);

  private:
    enum class Flow { Normal, Break, Continue };
    using Frame = std::unordered_map<std::string, Value>;

    Flow exec(const Body& body, std::string& out);
    Flow exec_node(const Node& n, std::string& out);
    Flow exec_if(const Node& n, std::string& out);
    void exec_for(const Node& n, std::string& out);
    List filtered_items(const Node& n, List items);
    void exec_set(const Node& n);
    void define_macro(const Node& n);
    Value call_macro(const Node& n, const Args& args);

    Value eval(const Expr& e);
    Value eval_node(const Expr& e);
    Value eval_dict(const Expr& e);
    Value eval_compare(const Expr& e);
    Value eval_slice(const Expr& e);
    Value eval_call(const Expr& e);
    Value eval_filter(const Expr& e);
    bool eval_test(const Expr& e);
    Args eval_args(const Expr& e);

    Value lookup(const std::string& name) const;
    void assign(const std::string& name, Value v) { scopes_.back()[name] = std::move(v); }
    void bind_targets(const std::vector<std::string>& names, const Value& v);
    void emit(std::string& out, const std::string& text);
    void count_iteration();

    // Counts the evaluator's recursion (expressions, blocks, macro calls) while in scope, and its steps
    // over the whole rendering (a macro calling itself twice per call nests little but runs forever).
    class Nest {
      public:
        explicit Nest(Evaluator& ev) : ev_(ev) {
            if (++ev_.depth_ > kMaxEvalDepth)
                throw EvalError("evaluation nested more than " + std::to_string(kMaxEvalDepth) +
                                " levels deep (expressions, blocks and macro calls)");
            if (++ev_.steps_ > kMaxSteps)
                throw EvalError("evaluation took more than " + std::to_string(kMaxSteps) +
                                " steps (expressions evaluated and blocks run), the template limit");
        }
        ~Nest() { --ev_.depth_; }
        Nest(const Nest&) = delete;
        Nest& operator=(const Nest&) = delete;

      private:
        Evaluator& ev_;
    };

    std::vector<Frame> scopes_;
    int line_ = 0;
    int macro_depth_ = 0;
    int depth_ = 0;
    size_t output_bytes_ = 0;
    int64_t loop_iterations_ = 0;
    int64_t steps_ = 0;
};

Value make_loop(const List& items, size_t i) {
    const auto n = static_cast<int64_t>(items.size());
    const auto idx = static_cast<int64_t>(i);
    Function cycle{"loop.cycle", [idx](const Args& a) {
                       if (a.pos.empty()) throw EvalError("loop.cycle() needs at least one argument");
                       return a.pos[static_cast<size_t>(idx) % a.pos.size()];
                   }};
    return make_dict({
        {"index", Value(idx + 1)},
        {"index0", Value(idx)},
        {"revindex", Value(n - idx)},
        {"revindex0", Value(n - idx - 1)},
        {"first", Value(idx == 0)},
        {"last", Value(idx == n - 1)},
        {"length", Value(n)},
        {"depth", Value(1)},
        {"depth0", Value(0)},
        {"previtem", i > 0 ? items[i - 1] : Value(Undefined{"there is no previous item"})},
        {"nextitem", idx + 1 < n ? items[i + 1] : Value(Undefined{"there is no next item"})},
        {"cycle", Value(std::move(cycle))},
    });
}

Evaluator::Evaluator(const std::vector<std::pair<std::string, Value>>& globals) {
    scopes_.emplace_back();
    for (auto& [name, v] : builtin_globals()) scopes_.back()[name] = std::move(v);
    for (const auto& [name, v] : globals) scopes_.back()[name] = v;
}

std::string Evaluator::run(const Body& body) {
    std::string out;
    try {
        exec(body, out);
    } catch (const EvalError& e) {
        throw Error("chat template line " + std::to_string(line_) + ": " + e.what());
    }
    return out;
}

Evaluator::Flow Evaluator::exec(const Body& body, std::string& out) {
    const Nest nest(*this);
    for (const NodePtr& n : body) {
        const Flow f = exec_node(*n, out);
        if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
}

Evaluator::Flow Evaluator::exec_node(const Node& n, std::string& out) {
    line_ = n.line;
    switch (n.kind) {
        case NodeKind::Text:
            emit(out, n.text);
            break;
        case NodeKind::Output:
            emit(out, eval(*n.exprs[0]).str());
            break;
        case NodeKind::If:
            return exec_if(n, out);
        case NodeKind::For:
            exec_for(n, out);
            break;
        case NodeKind::Set:
            exec_set(n);
            break;
        case NodeKind::SetBlock: {
            std::string text;
            exec(n.bodies[0], text);
            assign(n.names[0], Value(std::move(text)));
            break;
        }
        case NodeKind::Macro:
            define_macro(n);
            break;
        case NodeKind::Break:
            return Flow::Break;
        case NodeKind::Continue:
            return Flow::Continue;
    }
    return Flow::Normal;
}

Evaluator::Flow Evaluator::exec_if(const Node& n, std::string& out) {
    for (size_t i = 0; i < n.exprs.size(); ++i) {
        line_ = n.exprs[i]->line;
        if (eval(*n.exprs[i]).truthy()) return exec(n.bodies[i], out);
    }
    if (n.bodies.size() > n.exprs.size()) return exec(n.bodies.back(), out);
    return Flow::Normal;
}

List Evaluator::filtered_items(const Node& n, List items) {
    if (!n.exprs[1]) return items;
    List kept;
    for (const Value& item : items) {
        count_iteration();
        scopes_.emplace_back();
        bind_targets(n.names, item);
        if (eval(*n.exprs[1]).truthy()) kept.push_back(item);
        scopes_.pop_back();
    }
    return kept;
}

void Evaluator::exec_for(const Node& n, std::string& out) {
    const Value seq = eval(*n.exprs[0]);
    if (seq.is_none()) throw EvalError("'NoneType' object is not iterable");
    const List items = filtered_items(n, iterate(seq));
    if (items.empty()) {
        exec(n.bodies[1], out);
        return;
    }
    for (size_t i = 0; i < items.size(); ++i) {
        count_iteration();
        scopes_.emplace_back();
        bind_targets(n.names, items[i]);
        assign("loop", make_loop(items, i));
        const Flow f = exec(n.bodies[0], out);
        scopes_.pop_back();
        if (f == Flow::Break) break;
    }
}

// Appends rendered text, within kMaxOutputBytes over the whole rendering (macro bodies and
// {% set %} blocks included).
void Evaluator::emit(std::string& out, const std::string& text) {
    output_bytes_ += text.size();
    if (output_bytes_ > kMaxOutputBytes)
        throw EvalError("template output exceeds " + std::to_string(kMaxOutputBytes >> 20) +
                        " MiB, the template limit");
    out += text;
}

void Evaluator::count_iteration() {
    if (++loop_iterations_ > kMaxLoopIterations)
        throw EvalError("for loops ran more than " + std::to_string(kMaxLoopIterations) +
                        " iterations, the template limit");
}

void Evaluator::bind_targets(const std::vector<std::string>& names, const Value& v) {
    if (names.size() == 1) {
        assign(names[0], v);
        return;
    }
    if (!v.is_list() && !v.is_string()) throw EvalError("cannot unpack non-sequence " + v.type_name());
    const List parts = iterate(v);
    if (parts.size() != names.size())
        throw EvalError("cannot unpack " + std::to_string(parts.size()) + " values into " +
                        std::to_string(names.size()) + " variables");
    for (size_t i = 0; i < names.size(); ++i) assign(names[i], parts[i]);
}

void Evaluator::exec_set(const Node& n) {
    Value v = eval(*n.exprs[0]);
    if (n.attr.empty()) {
        bind_targets(n.names, v);
        return;
    }
    const Value target = lookup(n.names[0]);
    if (!target.is_dict() || !target.as_dict().is_namespace)
        throw EvalError("cannot assign attribute '" + n.attr + "' on '" + n.names[0] +
                        "', which is not a namespace");
    if (v.holds_namespace())
        throw EvalError("cannot assign a namespace (or a list or dict holding one) to '" + n.names[0] + "." +
                        n.attr + "'");
    target.as_dict().set(n.attr, std::move(v));
}

void Evaluator::define_macro(const Node& n) {
    assign(n.names[0], Value(Function{n.names[0], [this, &n](const Args& a) { return call_macro(n, a); }}));
}

// Runs a macro body in a fresh scope that sees only the template's top-level variables and the parameters.
Value Evaluator::call_macro(const Node& n, const Args& args) {
    const size_t n_params = n.names.size() - 1;
    if (args.pos.size() > n_params)
        throw EvalError("macro '" + n.names[0] + "' takes " + std::to_string(n_params) + " arguments (" +
                        std::to_string(args.pos.size()) + " given)");
    for (const auto& [k, v] : args.kw)
        if (std::find(n.names.begin() + 1, n.names.end(), k) == n.names.end())
            throw EvalError("macro '" + n.names[0] + "' has no parameter '" + k + "'");
    if (macro_depth_ >= 64) throw EvalError("macro calls nested too deeply in '" + n.names[0] + "'");
    ++macro_depth_;
    std::vector<Frame> saved(std::make_move_iterator(scopes_.begin() + 1),
                             std::make_move_iterator(scopes_.end()));
    scopes_.resize(1);
    scopes_.emplace_back();
    for (size_t i = 0; i < n_params; ++i) {
        const std::string& p = n.names[i + 1];
        Value v = args.get(i, p, Undefined{"'" + p + "' is undefined"});
        if (v.is_undefined() && n.exprs[i]) v = eval(*n.exprs[i]);
        assign(p, std::move(v));
    }
    std::string out;
    exec(n.bodies[0], out);
    scopes_.resize(1);
    for (Frame& f : saved) scopes_.push_back(std::move(f));
    --macro_depth_;
    return Value(std::move(out));
}

Value Evaluator::lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
        const auto found = it->find(name);
        if (found != it->end()) return found->second;
    }
    return Undefined{"'" + name + "' is undefined"};
}

Value Evaluator::eval(const Expr& e) {
    const Nest nest(*this);
    return eval_node(e);
}

Value Evaluator::eval_node(const Expr& e) {
    line_ = e.line;
    switch (e.kind) {
        case ExprKind::Literal:
            return e.value;
        case ExprKind::Name:
            return lookup(e.name);
        case ExprKind::List: {
            List items;
            for (const ExprPtr& a : e.args) items.push_back(eval(*a));
            return Value(std::move(items), e.tuple ? SeqKind::Tuple : SeqKind::List);
        }
        case ExprKind::Dict:
            return eval_dict(e);
        case ExprKind::Attr:
            return get_attr(eval(*e.args[0]), e.name);
        case ExprKind::Item: {
            const Value obj = eval(*e.args[0]);
            return get_item(obj, eval(*e.args[1]));
        }
        case ExprKind::Slice:
            return eval_slice(e);
        case ExprKind::Call:
            return eval_call(e);
        case ExprKind::Filter:
            return eval_filter(e);
        case ExprKind::Test:
            return Value(eval_test(e));
        case ExprKind::Unary:
            return unary_op(e.name, eval(*e.args[0]));
        case ExprKind::Binary: {
            const Value lhs = eval(*e.args[0]);
            return binary_op(e.name, lhs, eval(*e.args[1]));
        }
        case ExprKind::Compare:
            return eval_compare(e);
        case ExprKind::And: {
            Value lhs = eval(*e.args[0]);
            return lhs.truthy() ? eval(*e.args[1]) : lhs;
        }
        case ExprKind::Or: {
            Value lhs = eval(*e.args[0]);
            return lhs.truthy() ? lhs : eval(*e.args[1]);
        }
        case ExprKind::Not:
            return Value(!eval(*e.args[0]).truthy());
        case ExprKind::Cond:
            if (eval(*e.args[1]).truthy()) return eval(*e.args[0]);
            return e.args[2] ? eval(*e.args[2]) : Value(Undefined{"inline if without else"});
    }
    throw EvalError("unsupported expression");
}

Value Evaluator::eval_dict(const Expr& e) {
    std::vector<std::pair<std::string, Value>> entries;
    for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        const Value key = eval(*e.args[i]);
        if (!key.is_string()) throw EvalError("unsupported construct: dict literal with a non-string key");
        entries.emplace_back(key.as_string(), eval(*e.args[i + 1]));
    }
    auto d = std::make_shared<Dict>();
    for (auto& [k, v] : entries) d->set(k, std::move(v));
    return Value(std::move(d));
}

// a < b < c is (a < b) and (b < c), evaluating b once, as in Python.
Value Evaluator::eval_compare(const Expr& e) {
    Value lhs = eval(*e.args[0]);
    Value result;
    for (size_t i = 0; i < e.ops.size(); ++i) {
        Value rhs = eval(*e.args[i + 1]);
        result = binary_op(e.ops[i], lhs, rhs);
        if (!result.truthy()) break;
        lhs = std::move(rhs);
    }
    return result;
}

Value Evaluator::eval_slice(const Expr& e) {
    const Value obj = eval(*e.args[0]);
    std::optional<int64_t> bounds[3];
    for (size_t i = 0; i < 3; ++i) {
        if (!e.args[i + 1]) continue;
        const Value b = eval(*e.args[i + 1]);
        if (!b.is_none()) bounds[i] = b.as_int("slice index");
    }
    return get_slice(obj, bounds[0], bounds[1], bounds[2]);
}

Args Evaluator::eval_args(const Expr& e) {
    Args args;
    for (size_t i = 1; i < e.args.size(); ++i) args.pos.push_back(eval(*e.args[i]));
    for (const auto& [name, arg] : e.kwargs) args.kw.emplace_back(name, eval(*arg));
    return args;
}

Value Evaluator::eval_call(const Expr& e) {
    const Value callee = eval(*e.args[0]);
    if (callee.is_undefined())
        throw EvalError(callee.undefined_reason().empty() ? "call of an undefined value"
                                                          : callee.undefined_reason());
    const Function& fn = callee.as_function();
    const Args args = eval_args(e);
    const int call_line = e.line;
    Value result = fn.call(args);
    line_ = call_line;
    return result;
}

Value Evaluator::eval_filter(const Expr& e) {
    if (!e.filter) throw EvalError("unknown filter '" + e.name + "'");
    const Value subject = eval(*e.args[0]);
    const Args args = eval_args(e);
    line_ = e.line;
    return e.filter(subject, args);
}

bool Evaluator::eval_test(const Expr& e) {
    if (!e.test) throw EvalError("unknown test '" + e.name + "'");
    const Value subject = eval(*e.args[0]);
    const Args args = eval_args(e);
    line_ = e.line;
    return e.test(subject, args) != e.negated;
}

}  // namespace

std::string render(const Body& tmpl, const std::vector<std::pair<std::string, Value>>& globals) {
    const WorkScope work;
    return Evaluator(globals).run(tmpl);
}

}  // namespace minfer::jinja
