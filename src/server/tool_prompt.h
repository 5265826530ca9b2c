// Tools for chat templates that do not render them (no `tools` variable, no <tool_call> syntax): the
// conversation is rewritten into plain messages in the Hermes format that Qwen's templates use, so any
// chat model can be offered functions and shown its earlier calls and their results.
//   - the tools' signatures go into the system message (one is added first when there is none);
//   - an assistant message's tool_calls become <tool_call>{"name", "arguments"}</tool_call> text;
//   - a tool message becomes a user message holding <tool_response>…</tool_response> (consecutive ones
//     in one message).
#pragma once
#include <nlohmann/json.hpp>

namespace minfer::server {

// `tools` may be empty (earlier calls are still rewritten); messages as CompletionRequest holds them.
nlohmann::ordered_json messages_with_tools(const nlohmann::ordered_json& messages,
                                           const nlohmann::ordered_json& tools);

// The text of one call as the Hermes format writes it (what the model is asked to write).
std::string hermes_call(const nlohmann::ordered_json& name, const nlohmann::ordered_json& arguments);

}  // namespace minfer::server
