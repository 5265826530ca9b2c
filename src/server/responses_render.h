// OpenAI's Responses API on the wire: the response object ({"object": "response", "output": [items]})
// made from a chat answer, and its server-sent events. Items come in the order the model writes them:
// a reasoning item (its text as a reasoning_text part), a message (one output_text part), then one
// function_call item per call. An answer cut short by max_output_tokens is status "incomplete" with its
// last item "incomplete".
//
// Streamed, every event is `event: TYPE` with `data: {"type": TYPE, "sequence_number": N, ...}` (no
// [DONE]): response.created, response.in_progress; per item output_item.added, for a message or
// reasoning content_part.added, the deltas (output_text.delta, reasoning_text.delta or
// function_call_arguments.delta), their .done, content_part.done, output_item.done; last
// response.completed, response.incomplete or response.failed with the whole response.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "server/chat_run.h"

namespace minfer {
class Tokenizer;
}

namespace minfer::server {

// What one response's objects share.
struct ResponsesMeta {
    std::string id;  // resp_...
    std::string model;
    int64_t created_at = 0;
    // The request's settings the response repeats, as OpenAI does: instructions, tools, tool_choice,
    // text, temperature, top_p, parallel_tool_calls, max_output_tokens, reasoning, metadata, store, ...
    nlohmann::json echo = nlohmann::json::object();
    const Tokenizer* tok = nullptr;  // counts the reasoning's tokens for usage
};
ResponsesMeta make_responses_meta(const std::string& model, nlohmann::json echo, const Tokenizer& tok);

// The response to a whole (not streamed) request.
nlohmann::json response_json(const ResponsesMeta& m, const ChatAnswer& a);

// The events of a streamed response, for run_chat_streaming.
std::shared_ptr<ChatStreamWriter> responses_stream_writer(ResponsesMeta m);

}  // namespace minfer::server
