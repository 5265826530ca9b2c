// POST /v1/chat/completions and /v1/completions: parse and validate, build the prompt, submit the job,
// then answer with one object or stream server-sent events as the choices' text arrives. A client that
// goes away (mid-stream: a failed write, or httplib ending the stream; waiting for a whole answer: its
// connection polled between steps) cancels the job, so its sequences leave the batch at the next step and
// their KV blocks return to the pool.
#pragma once
#include <string>

#include "server/request.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace minfer::server {

class EngineLoop;
class PromptBuilder;

// Tokens a request used, for its log line (kept per HTTP thread: a stream ends on the thread that began it).
struct RequestTokens {
    int64_t prompt = 0, generated = 0;
};
RequestTokens& request_tokens();

struct CompletionContext {
    EngineLoop& loop;
    const PromptBuilder& prompt;
    std::string model_name;
};

// Throws ApiError for every request problem; the caller renders it.
void handle_completion(const CompletionContext& ctx, const httplib::Request& req, httplib::Response& res,
                       Endpoint endpoint);

}  // namespace minfer::server
