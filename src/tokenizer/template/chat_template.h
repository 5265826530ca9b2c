// Chat-template rendering: formats a conversation into the model's prompt text with the Jinja2 chat
// template stored in the GGUF (tokenizer.chat_template), exactly as HF transformers'
// apply_chat_template does (trim_blocks/lstrip_blocks, loop controls, json.dumps-style tojson,
// raise_exception). Constructs the interpreter does not implement fail with minfer::Error naming the
// construct and template line instead of producing a different prompt.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace minfer {

// Template variables: `messages`, `add_generation_prompt`, `tools` and `documents` (none unless given),
// plus every entry of the `extra` object (bos_token, eos_token, tools, enable_thinking, ...), which
// override the defaults. `extra` may be null. nlohmann::json sorts object keys; use the ordered_json
// overload when key order matters (e.g. tool schemas printed with tojson).
std::string render_chat_template(const std::string& tmpl, const nlohmann::json& messages,
                                 bool add_generation_prompt, const nlohmann::json& extra = {});
std::string render_chat_template(const std::string& tmpl, const nlohmann::ordered_json& messages,
                                 bool add_generation_prompt, const nlohmann::ordered_json& extra = {});

}  // namespace minfer
