// A request's run on the engine, shared by every generating route: submit (prompt built and checked,
// defaults from the context), wait for a whole answer while watching the client, or stream it. The
// routes with their own wire format (/v1/responses, /v1/messages) translate their body into a chat
// CompletionRequest and render its answer's parts (chat_output.h) through a ChatStreamWriter.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "server/api_error.h"
#include "server/chat_output.h"
#include "server/completions.h"
#include "server/prompt.h"
#include "runtime/scheduler.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace minfer::server {

struct Job;
class PeerWatch;

struct Submitted {
    PreparedPrompt prompt;
    std::shared_ptr<Job> job;
};
// Builds r's prompt, sets its defaults (max tokens: the rest of the context; a random seed unless
// given; one call when parallel_tool_calls is false) and submits it. Throws ApiError (400, 503).
Submitted submit_request(const CompletionContext& ctx, CompletionRequest& r);

// Waits for every choice, polling the client between steps: one that hung up cancels the job and gives
// false. Throws ApiError (500) when the engine failed.
bool wait_whole(EngineLoop& loop, Job& job, const PeerWatch& peer);
// The results of a finished job's choices, counted for the request's log line.
std::vector<GenerationResult> finished_results(const Job& job);
ApiError engine_error(const std::string& why);

// A chat choice's answer split into its parts, reading the forced start first.
ChatDelta parse_answer(const PreparedPrompt& p, const std::string& text);

// One chat answer (choice 0) as a route renders it.
struct ChatAnswer {
    ChatDelta parts;
    GenerationResult result;
    bool called_tools = false;
};
// The whole answer, or nothing when the client went away.
std::optional<ChatAnswer> run_chat_whole(const CompletionContext& ctx, CompletionRequest& r,
                                         const httplib::Request& req);

// A route's server-sent events for one streamed chat answer; each call returns the text to send.
class ChatStreamWriter {
  public:
    virtual ~ChatStreamWriter() = default;
    virtual std::string begin(int64_t prompt_tokens) = 0;  // once, before any part
    virtual std::string parts(const ChatDelta& d) = 0;     // new parts, in order
    virtual std::string end(const ChatAnswer& whole) = 0;  // once, with the parts put together
    virtual std::string fail(const ApiError& e) = 0;       // instead of end: the engine failed
};
void run_chat_streaming(const CompletionContext& ctx, CompletionRequest& r, std::shared_ptr<ChatStreamWriter> w,
                        httplib::Response& res);

}  // namespace minfer::server
