// Python string helpers, methods of str and dict values, and the global functions of templates.
#include <algorithm>
#include <ctime>

#include "tokenizer/template/jinja_builtins.h"
#include "tokenizer/template/jinja_ops.h"

namespace minfer::jinja {

namespace {

bool is_py_space(uint32_t cp) {
    return (cp >= 9 && cp <= 13) || (cp >= 28 && cp <= 32) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

// Code points of `s` with their byte offsets (the last entry marks the end).
struct CodePoints {
    std::vector<uint32_t> cps;
    std::vector<size_t> offsets;

    explicit CodePoints(const std::string& s) {
        for (size_t i = 0; i < s.size();) {
            offsets.push_back(i);
            cps.push_back(decode_utf8(s, i));
        }
        offsets.push_back(s.size());
    }
};

// Scripts with upper/lower case outside ASCII. Their case mappings are not implemented, so converting
// such text fails instead of silently producing a prompt that differs from Python's.
bool has_non_ascii_case(uint32_t cp) {
    static const std::pair<uint32_t, uint32_t> ranges[] = {
        {0xB5, 0xB5},     {0xC0, 0x58F},    {0x10A0, 0x10FF}, {0x13A0, 0x13FF}, {0x1C80, 0x1CBF},
        {0x1E00, 0x1FFF}, {0x2100, 0x218F}, {0x24B6, 0x24E9}, {0x2C00, 0x2D2F}, {0xA640, 0xA69F},
        {0xA720, 0xA7FF}, {0xAB70, 0xABBF}, {0xFB00, 0xFB4F}, {0xFF21, 0xFF5A}, {0x10400, 0x1E95F},
    };
    for (const auto& [lo, hi] : ranges)
        if (cp >= lo && cp <= hi) return true;
    return false;
}

// Converts ASCII letters; `upper_at(i, prev)` says whether code point i (after `prev`) becomes upper case.
template <typename UpperAt>
std::string convert_case(const std::string& s, UpperAt upper_at) {
    const CodePoints cp(s);
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < cp.cps.size(); ++i) {
        const uint32_t c = cp.cps[i];
        if (c >= 0x80) {
            if (has_non_ascii_case(c))
                throw EvalError("case conversion of non-ASCII letters is not supported");
            out.append(s, cp.offsets[i], cp.offsets[i + 1] - cp.offsets[i]);
            continue;
        }
        const bool upper = upper_at(i, i ? cp.cps[i - 1] : 0);
        const auto ch = static_cast<char>(c);
        out += upper ? static_cast<char>(std::toupper(ch)) : static_cast<char>(std::tolower(ch));
    }
    return out;
}

}  // namespace

std::string py_strip(const std::string& s, const Value& chars, StripSide side) {
    const CodePoints cp(s);
    std::vector<uint32_t> set;
    const bool whitespace = chars.is_none() || chars.is_undefined();
    if (!whitespace) set = CodePoints(chars.as_string("strip() argument")).cps;
    auto strip = [&](uint32_t c) {
        return whitespace ? is_py_space(c) : std::find(set.begin(), set.end(), c) != set.end();
    };
    size_t b = 0;
    size_t e = cp.cps.size();
    if (side != StripSide::Right)
        while (b < e && strip(cp.cps[b])) ++b;
    if (side != StripSide::Left)
        while (e > b && strip(cp.cps[e - 1])) --e;
    return s.substr(cp.offsets[b], cp.offsets[e] - cp.offsets[b]);
}

std::string py_upper(const std::string& s) {
    return convert_case(s, [](size_t, uint32_t) { return true; });
}

std::string py_lower(const std::string& s) {
    return convert_case(s, [](size_t, uint32_t) { return false; });
}

std::string py_capitalize(const std::string& s) {
    return convert_case(s, [](size_t i, uint32_t) { return i == 0; });
}

std::string py_title(const std::string& s) {
    return convert_case(s, [](size_t i, uint32_t prev) {
        return i == 0 || prev == '-' || prev == '(' || prev == '{' || prev == '[' || prev == '<' ||
               is_py_space(prev);
    });
}

std::string py_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
    std::string out;
    if (from.empty()) {
        const std::vector<size_t> b = utf8_boundaries(s);
        for (size_t i = 0; i < b.size(); ++i) {
            if (count < 0 || static_cast<int64_t>(i) < count) out += to;
            if (i + 1 < b.size()) out.append(s, b[i], b[i + 1] - b[i]);
            check_string_size(out.size(), "replace");
        }
        return out;
    }
    size_t pos = 0;
    for (int64_t n = 0; count < 0 || n < count; ++n) {
        const size_t hit = s.find(from, pos);
        if (hit == std::string::npos) break;
        out.append(s, pos, hit - pos);
        out += to;
        check_string_size(out.size(), "replace");
        pos = hit + from.size();
    }
    return out + s.substr(pos);
}

namespace {

using MethodFn = Value (*)(const Value& self, const Args& args);

// s[start:end] as str.startswith/endswith/find see it.
std::string method_window(const Value& self, const Args& a, size_t first_index) {
    const Value start = a.get(first_index, "start", nullptr);
    const Value end = a.get(first_index + 1, "end", nullptr);
    if (start.is_none() && end.is_none()) return self.as_string();
    auto bound = [](const Value& v) {
        return v.is_none() ? std::nullopt : std::optional<int64_t>(v.as_int("index"));
    };
    return get_slice(self, bound(start), bound(end), std::nullopt).as_string();
}

bool affix_match(const Value& self, const Args& a, bool prefix) {
    a.expect(prefix ? "startswith" : "endswith", 3, {});
    const std::string s = method_window(self, a, 1);
    const Value affix = a.get(0, "");
    const List options = affix.is_list() ? affix.as_list() : List{affix};
    for (const Value& o : options) {
        const std::string& x = o.as_string(prefix ? "startswith() argument" : "endswith() argument");
        if (x.size() <= s.size() && s.compare(prefix ? 0 : s.size() - x.size(), x.size(), x) == 0)
            return true;
    }
    return false;
}

List split_whitespace(const std::string& s, int64_t maxsplit) {
    const CodePoints cp(s);
    List out;
    size_t i = 0;
    const size_t n = cp.cps.size();
    for (;;) {
        while (i < n && is_py_space(cp.cps[i])) ++i;
        if (i == n) return out;
        if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
            out.emplace_back(s.substr(cp.offsets[i]));
            return out;
        }
        const size_t start = i;
        while (i < n && !is_py_space(cp.cps[i])) ++i;
        out.emplace_back(s.substr(cp.offsets[start], cp.offsets[i] - cp.offsets[start]));
        check_list_size(out.size(), "split()");
    }
}

Value str_split(const Value& self, const Args& a) {
    a.expect("split", 2, {"sep", "maxsplit"});
    const std::string& s = self.as_string();
    const Value sep = a.get(0, "sep", nullptr);
    const int64_t maxsplit = a.get(1, "maxsplit", Value(-1)).as_int("maxsplit");
    if (sep.is_none()) return Value(split_whitespace(s, maxsplit));
    const std::string& d = sep.as_string("split() separator");
    if (d.empty()) throw EvalError("split(): empty separator");
    List out;
    size_t pos = 0;
    for (size_t hit; (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) &&
                     (hit = s.find(d, pos)) != std::string::npos;
         pos = hit + d.size()) {
        out.emplace_back(s.substr(pos, hit - pos));
        check_list_size(out.size(), "split()");
    }
    out.emplace_back(s.substr(pos));
    return Value(std::move(out));
}

Value str_strip_impl(const Value& self, const Args& a, StripSide side, const char* name) {
    a.expect(name, 1, {"chars"});
    return Value(py_strip(self.as_string(), a.get(0, "chars", nullptr), side));
}

Value str_find(const Value& self, const Args& a) {
    a.expect("find", 3, {});
    const std::string s = method_window(self, a, 1);
    charge_work(self.as_string().size(), "find()");
    const size_t hit = s.find(a.get(0, "sub").as_string("find() argument"));
    if (hit == std::string::npos) return Value(-1);
    int64_t index = static_cast<int64_t>(utf8_length(s.substr(0, hit)));
    if (const Value start = a.get(1, "start", nullptr); !start.is_none()) {
        const int64_t n = static_cast<int64_t>(utf8_length(self.as_string()));
        index += std::clamp(start.as_int() < 0 ? start.as_int() + n : start.as_int(), int64_t{0}, n);
    }
    return Value(index);
}

Value str_count(const Value& self, const Args& a) {
    a.expect("count", 1, {});
    const std::string& s = self.as_string();
    const std::string sub = a.get(0, "sub").as_string("count() argument");
    if (sub.empty()) return Value(static_cast<int64_t>(utf8_length(s)) + 1);
    charge_work(s.size(), "count()");
    int64_t n = 0;
    for (size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size())) ++n;
    return Value(n);
}

Value str_join(const Value& self, const Args& a) {
    a.expect("join", 1, {});
    std::string out;
    const List items = iterate(a.get(0, "iterable"));
    for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += self.as_string();
        out += items[i].as_string("join() item");
        check_string_size(out.size(), "join()");
    }
    return Value(std::move(out));
}

Value str_replace(const Value& self, const Args& a) {
    a.expect("replace", 3, {});
    return Value(py_replace(self.as_string(), a.get(0, "old").as_string("replace() argument"),
                            a.get(1, "new").as_string("replace() argument"),
                            a.get(2, "count", Value(-1)).as_int()));
}

Value str_case(const Value& self, const Args& a, const char* name,
               std::string (*convert)(const std::string&)) {
    a.expect(name, 0, {});
    return Value(convert(self.as_string()));
}

Value dict_items(const Value& self, const Args& a) {
    a.expect("items", 0, {});
    List out;
    for (const auto& [k, v] : self.as_dict().entries) out.emplace_back(List{Value(k), v}, SeqKind::Tuple);
    return Value(std::move(out), SeqKind::View);
}

Value dict_keys(const Value& self, const Args& a) {
    a.expect("keys", 0, {});
    return Value(iterate(self), SeqKind::View);
}

Value dict_values(const Value& self, const Args& a) {
    a.expect("values", 0, {});
    List out;
    for (const auto& [k, v] : self.as_dict().entries) out.push_back(v);
    return Value(std::move(out), SeqKind::View);
}

Value dict_get(const Value& self, const Args& a) {
    a.expect("get", 2, {});
    const Value key = a.get(0, "key");
    const Value* v = key.is_string() ? self.as_dict().find(key.as_string()) : nullptr;
    return v ? *v : a.get(1, "default", nullptr);
}

const std::pair<std::string_view, MethodFn> kStrMethods[] = {
    {"startswith", [](const Value& s, const Args& a) { return Value(affix_match(s, a, true)); }},
    {"endswith", [](const Value& s, const Args& a) { return Value(affix_match(s, a, false)); }},
    {"split", str_split},
    {"strip", [](const Value& s, const Args& a) { return str_strip_impl(s, a, StripSide::Both, "strip"); }},
    {"lstrip", [](const Value& s, const Args& a) { return str_strip_impl(s, a, StripSide::Left, "lstrip"); }},
    {"rstrip",
     [](const Value& s, const Args& a) { return str_strip_impl(s, a, StripSide::Right, "rstrip"); }},
    {"find", str_find},
    {"count", str_count},
    {"join", str_join},
    {"replace", str_replace},
    {"upper", [](const Value& s, const Args& a) { return str_case(s, a, "upper", py_upper); }},
    {"lower", [](const Value& s, const Args& a) { return str_case(s, a, "lower", py_lower); }},
    {"capitalize", [](const Value& s, const Args& a) { return str_case(s, a, "capitalize", py_capitalize); }},
};

const std::pair<std::string_view, MethodFn> kDictMethods[] = {
    {"items", dict_items},
    {"keys", dict_keys},
    {"values", dict_values},
    {"get", dict_get},
};

Value list_count(const Value& self, const Args& a) {
    a.expect("count", 1, {});
    const Value x = a.get(0, "value");
    const List& items = self.as_list();
    charge_items(items.size(), "count()");
    return Value(static_cast<int64_t>(
        std::count_if(items.begin(), items.end(), [&](const Value& v) { return equals(v, x); })));
}

Value list_index(const Value& self, const Args& a) {
    a.expect("index", 1, {});
    const Value x = a.get(0, "value");
    const List& items = self.as_list();
    charge_items(items.size(), "index()");
    for (size_t i = 0; i < items.size(); ++i)
        if (equals(items[i], x)) return Value(static_cast<int64_t>(i));
    throw EvalError(x.repr() + " is not in list");
}

const std::pair<std::string_view, MethodFn> kListMethods[] = {
    {"count", list_count},
    {"index", list_index},
};

template <size_t N>
MethodFn lookup(const std::pair<std::string_view, MethodFn> (&table)[N], std::string_view name) {
    for (const auto& [n, fn] : table)
        if (n == name) return fn;
    return nullptr;
}

}  // namespace

Value find_method(const Value& self, const std::string& name) {
    MethodFn fn = nullptr;
    if (self.is_string()) fn = lookup(kStrMethods, name);
    if (self.is_dict() && !self.as_dict().is_namespace) fn = lookup(kDictMethods, name);
    if (self.is_plain_sequence()) fn = lookup(kListMethods, name);
    if (!fn) return Undefined{self.object_name() + " has no attribute '" + name + "'"};
    return Value(Function{self.type_name() + "." + name, [self, fn](const Args& a) { return fn(self, a); }});
}

namespace {

Value range_fn(const Args& a) {
    a.expect("range", 3, {});
    if (a.pos.empty()) throw EvalError("range() expects at least 1 argument");
    const bool one = a.pos.size() == 1;
    const int64_t start = one ? 0 : a.pos[0].as_int("range() argument");
    const int64_t stop = (one ? a.pos[0] : a.pos[1]).as_int("range() argument");
    const int64_t step = a.pos.size() == 3 ? a.pos[2].as_int("range() argument") : 1;
    if (step == 0) throw EvalError("range() arg 3 must not be zero");
    List out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (out.size() >= 100000) throw EvalError("range() too large");
        out.emplace_back(i);
    }
    return Value(std::move(out));
}

Value make_mapping(const Args& a, bool is_namespace, const char* fn) {
    auto d = std::make_shared<Dict>();
    d->is_namespace = is_namespace;
    for (const Value& p : a.pos)
        for (const auto& [k, v] : p.as_dict(std::string(fn) + "() positional argument").entries) d->set(k, v);
    for (const auto& [k, v] : a.kw) d->set(k, v);
    return Value(std::move(d));
}

Value raise_exception_fn(const Args& a) {
    a.expect("raise_exception", 1, {});
    throw Error("chat template raised an exception: " + a.get(0, "message").str());
}

Value strftime_now_fn(const Args& a) {
    a.expect("strftime_now", 1, {});
    const std::string fmt = a.get(0, "format").as_string("strftime_now() argument");
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[256];
    const size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
    if (n == 0 && !fmt.empty()) throw EvalError("strftime_now(): bad or too long format '" + fmt + "'");
    return Value(std::string(buf, n));
}

}  // namespace

std::vector<std::pair<std::string, Value>> builtin_globals() {
    return {
        {"range", Value(Function{"range", range_fn})},
        {"namespace",
         Value(Function{"namespace", [](const Args& a) { return make_mapping(a, true, "namespace"); }})},
        {"dict", Value(Function{"dict", [](const Args& a) { return make_mapping(a, false, "dict"); }})},
        {"raise_exception", Value(Function{"raise_exception", raise_exception_fn})},
        {"strftime_now", Value(Function{"strftime_now", strftime_now_fn})},
    };
}

}  // namespace minfer::jinja
