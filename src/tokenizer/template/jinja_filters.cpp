// Jinja2 filters and tests, with HF transformers' tojson (json.dumps with ensure_ascii=False).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "tokenizer/template/jinja_builtins.h"
#include "tokenizer/template/jinja_ops.h"

namespace minfer::jinja {

namespace {

// Jinja's attribute getter for filters: "a.b.0" looks up a, then b, then index 0.
Value get_path(const Value& obj, const std::string& path) {
    Value cur = obj;
    size_t pos = 0;
    for (;;) {
        const size_t dot = path.find('.', pos);
        const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
        const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) {
            return std::isdigit(static_cast<unsigned char>(c)) != 0;
        });
        cur = get_item(cur, digits ? Value(static_cast<int64_t>(std::stoll(part))) : Value(part));
        if (dot == std::string::npos) return cur;
        pos = dot + 1;
    }
}

// Filters that need a defined value fail on undefined ones, as Jinja's Undefined does.
void require_defined(const Value& v) {
    if (v.is_undefined())
        throw EvalError(v.undefined_reason().empty() ? std::string("undefined value used")
                                                     : v.undefined_reason());
}

Value f_abs(const Value& v, const Args& a) {
    a.expect("abs", 0, {});
    require_defined(v);
    if (v.is_float()) return Value(std::fabs(v.as_number()));
    const int64_t i = v.as_int("abs() argument");
    return i < 0 ? unary_op("-", v) : Value(i);
}

Value f_default(const Value& v, const Args& a) {
    a.expect("default", 2, {"default_value", "boolean"});
    const bool boolean = a.get(1, "boolean", false).truthy();
    return v.is_undefined() || (boolean && !v.truthy()) ? a.get(0, "default_value", "") : v;
}

Value f_first(const Value& v, const Args& a) {
    a.expect("first", 0, {});
    const List items = iterate(v);
    return items.empty() ? Value(Undefined{"first() of an empty sequence"}) : items.front();
}

Value f_last(const Value& v, const Args& a) {
    a.expect("last", 0, {});
    if (v.is_iterator()) throw EvalError("'generator' object is not reversible");
    const List items = iterate(v);
    return items.empty() ? Value(Undefined{"last() of an empty sequence"}) : items.back();
}

// Python's float()/int() of a string: surrounding whitespace allowed, "_" between digits allowed.
std::optional<double> parse_float(const std::string& text) {
    std::string s = py_strip(text, nullptr, StripSide::Both);
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    if (s.empty()) return std::nullopt;
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size()) return std::nullopt;
    return d;
}

std::optional<int64_t> parse_int(const std::string& text) {
    const std::string s = py_strip(text, nullptr, StripSide::Both);
    size_t i = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
    if (i == s.size() || !std::isdigit(static_cast<unsigned char>(s[i]))) return std::nullopt;
    int64_t v = 0;
    for (; i < s.size(); ++i) {
        if (s[i] == '_' && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1]))) continue;
        if (!std::isdigit(static_cast<unsigned char>(s[i]))) return std::nullopt;
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, s[i] - '0', &v))
            return std::nullopt;
    }
    return s[0] == '-' ? -v : v;
}

Value f_int(const Value& v, const Args& a) {
    a.expect("int", 1, {"default"});
    require_defined(v);
    if (v.is_int() || v.is_bool()) return Value(v.as_int());
    if (v.is_float() && std::isfinite(v.as_number())) return Value(static_cast<int64_t>(v.as_number()));
    if (v.is_string()) {
        if (const auto i = parse_int(v.as_string())) return Value(*i);
        if (const auto d = parse_float(v.as_string()); d && std::isfinite(*d))
            return Value(static_cast<int64_t>(*d));
    }
    return a.get(0, "default", Value(0));
}

Value f_float(const Value& v, const Args& a) {
    a.expect("float", 1, {"default"});
    require_defined(v);
    if (v.is_number()) return Value(v.as_number());
    if (v.is_string())
        if (const auto d = parse_float(v.as_string())) return Value(*d);
    return a.get(0, "default", Value(0.0));
}

Value f_items(const Value& v, const Args& a) {
    a.expect("items", 0, {});
    if (v.is_undefined()) return Value(List{}, SeqKind::Iterator);
    List out;
    for (const auto& [k, val] : v.as_dict("items() argument").entries)
        out.emplace_back(List{Value(k), val}, SeqKind::Tuple);
    return Value(std::move(out), SeqKind::Iterator);
}

Value f_join(const Value& v, const Args& a) {
    a.expect("join", 2, {"d", "attribute"});
    const std::string sep = a.get(0, "d", "").str();
    const Value attribute = a.get(1, "attribute", nullptr);
    std::string out;
    const List items = iterate(v);
    for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += sep;
        out += (attribute.is_none() ? items[i] : get_path(items[i], attribute.str())).str();
        check_string_size(out.size(), "the join filter");
    }
    return Value(std::move(out));
}

// Python's len(): generators have none.
Value f_length(const Value& v, const Args& a) {
    a.expect("length", 0, {});
    return Value(length(v));
}

Value f_list(const Value& v, const Args& a) {
    a.expect("list", 0, {});
    return Value(iterate(v));
}

Value f_string_case(const Value& v, const Args& a, const char* name,
                    std::string (*convert)(const std::string&)) {
    a.expect(name, 0, {});
    return Value(convert(v.str()));
}

Value f_replace(const Value& v, const Args& a) {
    a.expect("replace", 3, {"old", "new", "count"});
    const Value count = a.get(2, "count", nullptr);
    return Value(py_replace(v.str(), a.get(0, "old").as_string("replace() argument"),
                            a.get(1, "new").as_string("replace() argument"),
                            count.is_none() ? -1 : count.as_int()));
}

Value f_reverse(const Value& v, const Args& a) {
    a.expect("reverse", 0, {});
    if (v.is_string()) return get_slice(v, std::nullopt, std::nullopt, -1);
    List items = iterate(v);
    std::reverse(items.begin(), items.end());
    // reversed() of a list is an iterator; a generator is first collected into a list.
    return Value(std::move(items), v.is_iterator() ? SeqKind::List : SeqKind::Iterator);
}

// Markup(v): the value as a string.
Value f_safe(const Value& v, const Args& a) {
    a.expect("safe", 0, {});
    return Value(v.str());
}

Value f_string(const Value& v, const Args& a) {
    a.expect("string", 0, {});
    return Value(v.str());
}

Value f_tojson(const Value& v, const Args& a) {
    a.expect("tojson", 4, {"ensure_ascii", "indent", "separators", "sort_keys"});
    JsonOptions opts;
    opts.ensure_ascii = a.get(0, "ensure_ascii", false).truthy();
    const Value indent = a.get(1, "indent", nullptr);
    if (!indent.is_none())
        opts.indent = static_cast<int>(std::max<int64_t>(0, indent.as_int("tojson indent")));
    const Value seps = a.get(2, "separators", nullptr);
    if (!seps.is_none()) {
        const List& pair = seps.as_list("tojson separators");
        if (pair.size() != 2) throw EvalError("tojson separators must be an (item, key) pair");
        opts.separators =
            std::make_pair(pair[0].as_string("tojson separator"), pair[1].as_string("tojson separator"));
    }
    opts.sort_keys = a.get(3, "sort_keys", false).truthy();
    return Value(to_json(v, opts));
}

Value f_trim(const Value& v, const Args& a) {
    a.expect("trim", 1, {"chars"});
    return Value(py_strip(v.str(), a.get(0, "chars", nullptr), StripSide::Both));
}

Value apply_named_filter(const std::string& name, const Value& v, const Args& rest) {
    FilterFn f = find_filter(name);
    if (!f) throw EvalError("unknown filter '" + name + "'");
    return f(v, rest);
}

bool apply_named_test(const std::string& name, const Value& v, const Args& rest) {
    TestFn t = find_test(name);
    if (!t) throw EvalError("unknown test '" + name + "'");
    return t(v, rest);
}

// Arguments after the first `skip` positionals, for the filter or test named by a map/select argument.
Args tail_args(const Args& a, size_t skip) {
    Args rest;
    if (a.pos.size() > skip) rest.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(skip), a.pos.end());
    return rest;
}

Value f_map(const Value& v, const Args& a) {
    List out;
    const Value attribute = a.kwarg("attribute", nullptr);
    if (!attribute.is_none()) {
        a.expect("map", 0, {"attribute", "default"});
        const Value dflt = a.kwarg("default");
        for (const Value& item : iterate(v)) {
            Value x = get_path(item, attribute.str());
            out.push_back(x.is_undefined() && !dflt.is_undefined() ? dflt : x);
        }
        return Value(std::move(out), SeqKind::Iterator);
    }
    if (a.pos.empty() || !a.kw.empty()) throw EvalError("map() needs a filter name or attribute=");
    const std::string name = a.pos[0].as_string("map() filter name");
    const Args rest = tail_args(a, 1);
    for (const Value& item : iterate(v)) out.push_back(apply_named_filter(name, item, rest));
    return Value(std::move(out), SeqKind::Iterator);
}

// select/reject (by_attr false) and selectattr/rejectattr (by_attr true).
Value select_impl(const Value& v, const Args& a, bool by_attr, bool keep) {
    const char* name = by_attr ? (keep ? "selectattr" : "rejectattr") : (keep ? "select" : "reject");
    a.expect(name, SIZE_MAX, {});
    const size_t test_pos = by_attr ? 1 : 0;
    const std::string attr = by_attr ? a.get(0, "").as_string(std::string(name) + "() attribute") : "";
    const bool has_test = a.pos.size() > test_pos;
    const std::string test = has_test ? a.pos[test_pos].as_string("test name") : "";
    const Args rest = tail_args(a, test_pos + 1);
    List out;
    for (const Value& item : iterate(v)) {
        const Value x = by_attr ? get_path(item, attr) : item;
        const bool ok = has_test ? apply_named_test(test, x, rest) : x.truthy();
        if (ok == keep) out.push_back(item);
    }
    return Value(std::move(out), SeqKind::Iterator);
}

Value f_sort(const Value& v, const Args& a) {
    a.expect("sort", 3, {"reverse", "case_sensitive", "attribute"});
    const bool reverse = a.get(0, "reverse", false).truthy();
    const bool case_sensitive = a.get(1, "case_sensitive", false).truthy();
    const Value attribute = a.get(2, "attribute", nullptr);
    List items = iterate(v);
    auto key = [&](const Value& item) {
        Value k = attribute.is_none() ? item : get_path(item, attribute.str());
        return k.is_string() && !case_sensitive ? Value(py_lower(k.as_string())) : k;
    };
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
        return reverse ? less_than(key(y), key(x)) : less_than(key(x), key(y));
    });
    return Value(std::move(items));
}

Value f_indent(const Value& v, const Args& a) {
    a.expect("indent", 3, {"width", "first", "blank"});
    const Value width = a.get(0, "width", Value(4));
    const int64_t spaces = width.is_string() ? 0 : std::max<int64_t>(0, width.as_int("indent width"));
    check_string_size(static_cast<uint64_t>(spaces), "the indent filter");
    const std::string pad =
        width.is_string() ? width.as_string() : std::string(static_cast<size_t>(spaces), ' ');
    const bool first = a.get(1, "first", false).truthy();
    const bool blank = a.get(2, "blank", false).truthy();
    const std::string s = v.str();
    std::string out;
    size_t pos = 0;
    for (size_t line = 0; pos <= s.size(); ++line) {
        const size_t nl = s.find('\n', pos);
        const std::string text = s.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
        if (line > 0) out += '\n';
        if ((line > 0 || first) && (blank || !text.empty())) out += pad;
        out += text;
        check_string_size(out.size(), "the indent filter");
        if (nl == std::string::npos) break;
        pos = nl + 1;
    }
    return Value(std::move(out));
}

const std::pair<std::string_view, FilterFn> kFilters[] = {
    {"abs", f_abs},
    {"capitalize",
     [](const Value& v, const Args& a) { return f_string_case(v, a, "capitalize", py_capitalize); }},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"first", f_first},
    {"float", f_float},
    {"indent", f_indent},
    {"int", f_int},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"length", f_length},
    {"list", f_list},
    {"lower", [](const Value& v, const Args& a) { return f_string_case(v, a, "lower", py_lower); }},
    {"map", f_map},
    {"reject", [](const Value& v, const Args& a) { return select_impl(v, a, false, false); }},
    {"rejectattr", [](const Value& v, const Args& a) { return select_impl(v, a, true, false); }},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"safe", f_safe},
    {"select", [](const Value& v, const Args& a) { return select_impl(v, a, false, true); }},
    {"selectattr", [](const Value& v, const Args& a) { return select_impl(v, a, true, true); }},
    {"sort", f_sort},
    {"string", f_string},
    {"title", [](const Value& v, const Args& a) { return f_string_case(v, a, "title", py_title); }},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"upper", [](const Value& v, const Args& a) { return f_string_case(v, a, "upper", py_upper); }},
};

const Value& test_arg(const Args& a, const char* name) {
    if (a.pos.size() != 1 || !a.kw.empty())
        throw EvalError(std::string("test '") + name + "' takes one argument");
    return a.pos[0];
}

bool no_args(const Args& a, const char* name) {
    a.expect(name, 0, {});
    return true;
}

bool is_mapping(const Value& v) {
    return v.is_dict() && !v.as_dict().is_namespace;
}

// Python's iter(v) succeeds (Jinja's Undefined iterates as empty).
bool is_iterable(const Value& v) {
    return v.is_undefined() || v.is_string() || v.is_list() || is_mapping(v);
}

// Python's str(v).islower() / isupper().
bool is_case(const Value& v, bool upper) {
    const std::string s = v.str();
    return (upper ? py_upper(s) : py_lower(s)) == s && (upper ? py_lower(s) : py_upper(s)) != s;
}

const std::pair<std::string_view, TestFn> kTests[] = {
    {"defined", [](const Value& v, const Args& a) { return no_args(a, "defined") && !v.is_undefined(); }},
    {"undefined", [](const Value& v, const Args& a) { return no_args(a, "undefined") && v.is_undefined(); }},
    {"none", [](const Value& v, const Args& a) { return no_args(a, "none") && v.is_none(); }},
    {"boolean", [](const Value& v, const Args& a) { return no_args(a, "boolean") && v.is_bool(); }},
    {"true", [](const Value& v, const Args& a) { return no_args(a, "true") && v.is_bool() && v.as_bool(); }},
    {"false",
     [](const Value& v, const Args& a) { return no_args(a, "false") && v.is_bool() && !v.as_bool(); }},
    {"integer", [](const Value& v, const Args& a) { return no_args(a, "integer") && v.is_int(); }},
    {"float", [](const Value& v, const Args& a) { return no_args(a, "float") && v.is_float(); }},
    {"number", [](const Value& v, const Args& a) { return no_args(a, "number") && v.is_number(); }},
    {"string", [](const Value& v, const Args& a) { return no_args(a, "string") && v.is_string(); }},
    {"mapping",
     [](const Value& v, const Args& a) {
         return no_args(a, "mapping") && v.is_dict() && !v.as_dict().is_namespace;
     }},
    {"iterable", [](const Value& v, const Args& a) { return no_args(a, "iterable") && is_iterable(v); }},
    {"sequence",
     [](const Value& v, const Args& a) {
         return no_args(a, "sequence") &&
                (v.is_undefined() || v.is_string() || v.is_plain_sequence() || is_mapping(v));
     }},
    {"callable",
     [](const Value& v, const Args& a) {
         return no_args(a, "callable") && (v.is_function() || v.is_undefined());
     }},
    {"odd", [](const Value& v,
               const Args& a) { return no_args(a, "odd") && binary_op("%", v, Value(2)).as_number() == 1; }},
    {"even",
     [](const Value& v, const Args& a) {
         return no_args(a, "even") && binary_op("%", v, Value(2)).as_number() == 0;
     }},
    {"divisibleby",
     [](const Value& v, const Args& a) {
         return binary_op("%", v, test_arg(a, "divisibleby")).as_number() == 0;
     }},
    {"lower", [](const Value& v, const Args& a) { return no_args(a, "lower") && is_case(v, false); }},
    {"upper", [](const Value& v, const Args& a) { return no_args(a, "upper") && is_case(v, true); }},
    {"in", [](const Value& v, const Args& a) { return contains(test_arg(a, "in"), v); }},
    {"eq", [](const Value& v, const Args& a) { return equals(v, test_arg(a, "eq")); }},
    {"equalto", [](const Value& v, const Args& a) { return equals(v, test_arg(a, "equalto")); }},
    {"==", [](const Value& v, const Args& a) { return equals(v, test_arg(a, "==")); }},
    {"ne", [](const Value& v, const Args& a) { return !equals(v, test_arg(a, "ne")); }},
    {"!=", [](const Value& v, const Args& a) { return !equals(v, test_arg(a, "!=")); }},
    {"lt", [](const Value& v, const Args& a) { return less_than(v, test_arg(a, "lt")); }},
    {"lessthan", [](const Value& v, const Args& a) { return less_than(v, test_arg(a, "lessthan")); }},
    {"gt", [](const Value& v, const Args& a) { return less_than(test_arg(a, "gt"), v); }},
    {"greaterthan", [](const Value& v, const Args& a) { return less_than(test_arg(a, "greaterthan"), v); }},
    {"le", [](const Value& v, const Args& a) { return !less_than(test_arg(a, "le"), v); }},
    {"ge", [](const Value& v, const Args& a) { return !less_than(v, test_arg(a, "ge")); }},
};

}  // namespace

FilterFn find_filter(std::string_view name) {
    for (const auto& [n, f] : kFilters)
        if (n == name) return f;
    return nullptr;
}

TestFn find_test(std::string_view name) {
    for (const auto& [n, t] : kTests)
        if (n == name) return t;
    return nullptr;
}

}  // namespace minfer::jinja
