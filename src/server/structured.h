// Structured output's grammars: response_format ({"type": "json_object"} or {"type": "json_schema",
// "json_schema": {"name", "schema", "strict"}}) and the call a forced tool_choice makes the model write
// (`{"name": NAME, "arguments": ARGS}` with ARGS under the tool's parameters schema). A schema the
// grammar compiler cannot take is a 400 naming the field and the keyword.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>

namespace minfer::grammar {
class Grammar;
}

namespace minfer::server {

struct CompletionRequest;

// nullptr for no response_format or {"type": "text"}.
std::shared_ptr<const grammar::Grammar> response_format_grammar(const nlohmann::ordered_json& body);

// tool_choice required (any offered tool) or named (that one): the call object's grammar, its
// arguments under `arguments_key` ("arguments", or Llama 3's "parameters").
std::shared_ptr<const grammar::Grammar> forced_call_grammar(const CompletionRequest& r,
                                                            const char* arguments_key);

}  // namespace minfer::server
