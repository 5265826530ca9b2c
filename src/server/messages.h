// POST /v1/messages: Anthropic's Messages API. The body (system, messages of text / tool_use /
// tool_result / thinking blocks, tools with input_schema, tool_choice, stop_sequences, thinking) is
// translated into a chat request and runs as /v1/chat/completions does (chat_run.h); the answer comes
// back as a message of thinking, text and tool_use blocks, or streamed as Anthropic's events
// (message_start, content_block_start/delta/stop per block, message_delta, message_stop). Errors on this
// route use Anthropic's envelope {"type": "error", "error": {"type", "message"}}.
//
// Tool-call ids: the parser's "call_X" is sent as "toolu_X"; a tool_use id or tool_use_id sent back as
// "toolu_X" is read as "call_X" (any other id is kept as is), so a conversation round-trips.
#pragma once
#include <functional>
#include <string>

#include "server/api_error.h"
#include "server/completions.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace minfer::server {

// Whether `path` is served in Anthropic's shapes (its errors, the 401 before routing included).
bool anthropic_route(const std::string& path);

// {"type": "error", "error": {"type": ..., "message": ...}}, the type named as Anthropic names it for
// the status (invalid_request_error, authentication_error, not_found_error, api_error, ...).
std::string anthropic_error_json(const ApiError& e);
void send_anthropic_error(httplib::Response& res, const ApiError& e);

// Runs fn; whatever it throws is rendered in Anthropic's envelope (request mistakes as 400s).
void anthropic_guarded(httplib::Response& res, const std::function<void()>& fn);

// Throws ApiError for every request problem, naming the Anthropic field.
void handle_messages(const CompletionContext& ctx, const httplib::Request& req, httplib::Response& res);

}  // namespace minfer::server
