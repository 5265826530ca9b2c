#include "tokenizer/template/jinja_ops.h"

#include <algorithm>
#include <cmath>

#include "tokenizer/template/jinja_builtins.h"

namespace minfer::jinja {

namespace {

[[noreturn]] void throw_undefined(const Value& v) {
    throw EvalError(v.undefined_reason().empty() ? std::string("undefined value used")
                                                 : v.undefined_reason());
}

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
    throw EvalError("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" +
                    b.type_name() + "'");
}

bool is_integral(const Value& v) {
    return v.is_int() || v.is_bool();
}

void check_overflow(bool overflow) {
    if (overflow) throw EvalError("integer overflow");
}

// Python's seq * count; the size is checked before anything is allocated.
Value repeat(const Value& seq, int64_t count) {
    const size_t n = seq.is_string() ? seq.as_string().size() : seq.as_list().size();
    const auto times = static_cast<size_t>(std::max<int64_t>(count, 0));
    const size_t limit = seq.is_string() ? kMaxStringBytes : kMaxListItems;
    if (n != 0 && times > limit / n) {
        const std::string what = "'*' repetition (" + std::to_string(n) + " x " + std::to_string(count) + ")";
        if (seq.is_string())
            check_string_size(limit + 1, what);
        else
            check_list_size(limit + 1, what);
    }
    if (seq.is_string()) {
        std::string out;
        out.reserve(n * times);
        for (size_t i = 0; i < times; ++i) out += seq.as_string();
        return Value(std::move(out));
    }
    List out;
    out.reserve(n * times);
    for (size_t i = 0; i < times; ++i) out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
    return Value(std::move(out), seq.seq_kind());
}

// x ** y by squaring: O(log y) steps, so 1 ** 10000000000 is instant.
Value int_pow(int64_t x, int64_t y) {
    if (y < 0) return Value(std::pow(static_cast<double>(x), static_cast<double>(y)));
    int64_t r = 1;
    for (int64_t base = x;; y >>= 1) {
        if (y & 1) check_overflow(__builtin_mul_overflow(r, base, &r));
        if (y <= 1) return Value(r);
        check_overflow(__builtin_mul_overflow(base, base, &base));
    }
}

Value int_arith(const std::string& op, int64_t x, int64_t y) {
    int64_t r = 0;
    if (op == "+") check_overflow(__builtin_add_overflow(x, y, &r));
    if (op == "-") check_overflow(__builtin_sub_overflow(x, y, &r));
    if (op == "*") check_overflow(__builtin_mul_overflow(x, y, &r));
    if (op == "+" || op == "-" || op == "*") return Value(r);
    if (op == "**") return int_pow(x, y);
    if (y == 0) throw EvalError("integer division or modulo by zero");
    if (op == "/") return Value(static_cast<double>(x) / static_cast<double>(y));
    if (x == INT64_MIN && y == -1) throw EvalError("integer overflow");
    int64_t q = x / y;
    int64_t m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
    }
    return Value(op == "//" ? q : m);
}

Value float_arith(const std::string& op, double x, double y) {
    if (op == "+") return Value(x + y);
    if (op == "-") return Value(x - y);
    if (op == "*") return Value(x * y);
    if (op == "**") return Value(std::pow(x, y));
    if (y == 0) throw EvalError("float division by zero");
    if (op == "/") return Value(x / y);
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    if (op == "%") return Value(m);
    // (x - m) / y is within rounding error of an integer: round it to the nearest one.
    const double q = (x - m) / y;
    const double f = std::floor(q);
    return Value(q - f > 0.5 ? f + 1 : f);
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) {
        if (is_integral(a) && is_integral(b)) return int_arith(op, a.as_int(), b.as_int());
        return float_arith(op, a.as_number(), b.as_number());
    }
    if (op == "+" && a.is_string() && b.is_string()) {
        check_string_size(a.as_string().size() + b.as_string().size(), "'+' concatenation");
        return Value(a.as_string() + b.as_string());
    }
    const bool a_seq = a.is_plain_sequence();
    const bool b_seq = b.is_plain_sequence();
    if (op == "+" && a_seq && b_seq && a.is_tuple() == b.is_tuple()) {
        check_list_size(a.as_list().size() + b.as_list().size(), "'+' concatenation");
        List out = a.as_list();
        out.insert(out.end(), b.as_list().begin(), b.as_list().end());
        return Value(std::move(out), a.seq_kind());
    }
    if (op == "*" && (a.is_string() || a_seq) && is_integral(b)) return repeat(a, b.as_int());
    if (op == "*" && (b.is_string() || b_seq) && is_integral(a)) return repeat(b, a.as_int());
    if (op == "%" && a.is_string())
        throw EvalError("printf-style string formatting with '%' is not supported");
    if (a.is_undefined()) throw_undefined(a);
    if (b.is_undefined()) throw_undefined(b);
    unsupported(op, a, b);
}

Value character(const std::string& s, int64_t index) {
    const std::vector<size_t> cps = utf8_boundaries(s);
    const auto n = static_cast<int64_t>(cps.size()) - 1;
    if (index < 0) index += n;
    if (index < 0 || index >= n) return Undefined{"string index out of range"};
    const auto i = static_cast<size_t>(index);
    return Value(s.substr(cps[i], cps[i + 1] - cps[i]));
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
    if (obj.is_undefined()) throw_undefined(obj);
    if (obj.is_dict() && obj.as_dict().is_namespace) {
        if (const Value* v = obj.as_dict().find(name)) return *v;
        return Undefined{"namespace has no attribute '" + name + "'"};
    }
    Value method = find_method(obj, name);
    if (!method.is_undefined()) return method;
    if (obj.is_dict())
        if (const Value* v = obj.as_dict().find(name)) return *v;
    return Undefined{obj.object_name() + " has no attribute '" + name + "'"};
}

Value get_item(const Value& obj, const Value& key) {
    if (obj.is_undefined()) throw_undefined(obj);
    if (obj.is_dict() && key.is_string()) {
        if (const Value* v = obj.as_dict().find(key.as_string())) return *v;
    } else if (obj.is_plain_sequence() && is_integral(key)) {
        const List& items = obj.as_list();
        int64_t i = key.as_int();
        if (i < 0) i += static_cast<int64_t>(items.size());
        if (i < 0 || i >= static_cast<int64_t>(items.size())) return Undefined{"list index out of range"};
        return items[static_cast<size_t>(i)];
    } else if (obj.is_string() && is_integral(key)) {
        return character(obj.as_string(), key.as_int());
    }
    if (key.is_string()) return get_attr(obj, key.as_string());
    return Undefined{obj.object_name() + " has no item " + key.repr()};
}

Value get_slice(const Value& obj, std::optional<int64_t> start, std::optional<int64_t> stop,
                std::optional<int64_t> step) {
    if (obj.is_plain_sequence()) {
        const List& items = obj.as_list();
        List out;
        for (int64_t i : slice_indices(static_cast<int64_t>(items.size()), start, stop, step))
            out.push_back(items[static_cast<size_t>(i)]);
        return Value(std::move(out), obj.seq_kind());
    }
    if (obj.is_string()) {
        const std::string& s = obj.as_string();
        const std::vector<size_t> cps = utf8_boundaries(s);
        std::string out;
        for (int64_t i : slice_indices(static_cast<int64_t>(cps.size()) - 1, start, stop, step)) {
            const auto k = static_cast<size_t>(i);
            out.append(s, cps[k], cps[k + 1] - cps[k]);
        }
        return Value(std::move(out));
    }
    if (obj.is_undefined()) throw_undefined(obj);
    throw EvalError(obj.object_name() + " is not subscriptable");
}

Value binary_op(const std::string& op, const Value& a, const Value& b) {
    if (op == "~") {
        const std::string x = a.str();
        const std::string y = b.str();
        check_string_size(x.size() + y.size(), "'~' concatenation");
        return Value(x + y);
    }
    if (op == "==") return Value(equals(a, b));
    if (op == "!=") return Value(!equals(a, b));
    if (op == "<") return Value(less_than(a, b));
    if (op == ">") return Value(less_than(b, a));
    if (op == "<=") return Value(less_than(a, b) || equals(a, b));
    if (op == ">=") return Value(less_than(b, a) || equals(a, b));
    if (op == "in") return Value(contains(b, a));
    if (op == "not in") return Value(!contains(b, a));
    return arithmetic(op, a, b);
}

Value unary_op(const std::string& op, const Value& a) {
    if (a.is_float()) return Value(op == "-" ? -a.as_number() : a.as_number());
    if (is_integral(a)) {
        if (op == "-" && a.as_int() == INT64_MIN) throw EvalError("integer overflow");
        return Value(op == "-" ? -a.as_int() : a.as_int());
    }
    if (a.is_undefined()) throw_undefined(a);
    throw EvalError("bad operand type for unary " + op + ": '" + a.type_name() + "'");
}

bool contains(const Value& container, const Value& item) {
    if (container.is_string()) {
        if (!item.is_string())
            throw EvalError("'in <string>' requires string as left operand, not " + item.type_name());
        charge_work(container.as_string().size(), "'in' on a string");
        return container.as_string().find(item.as_string()) != std::string::npos;
    }
    if (container.is_list()) {
        charge_items(container.as_list().size(), "'in' on a list");
        for (const Value& v : container.as_list())
            if (equals(v, item)) return true;
        return false;
    }
    if (container.is_dict() && !container.as_dict().is_namespace)
        return item.is_string() && container.as_dict().find(item.as_string()) != nullptr;
    if (container.is_undefined()) return false;
    throw EvalError("argument of type '" + container.type_name() + "' is not iterable");
}

List iterate(const Value& v) {
    if (v.is_list()) {
        charge_items(v.as_list().size(), "iterating over a list");
        return v.as_list();
    }
    if (v.is_undefined()) return {};
    if (v.is_dict() && !v.as_dict().is_namespace) {
        List keys;
        for (const auto& [k, val] : v.as_dict().entries) keys.emplace_back(k);
        return keys;
    }
    if (v.is_string()) {
        const std::string& s = v.as_string();
        check_list_size(utf8_length(s), "iterating over a string");
        const std::vector<size_t> cps = utf8_boundaries(s);
        List chars;
        for (size_t i = 0; i + 1 < cps.size(); ++i) chars.emplace_back(s.substr(cps[i], cps[i + 1] - cps[i]));
        return chars;
    }
    throw EvalError("'" + v.type_name() + "' object is not iterable");
}

int64_t length(const Value& v) {
    if (v.is_string()) return static_cast<int64_t>(utf8_length(v.as_string()));
    if (v.is_list() && !v.is_iterator()) return static_cast<int64_t>(v.as_list().size());
    if (v.is_dict() && !v.as_dict().is_namespace) return static_cast<int64_t>(v.as_dict().entries.size());
    if (v.is_undefined()) return 0;
    throw EvalError("object of type '" + v.type_name() + "' has no len()");
}

}  // namespace minfer::jinja
