// POST /v1/responses: OpenAI's Responses API over the chat run (chat_run.h). Stateless, as with
// `store: false`: the whole conversation comes in `input` (messages, function_call and
// function_call_output items; reasoning items are dropped), so previous_response_id and conversation are
// 400s. The body becomes a chat request (instructions a system message first, flat function tools nested
// as chat's, text.format as response_format, max_output_tokens as max_tokens, reasoning.effort "none" as
// enable_thinking false and any other effort as true) that the chat parser validates; its errors name the
// fields as this request spelled them. The answer is rendered as responses_render.h says.
#pragma once

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace minfer::server {

struct CompletionContext;

// Throws ApiError for every request problem; the caller renders it.
void handle_responses(const CompletionContext& ctx, const httplib::Request& req, httplib::Response& res);

}  // namespace minfer::server
