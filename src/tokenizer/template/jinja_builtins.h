// Builtins of the chat-template interpreter: Jinja2 filters and tests, methods of str/dict values,
// global functions (range, namespace, dict, raise_exception, strftime_now) and the Python string
// helpers they share.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/template/jinja_value.h"

namespace minfer::jinja {

using FilterFn = Value (*)(const Value& subject, const Args& args);
using TestFn = bool (*)(const Value& subject, const Args& args);

// nullptr when there is no filter / test of that name.
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);

// Bound method `name` of a str, dict, list or tuple value; undefined when the type has no such method.
Value find_method(const Value& self, const std::string& name);

// Global functions every template sees.
std::vector<std::pair<std::string, Value>> builtin_globals();

// Python str methods on UTF-8 text.
enum class StripSide { Left, Right, Both };
// str.strip/lstrip/rstrip: `chars` is none/undefined for whitespace, else a string of characters.
std::string py_strip(const std::string& s, const Value& chars, StripSide side);
std::string py_upper(const std::string& s);
std::string py_lower(const std::string& s);
std::string py_capitalize(const std::string& s);
std::string py_title(const std::string& s);  // Jinja's title filter: capitalise each word
std::string py_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count);

}  // namespace minfer::jinja
