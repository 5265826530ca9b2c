#include "tokenizer/template/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace minfer::jinja {

namespace {

thread_local WorkScope* t_work = nullptr;

}  // namespace

WorkScope::WorkScope() : outer_(t_work) {
    t_work = this;
}

WorkScope::~WorkScope() {
    t_work = outer_;
}

void charge_work(uint64_t units, std::string_view construct) {
    if (!t_work || (t_work->used_ += units) <= kMaxWork) return;
    throw EvalError(std::string(construct) + " exceeds the rendering's work budget of " +
                    std::to_string(kMaxWork >> 20) +
                    " Mi units (bytes built, compared or searched; list items count 16), the template limit");
}

void check_string_size(size_t bytes, std::string_view construct) {
    if (bytes > kMaxStringBytes)
        throw EvalError(std::string(construct) + " makes a string of more than " +
                        std::to_string(kMaxStringBytes >> 20) + " MiB, the template limit");
}

void check_list_size(size_t items, std::string_view construct) {
    if (items > kMaxListItems)
        throw EvalError(std::string(construct) + " makes a list of more than " +
                        std::to_string(kMaxListItems) + " items, the template limit");
}

Value::Value(std::string s) {
    check_string_size(s.size(), "a string value");
    charge_work(s.size(), "building a string");
    v_ = std::make_shared<const std::string>(std::move(s));
}

Value::Value(List l, SeqKind kind) : kind_(kind) {
    check_list_size(l.size(), "a list value");
    charge_items(l.size(), "building a list");
    depth_ = 1;
    for (const Value& item : l) set_nesting(item);
    v_ = std::make_shared<const List>(std::move(l));
}

Value::Value(std::shared_ptr<Dict> d) {
    check_list_size(d->entries.size(), "a dict value");
    charge_items(d->entries.size(), "building a dict");
    depth_ = 1;
    for (const auto& [k, v] : d->entries) set_nesting(v);
    if (d->is_namespace && holds_namespace_)
        throw EvalError("a namespace cannot hold another namespace (nor a list or dict holding one)");
    holds_namespace_ = holds_namespace_ || d->is_namespace;
    v_ = std::move(d);
}

// Raises this container's depth to hold `child`, whose own depth is already bounded.
void Value::set_nesting(const Value& child) {
    if (child.depth_ + 1 > depth_) {
        if (child.depth_ + 1 > kMaxValueDepth)
            throw EvalError("lists and dicts nested more than " + std::to_string(kMaxValueDepth) +
                            " levels deep");
        depth_ = static_cast<uint16_t>(child.depth_ + 1);
    }
    holds_namespace_ = holds_namespace_ || child.holds_namespace_;
}

int64_t Value::as_int(std::string_view what) const {
    if (is_int()) return std::get<int64_t>(v_);
    if (is_bool()) return as_bool() ? 1 : 0;
    throw EvalError(std::string(what) + " must be an integer, not " + type_name());
}

double Value::as_number(std::string_view what) const {
    if (is_float()) return std::get<double>(v_);
    if (is_int() || is_bool()) return static_cast<double>(as_int());
    throw EvalError(std::string(what) + " must be a number, not " + type_name());
}

const std::string& Value::as_string(std::string_view what) const {
    if (!is_string()) throw EvalError(std::string(what) + " must be a string, not " + type_name());
    return *std::get<std::shared_ptr<const std::string>>(v_);
}

const List& Value::as_list(std::string_view what) const {
    if (!is_list()) throw EvalError(std::string(what) + " must be a list, not " + type_name());
    return *std::get<std::shared_ptr<const List>>(v_);
}

Dict& Value::as_dict(std::string_view what) const {
    if (!is_dict()) throw EvalError(std::string(what) + " must be a dict, not " + type_name());
    return *std::get<std::shared_ptr<Dict>>(v_);
}

const Function& Value::as_function() const {
    if (!is_function()) throw EvalError("'" + type_name() + "' object is not callable");
    return *std::get<std::shared_ptr<const Function>>(v_);
}

bool Value::truthy() const {
    switch (type()) {
        case Type::Undefined:
        case Type::None:
            return false;
        case Type::Bool:
            return as_bool();
        case Type::Int:
            return as_int() != 0;
        case Type::Float:
            return as_number() != 0.0;
        case Type::String:
            return !as_string().empty();
        case Type::List:
            return is_iterator() || !as_list().empty();
        case Type::Dict:
            return as_dict().is_namespace || !as_dict().entries.empty();
        case Type::Function:
            return true;
    }
    return false;
}

std::string Value::type_name() const {
    switch (type()) {
        case Type::Undefined:
            return "Undefined";
        case Type::None:
            return "NoneType";
        case Type::Bool:
            return "bool";
        case Type::Int:
            return "int";
        case Type::Float:
            return "float";
        case Type::String:
            return "str";
        case Type::List:
            return kind_ == SeqKind::Tuple      ? "tuple"
                   : kind_ == SeqKind::Iterator ? "generator"
                   : kind_ == SeqKind::View     ? "dict_view"
                                                : "list";
        case Type::Dict:
            return as_dict().is_namespace ? "Namespace" : "dict";
        case Type::Function:
            return "function";
    }
    return "?";
}

std::string Value::object_name() const {
    std::string s(1, '\'');
    s += type_name();
    s += " object'";
    return s;
}

namespace {

std::string repr_string(const std::string& s) {
    const char quote = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
    std::string out(1, quote);
    for (unsigned char c : s) {
        if (c == quote || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c == '\t') {
            out += "\\t";
        } else if (c < 0x20 || c == 0x7f) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
        } else {
            out += static_cast<char>(c);
        }
    }
    return out + quote;
}

std::string repr_sequence(const List& items, bool tuple) {
    std::string out = tuple ? "(" : "[";
    for (size_t i = 0; i < items.size(); ++i) {
        out += (i ? ", " : "") + items[i].repr();
        check_string_size(out.size(), "printing a list");
    }
    if (tuple && items.size() == 1) out += ",";
    return out + (tuple ? ")" : "]");
}

std::string repr_dict(const Dict& d) {
    std::string out = "{";
    for (size_t i = 0; i < d.entries.size(); ++i) {
        out += (i ? ", " : "") + repr_string(d.entries[i].first) + ": " + d.entries[i].second.repr();
        check_string_size(out.size(), "printing a dict");
    }
    out += "}";
    return d.is_namespace ? "<Namespace " + out + ">" : out;
}

}  // namespace

std::string Value::str() const {
    switch (type()) {
        case Type::Undefined:
            return "";
        case Type::String:
            return as_string();
        default:
            return repr();
    }
}

std::string Value::repr() const {
    switch (type()) {
        case Type::Undefined:
            return "Undefined";
        case Type::None:
            return "None";
        case Type::Bool:
            return as_bool() ? "True" : "False";
        case Type::Int:
            return std::to_string(as_int());
        case Type::Float:
            return format_float(as_number());
        case Type::String:
            return repr_string(as_string());
        case Type::List:
            if (is_iterator())
                throw EvalError("printing a generator (the result of map, select, ...) is unsupported");
            if (!is_plain_sequence())
                throw EvalError("printing a dict view (keys(), values(), items()) is unsupported");
            return repr_sequence(as_list(), is_tuple());
        case Type::Dict:
            return repr_dict(as_dict());
        case Type::Function:
            return "<function " + as_function().name + ">";
    }
    return "";
}

const Value* Dict::find(std::string_view key) const {
    charge_items(entries.size(), "a dict lookup");
    for (const auto& [k, v] : entries)
        if (k == key) return &v;
    return nullptr;
}

void Dict::set(const std::string& key, Value v) {
    charge_items(entries.size(), "a dict assignment");
    for (auto& [k, old] : entries) {
        if (k == key) {
            old = std::move(v);
            return;
        }
    }
    entries.emplace_back(key, std::move(v));
}

Value Args::get(size_t i, std::string_view name, Value dflt) const {
    if (i < pos.size()) return pos[i];
    return kwarg(name, std::move(dflt));
}

Value Args::kwarg(std::string_view name, Value dflt) const {
    for (const auto& [k, v] : kw)
        if (k == name) return v;
    return dflt;
}

void Args::expect(std::string_view fn, size_t max_pos, std::initializer_list<std::string_view> names) const {
    if (pos.size() > max_pos)
        throw EvalError(std::string(fn) + "() takes at most " + std::to_string(max_pos) +
                        " positional arguments (" + std::to_string(pos.size()) + " given)");
    for (const auto& [k, v] : kw)
        if (std::find(names.begin(), names.end(), k) == names.end())
            throw EvalError(std::string(fn) + "() got an unexpected keyword argument '" + k + "'");
}

Value make_dict(std::vector<std::pair<std::string, Value>> entries) {
    auto d = std::make_shared<Dict>();
    d->entries = std::move(entries);
    return Value(std::move(d));
}

namespace {

bool dicts_equal(const Dict& a, const Dict& b) {
    if (a.entries.size() != b.entries.size()) return false;
    for (const auto& [k, v] : a.entries) {
        const Value* other = b.find(k);
        if (!other || !equals(v, *other)) return false;
    }
    return true;
}

}  // namespace

bool equals(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return a.as_number() == b.as_number();
        return a.as_int() == b.as_int();
    }
    if (a.type() != b.type()) return false;
    switch (a.type()) {
        case Value::Type::Undefined:
        case Value::Type::None:
            return true;
        case Value::Type::String:
            charge_work(a.as_string().size(), "comparing strings");
            return a.as_string() == b.as_string();
        case Value::Type::List: {
            charge_items(a.as_list().size(), "comparing lists");
            if (!a.is_plain_sequence() || !b.is_plain_sequence()) return &a.as_list() == &b.as_list();
            if (a.is_tuple() != b.is_tuple()) return false;
            const List& x = a.as_list();
            const List& y = b.as_list();
            if (x.size() != y.size()) return false;
            for (size_t i = 0; i < x.size(); ++i)
                if (!equals(x[i], y[i])) return false;
            return true;
        }
        case Value::Type::Dict:
            return &a.as_dict() == &b.as_dict() || dicts_equal(a.as_dict(), b.as_dict());
        case Value::Type::Function:
            return &a.as_function() == &b.as_function();
        default:
            return false;
    }
}

bool less_than(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return a.as_number() < b.as_number();
        return a.as_int() < b.as_int();
    }
    if (a.is_string() && b.is_string()) {
        charge_work(a.as_string().size(), "comparing strings");
        return a.as_string() < b.as_string();
    }
    if (a.is_plain_sequence() && b.is_plain_sequence()) {
        charge_items(a.as_list().size(), "comparing lists");
        const List& x = a.as_list();
        const List& y = b.as_list();
        for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
            if (!equals(x[i], y[i])) return less_than(x[i], y[i]);
        }
        return x.size() < y.size();
    }
    throw EvalError("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() +
                    "'");
}

std::vector<size_t> utf8_boundaries(const std::string& s) {
    charge_work(s.size(), "splitting a string into characters");
    std::vector<size_t> out;
    out.reserve(s.size() + 1);
    for (size_t i = 0; i < s.size(); ++i)
        if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) out.push_back(i);
    out.push_back(s.size());
    return out;
}

size_t utf8_length(const std::string& s) {
    charge_work(s.size(), "measuring a string");
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
}

uint32_t decode_utf8(const std::string& s, size_t& i) {
    const auto c = static_cast<unsigned char>(s[i++]);
    const int extra = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
    uint32_t cp = extra == 3 ? c & 0x07 : extra == 2 ? c & 0x0F : extra == 1 ? c & 0x1F : c;
    for (int k = 0; k < extra && i < s.size(); ++k)
        cp = (cp << 6) | (static_cast<unsigned char>(s[i++]) & 0x3F);
    return cp;
}

namespace {

int64_t clamp_slice_bound(std::optional<int64_t> bound, int64_t n, int64_t lower, int64_t upper,
                          int64_t dflt) {
    if (!bound) return dflt;
    int64_t v = *bound < 0 ? *bound + n : *bound;
    return std::clamp(v, lower, upper);
}

}  // namespace

std::vector<int64_t> slice_indices(int64_t n, std::optional<int64_t> start, std::optional<int64_t> stop,
                                   std::optional<int64_t> step) {
    const int64_t st = step.value_or(1);
    if (st == 0) throw EvalError("slice step cannot be zero");
    const int64_t lower = st > 0 ? 0 : -1;
    const int64_t upper = st > 0 ? n : n - 1;
    const int64_t b = clamp_slice_bound(start, n, lower, upper, st > 0 ? lower : upper);
    const int64_t e = clamp_slice_bound(stop, n, lower, upper, st > 0 ? upper : lower);
    std::vector<int64_t> out;
    for (int64_t i = b; st > 0 ? i < e : i > e; i += st) out.push_back(i);
    return out;
}

std::string format_float(double d) {
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
    char buf[64];
    const auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
    const std::string sci(buf, res.ptr);
    const size_t epos = sci.find('e');
    const bool neg = sci[0] == '-';
    std::string digits;
    for (size_t i = neg ? 1 : 0; i < epos; ++i)
        if (sci[i] != '.') digits += sci[i];
    const int exp = std::stoi(sci.substr(epos + 1));
    std::string out = neg ? "-" : "";
    if (exp < -4 || exp >= 16) {
        out += digits.substr(0, 1);
        if (digits.size() > 1) out.append(".").append(digits, 1);
        std::snprintf(buf, sizeof buf, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
        return out + buf;
    }
    if (exp < 0) return out + "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    const size_t int_len = static_cast<size_t>(exp) + 1;
    if (digits.size() <= int_len) return out + digits + std::string(int_len - digits.size(), '0') + ".0";
    return out + digits.substr(0, int_len) + "." + digits.substr(int_len);
}

namespace {

// Appends `cp` as a JSON \u escape (a surrogate pair above U+FFFF).
void json_escape_code_point(uint32_t cp, std::string& out) {
    char buf[16];
    if (cp >= 0x10000) {
        cp -= 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
    } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", cp);
    }
    out += buf;
}

void json_string(const std::string& s, bool ensure_ascii, std::string& out) {
    out += '"';
    for (size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c >= 0x80) {
            if (!ensure_ascii) {
                out += s[i++];
                continue;
            }
            json_escape_code_point(decode_utf8(s, i), out);
            continue;
        }
        ++i;
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            case '\b':
                out += "\\b";
                break;
            case '\f':
                out += "\\f";
                break;
            default:
                if (c < 0x20)
                    json_escape_code_point(c, out);
                else
                    out += static_cast<char>(c);
        }
    }
    out += '"';
}

struct JsonWriter {
    const JsonOptions& opts;
    std::string item_sep;
    std::string key_sep;
    std::string out;

    void newline(int depth) {
        if (opts.indent < 0) return;
        check_string_size(out.size() + static_cast<size_t>(opts.indent) * static_cast<size_t>(depth),
                          "tojson");
        out += '\n';
        out.append(static_cast<size_t>(opts.indent * depth), ' ');
    }

    void write(const Value& v, int depth);
    void write_list(const List& items, int depth);
    void write_dict(const Dict& d, int depth);
};

void JsonWriter::write(const Value& v, int depth) {
    switch (v.type()) {
        case Value::Type::None:
            out += "null";
            break;
        case Value::Type::Bool:
            out += v.as_bool() ? "true" : "false";
            break;
        case Value::Type::Int:
            out += std::to_string(v.as_int());
            break;
        case Value::Type::Float: {
            const double d = v.as_number();
            out += std::isnan(d)   ? "NaN"
                   : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity")
                                   : format_float(d);
            break;
        }
        case Value::Type::String:
            json_string(v.as_string(), opts.ensure_ascii, out);
            break;
        case Value::Type::List:
            if (!v.is_plain_sequence())
                throw EvalError("Object of type " + v.type_name() + " is not JSON serializable");
            write_list(v.as_list(), depth);
            break;
        case Value::Type::Dict:
            if (v.as_dict().is_namespace)
                throw EvalError("Object of type Namespace is not JSON serializable");
            write_dict(v.as_dict(), depth);
            break;
        default:
            throw EvalError("Object of type " + v.type_name() + " is not JSON serializable");
    }
}

void JsonWriter::write_list(const List& items, int depth) {
    if (items.empty()) {
        out += "[]";
        return;
    }
    out += '[';
    for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        newline(depth + 1);
        write(items[i], depth + 1);
        check_string_size(out.size(), "tojson");
    }
    newline(depth);
    out += ']';
}

void JsonWriter::write_dict(const Dict& d, int depth) {
    if (d.entries.empty()) {
        out += "{}";
        return;
    }
    std::vector<const std::pair<std::string, Value>*> entries;
    for (const auto& e : d.entries) entries.push_back(&e);
    if (opts.sort_keys)
        std::stable_sort(entries.begin(), entries.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
    out += '{';
    for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += item_sep;
        newline(depth + 1);
        json_string(entries[i]->first, opts.ensure_ascii, out);
        out += key_sep;
        write(entries[i]->second, depth + 1);
        check_string_size(out.size(), "tojson");
    }
    newline(depth);
    out += '}';
}

}  // namespace

std::string to_json(const Value& v, const JsonOptions& opts) {
    JsonWriter w{opts, opts.indent < 0 ? ", " : ",", ": ", {}};
    if (opts.separators) {
        w.item_sep = opts.separators->first;
        w.key_sep = opts.separators->second;
    }
    w.write(v, 0);
    return std::move(w.out);
}

}  // namespace minfer::jinja
