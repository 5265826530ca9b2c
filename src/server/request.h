// OpenAI request bodies as typed requests: /v1/chat/completions and /v1/completions parsed from JSON and
// validated field by field, each mistake a 400 naming the field (wrong type, out of range, unknown role).
// Fields the engine has no use for (user, metadata, ...) are ignored, as OpenAI-compatible servers do.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/generate.h"

namespace minfer::grammar {
class Grammar;
}

namespace minfer::server {

enum class Endpoint { Chat, Completion };

// tool_choice: auto (the model decides), none (no tools offered), required (at least one call), or one
// named function.
enum class ToolChoice { Auto, None, Required, Named };

struct CompletionRequest {
    Endpoint endpoint = Endpoint::Completion;
    std::string model;  // as sent (any value is accepted: one model is served)
    // Chat: [{role, content}] with content as plain strings; assistant messages keep tool_calls (their
    // arguments as JSON values, as templates print them) and reasoning_content, tool messages tool_call_id.
    nlohmann::ordered_json messages;
    nlohmann::ordered_json tools = nlohmann::ordered_json::array();  // [{type: function, function}] as sent
    ToolChoice tool_choice = ToolChoice::Auto;
    std::string tool_name;  // ToolChoice::Named
    bool parallel_tool_calls = true;
    nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();  // enable_thinking, ...
    std::string prompt;                              // Completion: the prompt text ...
    std::optional<std::vector<int32_t>> prompt_ids;  // ... or its token ids, used as given
    GenerateParams gen;                              // n_predict 0 until the prompt's length sets the default
    std::optional<int64_t> max_tokens;               // max_tokens / max_completion_tokens
    bool seed_given = false;
    int n = 1;          // choices
    int logprobs = -1;  // -1: none; k >= 0: each token's logprob and its k most likely alternatives
    bool stream = false, include_usage = false;
    std::shared_ptr<const grammar::Grammar>
        format;  // response_format json_object / json_schema: the answer's grammar
};

struct ParseLimits {
    int64_t n_ctx = 4096;  // the most tokens one sequence holds: max_tokens may not exceed it
    int max_n = 16;        // the most choices per request
};

// Parses a request body; throws ApiError (400) with a message naming the offending field.
CompletionRequest parse_completion_request(const std::string& body, Endpoint endpoint,
                                           const ParseLimits& lim);

// The body as a JSON object; throws ApiError (400) for malformed JSON (invalid UTF-8 included) or a
// body that is not an object.
nlohmann::ordered_json parse_json_object(const std::string& body);

}  // namespace minfer::server
