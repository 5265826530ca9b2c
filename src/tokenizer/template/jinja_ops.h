// Operators of the chat-template interpreter with Python/Jinja2 semantics: attribute and item access,
// slicing, arithmetic, comparison, membership, iteration and len(). Type errors throw EvalError.
#pragma once
#include <optional>
#include <string>

#include "tokenizer/template/jinja_value.h"

namespace minfer::jinja {

// obj.name: a dict entry (dict methods such as items() take precedence, as in Jinja) or a bound method of
// a str, dict or list; undefined when absent. Throws when obj itself is undefined.
Value get_attr(const Value& obj, const std::string& name);
// obj[key]: dict entry, list element or character (negative indices count from the end); undefined when
// absent or out of range. Throws when obj itself is undefined.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] of a list, tuple or string.
Value get_slice(const Value& obj, std::optional<int64_t> start, std::optional<int64_t> stop,
                std::optional<int64_t> step);

// op is one of + - * / // % ** ~ == != < > <= >= in "not in".
Value binary_op(const std::string& op, const Value& a, const Value& b);
// op is "-" or "+".
Value unary_op(const std::string& op, const Value& a);
// Python's `item in container`.
bool contains(const Value& container, const Value& item);
// The items a for loop visits: list elements, dict keys, string characters; nothing for undefined.
List iterate(const Value& v);
// Python's len(); 0 for undefined.
int64_t length(const Value& v);

}  // namespace minfer::jinja
