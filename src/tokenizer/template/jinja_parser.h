// Parser of the chat-template interpreter: turns a Jinja2 template into a statement tree, following
// Jinja2's grammar and operator precedence. Tags it does not implement (include, extends, call,
// filter blocks, recursive loops, ...) are rejected with minfer::Error naming the tag and its line.
#pragma once
#include <string>

#include "tokenizer/template/jinja_ast.h"

namespace minfer::jinja {

Body parse_template(const std::string& source);

}  // namespace minfer::jinja
