// Dynamic values of the chat-template interpreter. They follow Python's semantics as Jinja2 exposes
// them: undefined, none, bool, int, float, str (UTF-8, indexed by code point), list/tuple, dict
// (insertion-ordered) and callables, with Python's str()/repr() printing, truthiness and equality.
// Filters that return Python generators in Jinja (map, select, ...) return iterator sequences, which
// behave like generators: always true, no len(), no indexing, and not printable. dict.keys(), values()
// and items() return views: sized and iterable, but neither indexable nor printable.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/template/jinja_limits.h"
#include "util/error.h"
#include "util/utf8.h"

namespace minfer::jinja {

using minfer::append_utf8;

// A failure while evaluating (bad operand types, bad arguments). The evaluator adds the template line.
struct EvalError : Error {
    using Error::Error;
};

class Value;
using List = std::vector<Value>;
struct Dict;
struct Args;

// A callable value: a builtin, a bound method or a macro. `name` is used in error messages.
struct Function {
    std::string name;
    std::function<Value(const Args&)> call;
};

// What an undefined value remembers for error messages, e.g. "'foo' is undefined".
struct Undefined {
    std::string reason;
};

// How a sequence value behaves: a Python list, a tuple, a generator/iterator or a dict view.
enum class SeqKind : uint8_t { List, Tuple, Iterator, View };

class Value {
  public:
    enum class Type { Undefined, None, Bool, Int, Float, String, List, Dict, Function };

    Value() : v_(Undefined{}) {}
    Value(Undefined u) : v_(std::move(u)) {}
    Value(std::nullptr_t) : v_(nullptr) {}
    Value(bool b) : v_(b) {}
    Value(int i) : v_(int64_t{i}) {}
    Value(int64_t i) : v_(i) {}
    Value(double d) : v_(d) {}
    Value(std::string s);  // throws EvalError above kMaxStringBytes
    Value(const char* s) : Value(std::string(s)) {}
    Value(List l, SeqKind kind = SeqKind::List);  // throws EvalError above kMaxListItems or kMaxValueDepth
    Value(std::shared_ptr<Dict> d);               // likewise
    Value(Function f) : v_(std::make_shared<const Function>(std::move(f))) {}

    // Throws EvalError when `j` nests deeper than kMaxValueDepth.
    template <typename Json>
    static Value from_json(const Json& j, int depth = 0);

    Type type() const { return static_cast<Type>(v_.index()); }
    bool is_undefined() const { return type() == Type::Undefined; }
    bool is_none() const { return type() == Type::None; }
    bool is_bool() const { return type() == Type::Bool; }
    bool is_int() const { return type() == Type::Int; }
    bool is_float() const { return type() == Type::Float; }
    bool is_number() const { return is_int() || is_float() || is_bool(); }
    bool is_string() const { return type() == Type::String; }
    bool is_list() const { return type() == Type::List; }
    bool is_tuple() const { return is_list() && kind_ == SeqKind::Tuple; }
    bool is_iterator() const { return is_list() && kind_ == SeqKind::Iterator; }
    bool is_plain_sequence() const {
        return is_list() && (kind_ == SeqKind::List || kind_ == SeqKind::Tuple);
    }
    SeqKind seq_kind() const { return kind_; }
    bool is_dict() const { return type() == Type::Dict; }
    bool is_function() const { return type() == Type::Function; }

    // Typed accessors: throw EvalError naming `what` and the actual type on a mismatch.
    bool as_bool() const { return std::get<bool>(v_); }
    int64_t as_int(std::string_view what = "value") const;  // int or bool
    double as_number(std::string_view what = "value") const;
    const std::string& as_string(std::string_view what = "value") const;
    const List& as_list(std::string_view what = "value") const;
    Dict& as_dict(std::string_view what = "value") const;
    const Function& as_function() const;
    const std::string& undefined_reason() const { return std::get<Undefined>(v_).reason; }
    // Levels of lists and dicts: 0 for a scalar, 1 for a list of scalars. Namespaces are the only
    // mutable values and may not hold another namespace, so this stays within 2 * kMaxValueDepth.
    int depth() const { return depth_; }
    bool holds_namespace() const { return holds_namespace_; }  // is or contains a namespace

    bool truthy() const;
    std::string str() const;   // Python str(): what {{ }} prints
    std::string repr() const;  // Python repr(): how items print inside lists and dicts
    std::string type_name() const;
    std::string object_name() const;  // "'dict object'", as Jinja names values in messages

  private:
    void set_nesting(const Value& child);

    // Strings are shared, so copies of a long string (a list of it, a loop over it) cost no memory.
    std::variant<Undefined, std::nullptr_t, bool, int64_t, double, std::shared_ptr<const std::string>,
                 std::shared_ptr<const List>, std::shared_ptr<Dict>, std::shared_ptr<const Function>>
        v_;
    SeqKind kind_ = SeqKind::List;
    uint16_t depth_ = 0;
    bool holds_namespace_ = false;
};

// Insertion-ordered string-keyed mapping. Namespaces (namespace()) are dicts whose attributes can be set.
struct Dict {
    std::vector<std::pair<std::string, Value>> entries;
    bool is_namespace = false;

    const Value* find(std::string_view key) const;
    void set(const std::string& key, Value v);
};

// Call arguments: positional then keyword.
struct Args {
    std::vector<Value> pos;
    std::vector<std::pair<std::string, Value>> kw;

    // Argument `i` given positionally or as keyword `name`; `dflt` when absent.
    Value get(size_t i, std::string_view name, Value dflt = {}) const;
    // Keyword argument `name` only; `dflt` when absent.
    Value kwarg(std::string_view name, Value dflt = {}) const;
    // Throws EvalError when more than `max_pos` positionals or a keyword outside `names` was given.
    void expect(std::string_view fn, size_t max_pos, std::initializer_list<std::string_view> names) const;
};

Value make_dict(std::vector<std::pair<std::string, Value>> entries = {});

bool equals(const Value& a, const Value& b);
// Python's `<` on numbers, strings or lists; EvalError for other types.
bool less_than(const Value& a, const Value& b);

// Code-point boundaries of a UTF-8 string: offsets of every code point plus the end offset.
std::vector<size_t> utf8_boundaries(const std::string& s);
size_t utf8_length(const std::string& s);
// Decodes the UTF-8 sequence at s[i], advancing i; a malformed lead byte decodes as itself.
uint32_t decode_utf8(const std::string& s, size_t& i);

// Indices selected by the Python slice [start:stop:step] of a sequence of length `n`.
std::vector<int64_t> slice_indices(int64_t n, std::optional<int64_t> start, std::optional<int64_t> stop,
                                   std::optional<int64_t> step);

// Options of json.dumps as HF's tojson filter exposes them (its default is ensure_ascii=False).
struct JsonOptions {
    int indent = -1;  // < 0: single line
    bool sort_keys = false;
    bool ensure_ascii = false;
    std::optional<std::pair<std::string, std::string>> separators;  // (item, key); default per indent
};

// Python's json.dumps(v, ...) with `opts`.
std::string to_json(const Value& v, const JsonOptions& opts = {});

// Python's repr() of a float (shortest round-trip digits, "1.0", "1e+16").
std::string format_float(double d);

template <typename Json>
Value Value::from_json(const Json& j, int depth) {
    if (depth >= kMaxValueDepth)
        throw EvalError("template variables nest lists and objects more than " +
                        std::to_string(kMaxValueDepth) + " levels deep");
    if (j.is_null()) return Value(nullptr);
    if (j.is_boolean()) return Value(j.template get<bool>());
    if (j.is_number_unsigned()) {
        // Python's ints are unbounded but ours are int64: fail rather than print a wrapped-around number.
        const auto u = j.template get<uint64_t>();
        if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
            throw EvalError("template variables hold the integer " + std::to_string(u) +
                            ", beyond the 64-bit signed range the interpreter supports");
        return Value(static_cast<int64_t>(u));
    }
    if (j.is_number_integer()) return Value(j.template get<int64_t>());
    if (j.is_number_float()) return Value(j.template get<double>());
    if (j.is_string()) return Value(j.template get<std::string>());
    if (j.is_array()) {
        List items;
        items.reserve(j.size());
        for (const auto& item : j) items.push_back(from_json(item, depth + 1));
        return Value(std::move(items));
    }
    if (j.is_object()) {
        std::vector<std::pair<std::string, Value>> entries;
        for (auto it = j.begin(); it != j.end(); ++it)
            entries.emplace_back(it.key(), from_json(it.value(), depth + 1));
        return make_dict(std::move(entries));
    }
    return Value(nullptr);
}

}  // namespace minfer::jinja
