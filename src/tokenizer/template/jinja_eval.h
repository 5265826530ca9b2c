// Evaluator of the chat-template interpreter: renders a parsed template with Jinja2's scoping (each
// loop iteration and macro call gets its own scope; namespace() objects carry state out of loops).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/template/jinja_ast.h"

namespace minfer::jinja {

// Renders `tmpl` with `globals` (plus the builtin functions) as template variables. Errors throw
// minfer::Error naming the template line; raise_exception(msg) throws minfer::Error carrying msg.
std::string render(const Body& tmpl, const std::vector<std::pair<std::string, Value>>& globals);

}  // namespace minfer::jinja
